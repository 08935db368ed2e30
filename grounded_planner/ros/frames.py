"""The latest colour, depth and camera_info of a camera, kept by subscriptions for nodes that plan on them.

Image topics are subscribed with the type their publishers advertise (sensor_msgs/Image or CompressedImage),
else the type image_transport's naming implies (``.../compressed``, ``.../compressedDepth``); a topic of any
other type is reported once, in one line naming the topic, its type and the accepted types.

The images are taken on demand: the middleware keeps the newest one of each topic in its reader history, and it
becomes a Python message only when a request asks for it, not 30 times a second in the executor. A node that plans
on one frame every few seconds no longer spends CPU (and the GIL its request handlers need) turning every frame of
a camera stream into a message it then drops.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import InvalidHandle
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from grounded_planner.errors import InputError, RunFailure
from grounded_planner.msgs.camera_info import camera_model_from_msg, same_calibration
from grounded_planner.msgs.images import (
    CAMERA_INFO_MSGTYPE,
    COMPRESSED_MSGTYPE,
    IMAGE_MSGTYPE,
    TopicTypeError,
    camera_info_topic_of,
    depth_to_m,
    image_size,
    image_topic_type,
)
from grounded_planner.geometry.targets import backproject as geometry_backproject
from grounded_planner.plan import GroundedPlan
from grounded_planner.ros import names
from grounded_planner.ros.params import Param, extrinsics_file, non_empty, non_negative

MESSAGE_CLASSES = {IMAGE_MSGTYPE: Image, COMPRESSED_MSGTYPE: CompressedImage, CAMERA_INFO_MSGTYPE: CameraInfo}
# how often a subscription's type is checked against what the topic's publishers advertise, seconds
TYPE_CHECK_PERIOD_S = 1.0
# the frame set each plan was made on (names.PLAN_FRAMES_*), from planner_node to the rollout logger: latched, as the
# plan is, so a subscription the middleware matched a moment late (a logger just started, or restarted) still gets
# the last plan's depth and camera_info (seen in CI); two deep, so a second plan answered at once cannot push the
# first's set out before it was delivered. One profile for both ends: a latched subscription matches no volatile
# publisher.
PLAN_FRAMES_QOS = QoSProfile(depth=2, durability=DurabilityPolicy.TRANSIENT_LOCAL)
# how often wait_for looks again for an image that is taken on demand, while none has arrived yet, seconds
ON_DEMAND_POLL_S = 0.005
_WHAT = {
    "color": "colour image",
    "depth": "depth image",
    "camera_info": "camera_info",
    "depth_camera_info": "camera_info",
}


class NoFrameError(RunFailure):
    """A frame, depth image or camera_info that a request needs has not arrived (names the topic)."""


class StaleFrameError(NoFrameError):
    """The newest message on a topic is older than ``max_frame_age_s`` by its stamp against the node's clock (a
    camera that died, a bag that ended): ``stale frame: TOPIC is 34.2 s old (max_frame_age_s 1.0)``."""


class UnmatchedFramesError(NoFrameError):
    """Colour, depth and camera_info whose stamps lie further apart than the tolerance: not one instant."""


class CdrError(InputError):
    """Bytes from the middleware that do not read as the message type they came as (truncated, or written for
    another definition): ``sensor_msgs/msg/Image: 49 bytes do not read as one (Invalid sequence length 12 ...)``."""


# An age beyond this says the stamps and the node's clock count from different origins (a bag's stamps against
# the wall clock, or no stamps at all), not that the camera is slow.
CLOCK_MISMATCH_S = 24 * 3600.0


def stamp_ns(msg) -> int:
    """A message's header stamp in integer nanoseconds."""
    return int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)


