"""The latest colour, depth and camera_info of a camera, kept by subscriptions for nodes that plan on them.

Image topics are subscribed with the type their publishers advertise (sensor_msgs/Image or CompressedImage),
else the type image_transport's naming implies (``.../compressed``, ``.../compressedDepth``); a topic of any
other type is reported once, in one line naming the topic, its type and the accepted types.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from grounded_planner.msgs.camera_info import camera_model_from_msg, same_calibration
from grounded_planner.msgs.images import (CAMERA_INFO_MSGTYPE, COMPRESSED_MSGTYPE, IMAGE_MSGTYPE, TopicTypeError,
                                          camera_info_topic_of, depth_to_m, image_size, image_topic_type)
from grounded_planner.geometry.targets import backproject as geometry_backproject
from grounded_planner.plan import GroundedPlan

MESSAGE_CLASSES = {IMAGE_MSGTYPE: Image, COMPRESSED_MSGTYPE: CompressedImage, CAMERA_INFO_MSGTYPE: CameraInfo}
# how often a subscription's type is checked against what the topic's publishers advertise, seconds
TYPE_CHECK_PERIOD_S = 1.0
_WHAT = {"color": "colour image", "depth": "depth image", "camera_info": "camera_info", "depth_camera_info": "camera_info"}


class NoFrameError(RuntimeError):
    """A frame, depth image or camera_info that a request needs has not arrived (names the topic)."""


class DepthNotAlignedError(ValueError):
    """Depth whose own calibration differs from the colour camera's: its pixels are not the colour pixels."""


@dataclass
class Snapshot:
    """The newest messages seen on each topic (None where nothing arrived yet)."""

    color: Any
    depth: Any
    camera_info: CameraInfo | None
    depth_camera_info: CameraInfo | None = None


def camera_model(info: CameraInfo, frame_id: str = ""):
    """CameraInfo -> geometry CameraModel (the frame id defaults to the message's); CameraModelError if unusable."""
    return camera_model_from_msg(info, frame_id)


def depth_info_topic(param: str, depth_topic: str) -> str:
    """The ``depth_camera_info_topic`` parameter resolved: ``auto`` = the camera_info beside ``depth_topic``."""
    return camera_info_topic_of(depth_topic) if param == "auto" else param


def advertised_types(node: Node, topic: str) -> list[str]:
    """The types ``topic``'s publishers advertise (empty when nobody publishes it yet); our subscriptions don't count."""
    types: list[str] = []
    for info in node.get_publishers_info_by_topic(topic):
        if info.topic_type not in types:
            types.append(info.topic_type)
    return types


class TypedSubscription:
    """A subscription to an image topic whose message type follows the topic's actual type.

    Created with the advertised type (or image_transport's naming); when the graph later shows the publisher
    uses the other accepted type, it subscribes again with that one. A topic of an unaccepted type gets one
    error line (repeated only when its type changes) and no subscription.
    """

    def __init__(self, node: Node, topic: str, what: str, callback, qos, callback_group=None):
        self._node, self.topic, self.what = node, topic, what
        self._callback, self._qos, self._group = callback, qos, callback_group
        self._sub = None
        self.msgtype = ""
        self.error = ""
        self.check()
        self._timer = node.create_timer(TYPE_CHECK_PERIOD_S, self.check, callback_group=callback_group)

    def check(self) -> None:
        try:
            wanted = image_topic_type(self.topic, advertised_types(self._node, self.topic), self.what)
        except TopicTypeError as exc:
            if str(exc) != self.error:
                self.error = str(exc)
                self._node.get_logger().error(self.error)
            return
        if wanted == self.msgtype and self._sub is not None:
            return
        if self._sub is not None:
            self._node.destroy_subscription(self._sub)
            self._node.get_logger().info(f"{self.topic} is {wanted}: subscribing with that type")
        try:
            self._sub = self._node.create_subscription(MESSAGE_CLASSES[wanted], self.topic, self._callback, self._qos,
                                                       callback_group=self._group)
            self.msgtype, self.error = wanted, ""
        except Exception as exc:  # rclpy's RCLError when a same-process publisher holds another type
            self._sub = None
            message = f"{self.what} topic {self.topic}: cannot subscribe as {wanted} ({exc})"
            if message != self.error:
                self.error = message
                self._node.get_logger().error(message)


