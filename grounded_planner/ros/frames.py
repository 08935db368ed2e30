"""The latest colour, aligned depth and camera_info of a camera, kept by subscriptions for nodes that plan on them."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, Image

from grounded_planner.ros.convert import image_to_numpy

# 16UC1 depth is in millimetres (realsense-ros); 32FC1 depth is in metres.
DEPTH_UNIT_16UC1_M = 0.001


class NoFrameError(RuntimeError):
    """A frame, depth image or camera_info that a request needs has not arrived (names the topic)."""


@dataclass
class Snapshot:
    """The newest messages seen on each topic (None where nothing arrived yet)."""

    color: Image | None
    depth: Image | None
    camera_info: CameraInfo | None


def depth_to_m(msg: Image) -> np.ndarray:
    """Depth image message -> (H, W) float64 metres; 0 where the sensor gave no reading."""
    depth = image_to_numpy(msg)
    if msg.encoding in ("16UC1", "mono16"):
        return depth.astype(np.float64) * DEPTH_UNIT_16UC1_M
    if msg.encoding == "32FC1":
        out = depth.astype(np.float64)
        out[~np.isfinite(out)] = 0.0
        return out
    raise ValueError(f"depth image encoding must be 16UC1 (mm) or 32FC1 (m), got {msg.encoding!r}")


def camera_model(info: CameraInfo, frame_id: str = ""):
    """CameraInfo -> geometry CameraModel (the frame id defaults to the message's)."""
    from grounded_planner.geometry.camera import CameraModel

    return CameraModel.from_camera_info(np.asarray(info.k).reshape(3, 3), list(info.d), int(info.width), int(info.height),
                                        info.distortion_model or "plumb_bob", frame_id or info.header.frame_id)


class LatestFrames:
    """Subscribes to colour, aligned depth and camera_info and keeps the newest of each (thread-safe).

    An empty topic name leaves that stream out.
    """

    def __init__(self, node: Node, color_topic: str, depth_topic: str, camera_info_topic: str, callback_group=None):
        self.topics = {"color": color_topic, "depth": depth_topic, "camera_info": camera_info_topic}
        self._lock = threading.Lock()
        self._latest: dict[str, object] = {}
        self._arrived = threading.Condition(self._lock)
        qos = QoSProfile(depth=2)
        for key, msg_type in (("color", Image), ("depth", Image), ("camera_info", CameraInfo)):
            if not self.topics[key]:
                continue  # "" = the caller does not need this stream
            node.create_subscription(msg_type, self.topics[key], self._keeper(key), qos, callback_group=callback_group)

    def _keeper(self, key: str):
        def keep(msg) -> None:
            with self._arrived:
                self._latest[key] = msg
                self._arrived.notify_all()
        return keep

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._latest.get("color"), self._latest.get("depth"), self._latest.get("camera_info"))  # type: ignore[arg-type]

    def wait_for(self, keys: tuple[str, ...], timeout_s: float) -> Snapshot:
        """Wait up to ``timeout_s`` until each of ``keys`` has arrived; NoFrameError naming the missing topics."""
        with self._arrived:
            self._arrived.wait_for(lambda: all(k in self._latest for k in keys), timeout=timeout_s)
            missing = [self.topics[k] for k in keys if k not in self._latest]
        if missing:
            raise NoFrameError(f"nothing received on {', '.join(missing)} within {timeout_s:.1f} s")
        return self.snapshot()


def backproject(plan, depth: Image, camera_info: CameraInfo, extrinsics=None, stamp=None):
    """3D targets of ``plan`` from a depth message and its camera_info (geometry layer does the work).

    Returns
    -------
    (TargetSet, list[PoseStamped | None])
        The geometry targets and one pose per action, in ``extrinsics.parent_frame`` (the optical frame without
        extrinsics). Raises GeometryError (names the action) or ValueError for an unusable depth image.
    """
    from grounded_planner.geometry.targets import compute_targets
    from grounded_planner.ros.visualize import target_poses

    if (depth.width, depth.height) != (camera_info.width, camera_info.height):
        raise ValueError(f"depth is {depth.width}x{depth.height} but camera_info is {camera_info.width}x{camera_info.height}:"
                         " back-projection needs depth aligned to the colour camera")
    camera = camera_model(camera_info, depth.header.frame_id or camera_info.header.frame_id)
    targets = compute_targets(plan, depth_to_m(depth), camera, extrinsics)
    return targets, target_poses(targets, len(plan.actions), stamp=stamp)