@dataclass(frozen=True)
class FrameCheck:
    """What a frame set must satisfy: ``max_age_s`` by stamp against ``now_ns()`` (the node's clock, so bag time
    under use_sim_time; 0 = no limit), and stamps within ``tolerance_s`` of each other. ``given_ns``: the stamp
    of an image a request brought along, held to the same age limit (its depth comes from the topics: a much
    older image would be located in a scene that has moved on)."""

    now_ns: Callable[[], int]
    max_age_s: float
    tolerance_s: float
    given_ns: int | None = None
    not_before_ns: int | None = None  # every frame stamped at or after this (a check looks at the scene after a motion)

    def __call__(self, snap: "Snapshot", keys: tuple[str, ...], topics: dict[str, str]) -> None:
        """Raise StaleFrameError (the oldest topic and its age) or UnmatchedFramesError (the two topics and how far
        apart) when the messages of ``keys`` in ``snap`` are not one fresh instant; keys without a message are
        skipped."""
        present = [(k, getattr(snap, k)) for k in keys if getattr(snap, k) is not None]
        stamps = [(topics[k], stamp_ns(m)) for k, m in present]
        if self.given_ns:
            stamps.append(("the request's image", self.given_ns))
        if self.max_age_s > 0 and stamps:
            what, oldest_ns = min(stamps, key=lambda ws: ws[1])
            age_s = (self.now_ns() - oldest_ns) / 1e9
            if age_s > self.max_age_s:
                hint = (
                    "; its stamp and this node's clock count from different origins (a bag played without "
                    "use_sim_time, or unstamped messages?)"
                    if age_s > CLOCK_MISMATCH_S
                    else ""
                )
                raise StaleFrameError(
                    f"stale frame: {what} is {age_s:.1f} s old (max_frame_age_s {self.max_age_s:g}){hint}"
                )
        if not present:
            return
        if self.not_before_ns is not None:
            for key, msg in present:
                if stamp_ns(msg) < self.not_before_ns:
                    raise StaleFrameError(
                        f"stale frame: {topics[key]} is stamped {(self.not_before_ns - stamp_ns(msg)) / 1e9:.1f} s "
                        "before the frame was asked for (no camera frame newer than the request)"
                    )
        ref_key, ref_ns = topics[present[0][0]], stamp_ns(present[0][1])
        for key, msg in present:
            apart_s = (stamp_ns(msg) - ref_ns) / 1e9
            if abs(apart_s) > self.tolerance_s:
                raise UnmatchedFramesError(
                    f"frames do not match: {topics[key]} is stamped {abs(apart_s):.3f} s "
                    f"{'after' if apart_s > 0 else 'before'} {ref_key} (frame_stamp_tolerance_s {self.tolerance_s:g}); "
                    "colour, depth and camera_info must be one instant"
                )


class DepthNotAlignedError(InputError):
    """Depth whose own calibration differs from the colour camera's: its pixels are not the colour pixels."""


@dataclass
class Snapshot:
    """The newest messages seen on each topic (None where nothing arrived yet)."""

    color: Any
    depth: Any
    camera_info: CameraInfo | None
    depth_camera_info: CameraInfo | None = None


# The parameters of every node that takes camera frames (planner, back-projection, executor's closed loop).
FRESHNESS_PARAMS = [
    Param(
        "max_frame_age_s",
        1.0,
        "refuse a frame older than this by its header stamp against the node's clock "
        "(bag time under use_sim_time), seconds; 0 = no limit",
        non_negative,
    ),
    Param(
        "frame_stamp_tolerance_s",
        0.05,
        "colour, depth and camera_info are one instant when their stamps lie within this of each other, seconds",
        non_negative,
    ),
]

# What every node that back-projects (planner, back-projection) reads for it: the depth inputs, read once at startup,
# and the calibration, reloaded when it changes
BACKPROJECTION_PARAMS = [
    Param(
        "depth_topic",
        names.ALIGNED_DEPTH_IMAGE,
        "depth aligned to colour (16UC1 mm or 32FC1 m; Image or .../compressedDepth)",
        non_empty,
        read_only=True,
    ),
    Param("camera_info_topic", names.COLOR_CAMERA_INFO, "intrinsics of the colour camera", non_empty, read_only=True),
    Param(
        "depth_camera_info_topic",
        "auto",
        "the depth image's own camera_info: when it differs from colour's, back-projection refuses "
        "(auto = beside depth_topic, as image_transport finds it; '' = no check)",
        read_only=True,
    ),
    Param("depth_registered", False, "trust that depth is registered to colour even when its camera_info differs"),
    Param(
        "extrinsics_file",
        "",
        "camera->robot base calibration YAML; '' = poses stay in the camera optical frame",
        extrinsics_file,
    ),
]


