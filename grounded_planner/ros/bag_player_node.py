"""bag_player_node: plays a rosbag2 (MCAP or sqlite3) onto its recorded topics — the camera for replays.

Recorded names are played relative to the node's namespace: ``/camera/camera/color/image_raw`` in a bag reaches
``/robot1/camera/camera/color/image_raw`` from a player in ``/robot1`` (and itself from one in the root namespace).
"""

from __future__ import annotations

import struct
import threading
import time

from rclpy.node import Node
from rclpy.qos import QoSProfile

from grounded_planner.ros.bags import BagFileError, bag_topics, message_class, read_bag_raw
from grounded_planner.ros.node_main import StackNode, run_node
from grounded_planner.ros.params import Param, declare_all, existing_path, positive, resolve_data_path, values

PARAMS = [
    Param("bag", "", "rosbag2 directory, .mcap or .db3 file to play (required)", existing_path, read_only=True),
    Param("rate", 1.0, "playback speed relative to the recorded timing (2.0 = twice as fast)", positive),
    Param("loop", False, "start again from the beginning at the end of the bag"),
    Param("topics", [""], "topics to play; [''] (default): every topic in the bag", read_only=True),
    Param(
        "wait_for_subscribers",
        False,
        "hold playback until every played topic has a subscriber (so nothing is lost to discovery)",
        read_only=True,
    ),
    Param("autostart", True, "start playing at startup (false: call play() in-process)", read_only=True),
    Param(
        "restamp",
        True,
        "move every header stamp to the playback time (the recording's spacing, scaled by rate), as a live "
        "camera stamps its frames, so that nodes refusing old frames (max_frame_age_s) take the bag for a camera; "
        "false: the recorded stamps (then run the graph on the bag's time)",
        read_only=True,
    ),
]
CDR_LE = b"\x00\x01"  # the encapsulation of little-endian CDR, which every ROS 2 middleware writes


