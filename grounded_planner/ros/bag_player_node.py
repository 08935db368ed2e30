"""bag_player_node: plays a rosbag2 (MCAP or sqlite3) onto its recorded topics — the camera for replays."""

from __future__ import annotations

import threading
import time

from rclpy.node import Node
from rclpy.qos import QoSProfile

from grounded_planner.ros.bags import BagFileError, bag_topics, message_class, read_bag_raw
from grounded_planner.ros.node_main import run_node
from grounded_planner.ros.params import Param, declare_all, existing_path, positive, resolve_data_path, values

PARAMS = [
    Param("bag", "", "rosbag2 directory, .mcap or .db3 file to play (required)", existing_path, read_only=True),
    Param("rate", 1.0, "playback speed relative to the recorded timing (2.0 = twice as fast)", positive),
    Param("loop", False, "start again from the beginning at the end of the bag"),
    Param("topics", [""], "topics to play; [''] (default): every topic in the bag", read_only=True),
    Param("wait_for_subscribers", False,
          "hold playback until every played topic has a subscriber (so nothing is lost to discovery)", read_only=True),
    Param("autostart", True, "start playing at startup (false: call play() in-process)", read_only=True),
]


class BagPlayerNode(Node):
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
            raise BagFileError(f"bag {self.bag_path} has no topic {', '.join(missing)} (it has {', '.join(sorted(types))})")
        self._topic_pubs = {}
        for topic, msgtype in sorted(types.items()):
            if wanted and topic not in wanted:
                continue
            try:
                cls = message_class(msgtype)
            except BagFileError as exc:
                self.get_logger().warning(f"skipping topic {topic}: {exc}")
                continue
            self._topic_pubs[topic] = self.create_publisher(cls, topic, QoSProfile(depth=10))
        if not self._topic_pubs:
            raise BagFileError(f"bag {self.bag_path}: no topic with an importable message type")
        self.finished = threading.Event()  # set after the last message of a non-looping play
        self.messages_published = 0
        self.passes = 0
        self.get_logger().info(f"bag {self.bag_path}: {', '.join(self._topic_pubs)}")
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