def frame_check(node: Node, given_ns: int | None = None) -> "FrameCheck":
    """The FrameCheck of a node that declared FRESHNESS_PARAMS (``given_ns``: the stamp of a request's image)."""
    return FrameCheck(
        node_clock_ns(node),
        float(node.get_parameter("max_frame_age_s").value),
        float(node.get_parameter("frame_stamp_tolerance_s").value),
        given_ns,
    )


def node_clock_ns(node: Node) -> Callable[[], int]:
    """The node's clock in ns (ROS time: the /clock of a bag under use_sim_time, else the wall clock)."""
    return lambda: node.get_clock().now().nanoseconds


def camera_model(info: CameraInfo, frame_id: str = ""):
    """CameraInfo -> geometry CameraModel (the frame id defaults to the message's); CameraModelError if unusable."""
    return camera_model_from_msg(info, frame_id)


def depth_info_topic(param: str, depth_topic: str) -> str:
    """The ``depth_camera_info_topic`` parameter resolved: ``auto`` = the camera_info beside ``depth_topic``."""
    return camera_info_topic_of(depth_topic) if param == "auto" else param


def _advertised(publishers) -> tuple[list[str], bool]:
    """(the types ``publishers`` advertise, whether any of them publishes best effort), from
    ``Node.get_publishers_info_by_topic`` (empty when nobody publishes yet; our subscriptions don't count)."""
    types: list[str] = []
    for info in publishers:
        if info.topic_type not in types:
            types.append(info.topic_type)
    best_effort = any(info.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for info in publishers)
    return types, best_effort


class TakenOnDemand(CallbackGroup):
    """A callback group that no rclpy executor runs: its subscriptions' messages wait in the middleware's reader
    history (KEEP_LAST: the newest ``depth`` of them) until their owner takes them with :func:`take_newest`.

    Nothing in the group runs, the subscriptions' QoS event handlers included: rmw_fastrtps reports a
    subscription's events ready while its data waits untaken, so an executor that waited on them would never
    sleep (a node at 100 % of a CPU); create the subscriptions without event handlers
    (``SubscriptionEventCallbacks(use_default_callbacks=False)``). rclpy's Python executors (SingleThreaded,
    MultiThreaded) honour ``can_execute``; the experimental C++ EventsExecutor does not look at callback groups
    and would run the callbacks.
    """

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


@functools.cache
def _cdr_store():
    from rosbags.typesys import Stores, get_typestore  # lazy: optional SDK (rosbags), not in install_requires

    return get_typestore(Stores.ROS2_KILTED)


def read_cdr(serialized: bytes, msgtype: str):
    """A message from the CDR bytes the middleware delivered, read by rosbags (``msgtype``: 'sensor_msgs/msg/Image'):
    the same fields as rclpy's message, its uint8 arrays as numpy arrays. For a 1280x720 rgb8 Image that is one copy
    of the data, 0.47 ms here, where rclpy's conversion builds an array.array with the GIL held (1.46 ms idle, 2.6 ms
    on a busy machine): for a live view, the frames nobody plans on. CdrError for bytes that do not read as
    ``msgtype``."""
    from rosbags.serde import SerdeError  # lazy: optional SDK (rosbags), as in _cdr_store

    store = _cdr_store()
    try:
        return store.deserialize_cdr(serialized, msgtype)
    except SerdeError as exc:  # rosbags wraps struct, Unicode and value errors of a bad payload in it
        raise CdrError(f"{msgtype}: {len(serialized)} bytes do not read as one ({exc})") from exc