def header_stamp_ns(raw: bytes) -> int:
    """The header stamp (ns) of CDR bytes of a message whose first field is a std_msgs/Header; 0 when unknown."""
    if raw[:2] != CDR_LE or len(raw) < 12:
        return 0
    sec, nanosec = struct.unpack_from("<iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def restamped(raw: bytes, offset_ns: int) -> bytes:
    """CDR bytes of a message whose first field is a std_msgs/Header, with its stamp moved by ``offset_ns``
    (an unstamped message, 0, stays so: it is refused as unstamped, not passed off as fresh)."""
    stamp_ns = header_stamp_ns(raw)
    if stamp_ns == 0:
        return raw
    sec, nanosec = divmod(stamp_ns + offset_ns, 1_000_000_000)
    if not -(2**31) <= sec < 2**31:
        return raw
    out = bytearray(raw)
    struct.pack_into("<iI", out, 4, sec, nanosec)
    return bytes(out)


def starts_with_header(cls) -> bool:
    """Does message class ``cls`` begin with a std_msgs/Header (Image, CompressedImage, CameraInfo, ...)?"""
    fields = iter(cls.get_fields_and_field_types().items())
    return next(fields, None) == ("header", "std_msgs/Header")


class BagPlayerNode(StackNode, Node):
    """Publishes every message of the bag, as recorded (CDR bytes untouched), keeping recorded gaps / rate."""

    def __init__(self, node_name: str = "bag_player", **kwargs):
        super().__init__(node_name, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        declare_all(self, PARAMS)
        p = values(self, PARAMS)
        if not p["bag"]:
            raise BagFileError("parameter 'bag' is empty: pass -p bag:=PATH (a rosbag2 directory, .mcap or .db3)")
        self.bag_path = resolve_data_path(p["bag"])
        wanted = [t for t in p["topics"] if t]
        types = bag_topics(self.bag_path)
        missing = [t for t in wanted if t not in types]
        if missing:
            raise BagFileError(
                f"bag {self.bag_path} has no topic {', '.join(missing)} (it has {', '.join(sorted(types))})"
            )
        self._topic_pubs = {}
        self._stamped: set[str] = set()  # topics whose messages begin with a Header (restamped when asked)
        for topic, msgtype in sorted(types.items()):
            if wanted and topic not in wanted:
                continue
            try:
                cls = message_class(msgtype)
            except BagFileError as exc:
                self.get_logger().warning(f"skipping topic {topic}: {exc}")
                continue
            # under the node's namespace (a second robot's bag in /robot2 plays onto /robot2/camera/...); in the
            # root namespace the recorded name itself
            self._topic_pubs[topic] = self.create_publisher(cls, topic.lstrip("/"), QoSProfile(depth=10))
            if starts_with_header(cls):
                self._stamped.add(topic)
        if not self._topic_pubs:
            raise BagFileError(f"bag {self.bag_path}: no topic with an importable message type")
        self.finished = threading.Event()  # set after the last message of a non-looping play
        self.messages_published = 0
        self.passes = 0
        self.get_logger().info(f"bag {self.bag_path}: {', '.join(pub.topic_name for pub in self._topic_pubs.values())}")
        if p["autostart"]:
            self.play()

    def play(self) -> None:
        """Start playing in a background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="bag_player", daemon=True)
            self._thread.start()

    def _all_subscribed(self) -> bool:
        return all(pub.get_subscription_count() > 0 for pub in self._topic_pubs.values())

    def _run(self) -> None:
        try:
            if self.get_parameter("wait_for_subscribers").value:
                while not self._stop.is_set() and not self._all_subscribed():
                    self._stop.wait(0.05)
            while not self._stop.is_set() and self.context.ok():
                self._play_once()
                self.passes += 1
                if not self.get_parameter("loop").value:
                    break
            if self.context.ok():  # after Ctrl-C rosout is gone: logging then fails with "context is invalid"
                self.get_logger().info(f"played {self.messages_published} messages in {self.passes} pass(es)")
        except BagFileError as exc:
            self.get_logger().error(str(exc))
        finally:
            self.finished.set()

    def _play_once(self) -> None:
        first_ns = None
        start = 0.0
        offset_ns = None  # playback time minus the recorded stamp of the pass's first stamped message
        restamp = self.get_parameter("restamp").value
        for topic, _msgtype, stamp_ns, raw in read_bag_raw(self.bag_path, self._topic_pubs):
            if self._stop.is_set():
                return
            if first_ns is None:
                # the clock starts at the first message, not before the bag is opened: opening a sqlite3 bag
                # on a busy machine takes longer than a recorded gap, and starting earlier played the first
                # frames back to back
                first_ns, start = stamp_ns, time.monotonic()
            # the rate is re-read per message so that `ros2 param set rate` takes effect mid-bag
            due = start + (stamp_ns - first_ns) / 1e9 / self.get_parameter("rate").value
            delay_s = due - time.monotonic()
            if delay_s > 0 and self._stop.wait(delay_s):
                return
            if restamp and topic in self._stamped and header_stamp_ns(raw):
                # stamped as a live camera would: at playback time, the recording's spacing scaled by the rate
                played_ns = int((stamp_ns - first_ns) / self.get_parameter("rate").value)
                if offset_ns is None:
                    offset_ns = self.get_clock().now().nanoseconds - played_ns - header_stamp_ns(raw)
                raw = restamped(raw, offset_ns + played_ns - (stamp_ns - first_ns))
            try:
                self._topic_pubs[topic].publish(raw)
            except Exception:
                # Ctrl-C shuts the context down under this thread before destroy_node() can stop it: the
                # publish then fails with "publisher's context is invalid". That is the end of playback.
                if self._stop.is_set() or not self.context.ok():
                    return
                raise
            self.messages_published += 1

    def destroy_node(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        super().destroy_node()


def main(args=None) -> None:
    run_node(BagPlayerNode, "bag_player_node", num_threads=1, args=args)


if __name__ == "__main__":
    main()