class LatestFrames:
    """Subscribes to colour, depth and camera_info (and optionally the depth's camera_info); keeps the newest.

    An empty topic name leaves that stream out. Thread-safe.
    """

    def __init__(self, node: Node, color_topic: str, depth_topic: str, camera_info_topic: str, callback_group=None,
                 depth_camera_info_topic: str = ""):
        self.topics = {"color": color_topic, "depth": depth_topic, "camera_info": camera_info_topic,
                       "depth_camera_info": depth_camera_info_topic}
        self._lock = threading.Lock()
        self._latest: dict[str, object] = {}
        self._arrived = threading.Condition(self._lock)
        qos = QoSProfile(depth=2)
        self.subscriptions: dict[str, TypedSubscription] = {}
        for key in ("color", "depth", "camera_info", "depth_camera_info"):
            if not self.topics[key]:
                continue  # "" = the caller does not need this stream
            if key in ("color", "depth"):
                self.subscriptions[key] = TypedSubscription(node, self.topics[key], _WHAT[key], self._keeper(key), qos,
                                                            callback_group)
            else:
                node.create_subscription(CameraInfo, self.topics[key], self._keeper(key), qos, callback_group=callback_group)

    def _keeper(self, key: str):
        def keep(msg) -> None:
            with self._arrived:
                self._latest[key] = msg
                self._arrived.notify_all()
        return keep

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(*(self._latest.get(k) for k in ("color", "depth", "camera_info", "depth_camera_info")))  # type: ignore[arg-type]

    def wait_for(self, keys: tuple[str, ...], timeout_s: float) -> Snapshot:
        """Wait up to ``timeout_s`` until each of ``keys`` has arrived; NoFrameError naming the missing topics."""
        with self._arrived:
            self._arrived.wait_for(lambda: all(k in self._latest for k in keys), timeout=timeout_s)
            missing = [k for k in keys if k not in self._latest]
        if missing:
            why = []
            for k in missing:
                sub = self.subscriptions.get(k)
                why.append(f"{self.topics[k]} ({sub.error})" if sub is not None and sub.error else self.topics[k])
            raise NoFrameError(f"nothing received on {', '.join(why)} within {timeout_s:.1f} s")
        return self.snapshot()


def check_depth_aligned(depth, camera_info: CameraInfo, depth_camera_info: CameraInfo | None = None,
                        depth_registered: bool = False) -> None:
    """Refuse depth whose pixels are not the colour camera's (sizes differ, or its own camera_info differs).

    Raises
    ------
    DepthNotAlignedError
        Naming both sizes or the first calibration difference, unless ``depth_registered`` says the depth
        was registered to colour by other means.
    """
    width, height = image_size(depth)
    if (width, height) != (int(camera_info.width), int(camera_info.height)):
        raise DepthNotAlignedError(f"depth is {width}x{height} but the colour camera_info is "
                                   f"{camera_info.width}x{camera_info.height}: back-projection needs depth aligned "
                                   "to the colour camera (realsense-ros: align_depth.enable:=true)")
    if depth_camera_info is None or depth_registered:
        return
    difference = same_calibration(depth_camera_info, camera_info)
    if difference is not None:
        raise DepthNotAlignedError(f"the depth's camera_info differs from the colour camera's: {difference}; depth is "
                                   "not aligned to colour (set depth_registered:=true if it is registered anyway)")


def backproject(plan: GroundedPlan, depth: Any, camera_info: CameraInfo, extrinsics=None, depth_camera_info=None,
                depth_registered: bool = False) -> GroundedPlan:
    """``plan`` with its 3D targets inside (``action.target_3d``) from a depth message (Image or compressedDepth)
    and the colour camera_info.

    Targets are in ``extrinsics.parent_frame`` (the optical frame without extrinsics). Raises GeometryError (names
    the action; CameraModelError for an unusable calibration), DepthNotAlignedError, or ImageDecodeError for an
    unusable depth image (all ValueErrors).
    """
    check_depth_aligned(depth, camera_info, depth_camera_info, depth_registered)
    camera = camera_model(camera_info, depth.header.frame_id or camera_info.header.frame_id)
    return geometry_backproject(plan, depth_to_m(depth), camera, extrinsics)