def take_newest(subscription: Subscription, read: Callable[[bytes], Any] | None = None):
    """The newest message waiting in ``subscription``'s reader history (older ones are dropped), or None when
    nothing is waiting or the subscription was destroyed meanwhile. Every waiting message is taken serialized and
    only the newest is turned into a Python message: rclpy's conversion of a 1280x720 rgb8 Image costs 2.6 ms
    here, with the GIL held, and the ones dropped were paying it too. ``read``: turns the newest's CDR bytes into the
    message instead of rclpy (:func:`read_cdr`)."""
    newest = None
    try:
        with subscription.handle:
            while (taken := subscription.handle.take_message(subscription.msg_type, True)) is not None:
                newest = taken[0]
    except InvalidHandle:  # destroyed by a type change (TypedSubscription.check) while we took
        return None
    if newest is None or subscription.raw:
        return newest
    return deserialize_message(newest, subscription.msg_type) if read is None else read(newest)


class TypedSubscription:
    """A subscription to an image topic whose message type follows the topic's actual type.

    Created with the advertised type (or image_transport's naming); when the graph later shows the publisher
    uses the other accepted type, it subscribes again with that one. A topic of an unaccepted type gets one
    error line (repeated only when its type changes) and no subscription.

    ``on_demand``: no callbacks; :meth:`take` returns the newest message waiting in the middleware (see
    :class:`TakenOnDemand`). Such a subscription has no QoS event handlers, so instead of a warning about
    incompatible QoS it follows the publishers' reliability: best effort as soon as one publishes best effort
    (a best-effort reader matches every writer), ``qos``'s own otherwise.

    The type is checked every TYPE_CHECK_PERIOD_S by a timer of ``node`` (its executor runs it), or, with
    ``checked_by_owner``, by whoever owns the subscription calling :meth:`check_if_due` (for a node that no executor
    spins: the console's camera, whose every timer tick made its executor build a wait set of 34 entities again).
    ``read_by_rosbags``: :meth:`take` reads the message with :func:`read_cdr` (a message for display only: its arrays
    are numpy arrays, not rclpy's types).
    """

    def __init__(
        self,
        node: Node,
        topic: str,
        what: str,
        callback,
        qos,
        callback_group=None,
        on_demand: bool = False,
        checked_by_owner: bool = False,
        read_by_rosbags: bool = False,
    ):
        self._node, self.topic, self.what = node, topic, what
        self._callback, self._qos = callback, qos
        self._group = TakenOnDemand() if on_demand else callback_group
        self.on_demand = on_demand
        self._read_by_rosbags = read_by_rosbags
        self._sub = None
        self.msgtype = ""
        self.best_effort = False  # the on-demand subscription's reliability follows the publishers'
        self.error = ""
        self._checked_at = 0.0
        self.check()
        self._timer = (
            None
            if checked_by_owner
            else node.create_timer(TYPE_CHECK_PERIOD_S, self.check, callback_group=callback_group)
        )

    def check_if_due(self) -> None:
        """:meth:`check` where TYPE_CHECK_PERIOD_S has passed since the last check (``checked_by_owner``)."""
        if time.monotonic() - self._checked_at >= TYPE_CHECK_PERIOD_S:
            self.check()

    def take(self):
        """The newest message waiting for an ``on_demand`` subscription (None when none is waiting)."""
        sub, msgtype = self._sub, self.msgtype
        if sub is None:
            return None
        return take_newest(sub, functools.partial(read_cdr, msgtype=msgtype) if self._read_by_rosbags else None)

    def destroy(self) -> None:
        """Leave the topic: the subscription and its type check go (the middleware delivers nothing more)."""
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
        sub, self._sub = self._sub, None
        if sub is not None:
            self._node.destroy_subscription(sub)

    def check(self) -> None:
        self._checked_at = time.monotonic()
        try:
            publishers = self._node.get_publishers_info_by_topic(self.topic)
        except _rclpy.RCLError:
            if self._node.context.ok():
                raise
            # Ctrl-C shut the context down while this timer was due: the executor ran it once more after the
            # context went (a traceback and a non-zero exit out of the rollout logger, seen in CI); nothing to check
            return
        types, best_effort = _advertised(publishers)
        try:
            wanted = image_topic_type(self.topic, types, self.what)
        except TopicTypeError as exc:
            if str(exc) != self.error:
                self.error = str(exc)
                self._node.get_logger().error(self.error)
            return
        best_effort = best_effort and self.on_demand
        if wanted == self.msgtype and best_effort == self.best_effort and self._sub is not None:
            return
        if self._sub is not None:
            self._node.destroy_subscription(self._sub)
            self._node.get_logger().info(
                f"{self.topic} is {wanted}{', best effort' if best_effort else ''}: subscribing with that type"
            )
        qos = self._qos
        if best_effort:
            qos = QoSProfile(
                depth=qos.depth,
                history=qos.history,
                reliability=ReliabilityPolicy.BEST_EFFORT,
                durability=qos.durability,
            )
        extra = {"event_callbacks": SubscriptionEventCallbacks(use_default_callbacks=False)} if self.on_demand else {}
        try:
            self._sub = self._node.create_subscription(
                MESSAGE_CLASSES[wanted], self.topic, self._callback, qos, callback_group=self._group, **extra
            )
            self.msgtype, self.best_effort, self.error = wanted, best_effort, ""
        except Exception as exc:  # noqa: BLE001 - rclpy's RCLError when a same-process publisher holds another type
            self._sub = None
            message = f"{self.what} topic {self.topic}: cannot subscribe as {wanted} ({exc})"
            if message != self.error:
                self.error = message
                self._node.get_logger().error(message)


class LatestFrames:
    """Subscribes to colour, depth and camera_info (and optionally the depth's camera_info); keeps the newest.

    The colour and depth images are taken on demand (:class:`TakenOnDemand`): :meth:`snapshot` and
    :meth:`wait_for` take the newest image waiting in the middleware, so a camera stream costs the node no Python
    work between requests. The camera_info messages (small) arrive through callbacks in ``callback_group``, which
    also runs the image topics' type checks. An empty topic name leaves that stream out. Thread-safe.
    """

    IMAGES = ("color", "depth")

    def __init__(
        self,
        node: Node,
        color_topic: str,
        depth_topic: str,
        camera_info_topic: str,
        callback_group=None,
        depth_camera_info_topic: str = "",
    ):
        # fully qualified (relative names resolve in the node's namespace), so that a message names the real topic
        topics = {
            "color": color_topic,
            "depth": depth_topic,
            "camera_info": camera_info_topic,
            "depth_camera_info": depth_camera_info_topic,
        }
        self.topics = {key: node.resolve_topic_name(name) if name else "" for key, name in topics.items()}
        self._lock = threading.Lock()
        self._latest: dict[str, object] = {}
        self._arrived = threading.Condition(self._lock)
        self.subscriptions: dict[str, TypedSubscription] = {}
        for key in ("color", "depth", "camera_info", "depth_camera_info"):
            if not self.topics[key]:
                continue  # "" = the caller does not need this stream
            if key in self.IMAGES:
                # the reader history holds the newest images, which is all a request takes (two: with a history of
                # one, rmw_fastrtps stalled on the first fragmented frame); the callback runs only under an executor
                # that ignores callback groups (then it keeps every image)
                self.subscriptions[key] = TypedSubscription(
                    node,
                    self.topics[key],
                    _WHAT[key],
                    self._keeper(key),
                    QoSProfile(depth=2),
                    callback_group,
                    on_demand=True,
                )
            else:
                node.create_subscription(
                    CameraInfo, self.topics[key], self._keeper(key), QoSProfile(depth=2), callback_group=callback_group
                )

    def _keeper(self, key: str):
        def keep(msg) -> None:
            with self._arrived:
                self._latest[key] = msg
                self._arrived.notify_all()

        return keep

    def _take_images(self, keys=IMAGES) -> None:
        """Move the newest waiting image of each of ``keys``' image topics into ``_latest`` (caller holds the lock)."""
        for key, sub in self.subscriptions.items():
            if key in keys:
                msg = sub.take()
                if msg is not None:
                    self._latest[key] = msg

    def _current(self) -> Snapshot:
        return Snapshot(*(self._latest.get(k) for k in ("color", "depth", "camera_info", "depth_camera_info")))  # type: ignore[arg-type]

    def snapshot(self) -> Snapshot:
        with self._lock:
            self._take_images()
            return self._current()

    def wait_for(
        self, keys: tuple[str, ...], timeout_s: float, check: FrameCheck | None = None, optional: tuple[str, ...] = ()
    ) -> Snapshot:
        """Wait up to ``timeout_s`` until each of ``keys`` has arrived (and, with ``check``, until the newest of them
        are fresh and one instant); NoFrameError naming the missing topics, or ``check``'s StaleFrameError /
        UnmatchedFramesError when the deadline passes first.

        The messages of ``keys`` are taken together, once they satisfy ``check``: one matched set. Keys in
        ``optional`` are waited for too, but a snapshot without them is returned at the deadline (None there).
        Only the images among ``keys`` are taken (each costs a deserialization on the request path); the other
        images in the snapshot are as :meth:`snapshot` last took them."""
        deadline = time.monotonic() + timeout_s
        problem: NoFrameError | None = None
        with self._arrived:
            while True:
                self._take_images(keys)
                missing = [k for k in keys if k not in self._latest]
                snap = self._current()
                problem = None
                if check is not None:
                    try:
                        check(snap, keys, self.topics)
                    except NoFrameError as exc:  # stale or unmatched: a newer frame may be on its way
                        problem = exc
                left = deadline - time.monotonic()
                if (not missing and problem is None) or left <= 0:
                    break
                # camera_info callbacks notify; images taken on demand are looked for again after a short poll
                polling = problem is not None or set(missing) & set(self.IMAGES)
                self._arrived.wait(min(left, ON_DEMAND_POLL_S) if polling else left)
        if problem is not None:
            raise problem
        missing = [k for k in missing if k not in optional]
        if missing:
            why = []
            for k in missing:
                sub = self.subscriptions.get(k)
                why.append(f"{self.topics[k]} ({sub.error})" if sub is not None and sub.error else self.topics[k])
            raise NoFrameError(f"nothing received on {', '.join(why)} within {timeout_s:.1f} s")
        return snap


def check_depth_aligned(
    depth, camera_info: CameraInfo, depth_camera_info: CameraInfo | None = None, depth_registered: bool = False
) -> None:
    """Refuse depth whose pixels are not the colour camera's (sizes differ, or its own camera_info differs).

    Raises
    ------
    DepthNotAlignedError
        Naming both sizes or the first calibration difference, unless ``depth_registered`` says the depth
        was registered to colour by other means.
    """
    width, height = image_size(depth)
    if (width, height) != (int(camera_info.width), int(camera_info.height)):
        raise DepthNotAlignedError(
            f"depth is {width}x{height} but the colour camera_info is "
            f"{camera_info.width}x{camera_info.height}: back-projection needs depth aligned "
            "to the colour camera (realsense-ros: align_depth.enable:=true)"
        )
    if depth_camera_info is None or depth_registered:
        return
    difference = same_calibration(depth_camera_info, camera_info)
    if difference is not None:
        raise DepthNotAlignedError(
            f"the depth's camera_info differs from the colour camera's: {difference}; depth is "
            "not aligned to colour (set depth_registered:=true if it is registered anyway)"
        )


def backproject(
    plan: GroundedPlan,
    depth: Any,
    camera_info: CameraInfo,
    extrinsics=None,
    depth_camera_info=None,
    depth_registered: bool = False,
) -> GroundedPlan:
    """``plan`` with its 3D targets inside (``action.target_3d``) from a depth message (Image or compressedDepth)
    and the colour camera_info.

    Targets are in ``extrinsics.parent_frame`` (the optical frame without extrinsics). Raises GeometryError (names
    the action; CameraModelError for an unusable calibration), DepthNotAlignedError, or ImageDecodeError for an
    unusable depth image (all ValueErrors).
    """
    check_depth_aligned(depth, camera_info, depth_camera_info, depth_registered)
    camera = camera_model(camera_info, depth.header.frame_id or camera_info.header.frame_id)
    return geometry_backproject(plan, depth_to_m(depth), camera, extrinsics)
