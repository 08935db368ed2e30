"""Rollout bags (rosbag2 MCAP, no rclpy needed): the names callers use, from the modules that do each job.

- :mod:`grounded_planner.rollout.bag_write`: the `mcap` library's writer, chunked, compressed, indexed,
  losing at most the open chunk (``chunk_interval_s``) on SIGKILL;
- :mod:`grounded_planner.rollout.bag_read`: the indexed reader for closed files, a record scan for cut ones,
  rosbags for rosbag2 folders and sqlite3;
- :mod:`grounded_planner.rollout.bag_recover`: summary and indexes rebuilt for a file whose writer died.

Messages are built by :mod:`grounded_planner.msgs` with the rosbags typestore's classes; their CDR bytes
(from rosbags) are identical to rclpy's. The helpers below only adapt arrays and stamps to those builders.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from grounded_planner.msgs import images, joint_states
from grounded_planner.msgs.camera_info import RawCalibration, raw_calibration_to_msg
from grounded_planner.msgs.images import IMAGE_MSGTYPES  # noqa: F401 (re-exported: Image or CompressedImage)
from grounded_planner.msgs.plan import header_msg as _header_msg, plan_to_msg, stamp_to_ns
from grounded_planner.rollout.bag_common import (  # noqa: F401 (re-exported)
    ACTION_MSGTYPE,
    DEFAULT_DEPTH_UNIT_M,
    PLAN_MSGTYPE,
    PROFILE,
    BagError,
    BagMessage,
    BagWriteError,
    typestore,
)
from grounded_planner.rollout.bag_read import (  # noqa: F401 (re-exported)
    MCAP_MAGIC,
    BagInfo,
    ScanResult,
    bag_info,
    has_footer,
    iter_mcap,
    read_bag,
    resolve_bag_path,
    scan_mcap,
)
from grounded_planner.rollout.bag_recover import recover_mcap, write_empty_mcap  # noqa: F401 (re-exported)
from grounded_planner.rollout.bag_write import BagOptions, McapBagWriter  # noqa: F401 (re-exported)


def header_msg(stamp_ns: int, frame_id: str = ""):
    """std_msgs/Header (rosbags class) with a stamp in integer nanoseconds."""
    return _header_msg(typestore().types, stamp_ns, frame_id)


def depth_counts(depth: np.ndarray, depth_unit_m: float = DEFAULT_DEPTH_UNIT_M) -> np.ndarray:
    """(H, W) depth in metres (float) or counts (uint16) -> uint16 counts of ``depth_unit_m`` (0 = no reading).

    Float depth: NaN, inf and values <= 0 become 0 (no reading, as the RealSense driver writes it); depth
    beyond the 16-bit range raises rather than wrapping around.
    """
    depth = np.asarray(depth)
    if depth.ndim != 2:
        raise BagError(f"depth image must be (H, W), got shape {depth.shape}")
    if depth.dtype == np.uint16:
        return depth
    if not np.issubdtype(depth.dtype, np.floating):
        raise BagError(f"depth image must be float metres or uint16 counts, got dtype {depth.dtype}")
    counts = np.where(np.isfinite(depth) & (depth > 0), depth / depth_unit_m, 0.0)
    if counts.max(initial=0.0) > 65535.0:
        raise BagError(
            f"depth up to {float(np.nanmax(depth)):.2f} m does not fit 16UC1 with "
            f"{depth_unit_m} m units (max {65535 * depth_unit_m:.2f} m)"
        )
    return np.rint(counts).astype(np.uint16)


def _rgb(rgb: np.ndarray) -> np.ndarray:
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise BagError(f"color image must be (H, W, 3) uint8 RGB, got shape {rgb.shape} dtype {rgb.dtype}")
    return rgb


def image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """sensor_msgs/Image (rgb8) from an (H, W, 3) uint8 RGB array."""
    return images.numpy_to_image(
        _rgb(rgb), typestore().types["sensor_msgs/msg/Image"], "rgb8", header_msg(stamp_ns, frame_id)
    )


def compressed_image_msg(
    rgb: np.ndarray, stamp_ns: int, frame_id: str = "camera_color_optical_frame", quality: int = 90
):
    """sensor_msgs/CompressedImage (``"rgb8; jpeg compressed bgr8"``) from an (H, W, 3) uint8 RGB array."""
    return images.numpy_to_compressed(
        _rgb(rgb), typestore().types["sensor_msgs/msg/CompressedImage"], "jpeg", header_msg(stamp_ns, frame_id), quality
    )


def depth_msg(
    depth: np.ndarray,
    stamp_ns: int,
    frame_id: str = "camera_color_optical_frame",
    depth_unit_m: float = DEFAULT_DEPTH_UNIT_M,
):
    """sensor_msgs/Image (16UC1, ``depth_unit_m`` per count) from depth in metres (float) or raw counts (uint16)."""
    return images.numpy_to_image(
        depth_counts(depth, depth_unit_m),
        typestore().types["sensor_msgs/msg/Image"],
        "16UC1",
        header_msg(stamp_ns, frame_id),
    )


def compressed_depth_msg(
    depth: np.ndarray,
    stamp_ns: int,
    frame_id: str = "camera_color_optical_frame",
    depth_unit_m: float = DEFAULT_DEPTH_UNIT_M,
    png_level: int | None = 1,
):
    """``compressedDepth`` CompressedImage (``"16UC1; compressedDepth png"``, lossless) from depth in metres or
    counts; every count is kept (no ``depth_max`` cut)."""
    return images.numpy_to_compressed_depth(
        depth_counts(depth, depth_unit_m),
        typestore().types["sensor_msgs/msg/CompressedImage"],
        header_msg(stamp_ns, frame_id),
        depth_max_m=65.535,
        png_level=png_level,
    )


def camera_info_msg(
    K: Sequence[float],
    width: int,
    height: int,
    stamp_ns: int,
    D: Sequence[float] = (),
    distortion_model: str = "plumb_bob",
    frame_id: str = "camera_color_optical_frame",
):
    """sensor_msgs/CameraInfo from a 3x3 intrinsic matrix ``K`` (pixels) and distortion ``D``, as recorded (the
    model is not checked: a log keeps whatever calibration the camera sent)."""
    K_arr = np.asarray(K, dtype=np.float64).reshape(-1)
    if K_arr.size != 9:
        raise BagError(f"K must be a 3x3 matrix (9 numbers), got {K_arr.size}")
    calibration = RawCalibration(
        int(width), int(height), K_arr.reshape(3, 3), np.asarray(D, dtype=np.float64), distortion_model, frame_id
    )
    return raw_calibration_to_msg(
        calibration, typestore().types["sensor_msgs/msg/CameraInfo"], header_msg(stamp_ns, frame_id)
    )


def string_msg(payload: Any):
    """std_msgs/String carrying ``payload`` (a str as is, anything else as compact JSON)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return typestore().types["std_msgs/msg/String"](data=text)


def joint_state_msg(
    names: Sequence[str],
    position: Sequence[float],
    stamp_ns: int,
    velocity: Sequence[float] = (),
    effort: Sequence[float] = (),
):
    """sensor_msgs/JointState (positions in rad or m, as the robot reports them)."""
    try:
        return joint_states.joint_state_msg(typestore().types, names, position, stamp_ns, velocity, effort)
    except joint_states.JointStateError as exc:
        raise BagError(str(exc)) from exc


def plan_msg(plan, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """grounded_planner_interfaces/GroundedPlan from a plan model (its 3D targets, reason and warnings inside)."""
    return plan_to_msg(plan, typestore().types, stamp_ns=stamp_ns, frame_id=frame_id)


def image_to_rgb(msg) -> np.ndarray:
    """A colour sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) or JPEG/PNG CompressedImage -> (H, W, 3) uint8 RGB."""
    try:
        return images.color_to_rgb(msg)
    except images.ImageDecodeError as exc:
        raise BagError(f"color image: {exc}") from exc


def depth_to_m(msg, depth_unit_m: float = DEFAULT_DEPTH_UNIT_M) -> np.ndarray:
    """Depth Image (16UC1 in ``depth_unit_m`` units, or 32FC1 metres) or compressedDepth -> (H, W) float32 m, 0 = none."""
    try:
        return images.depth_to_m(msg, depth_unit_m).astype(np.float32)
    except images.ImageDecodeError as exc:
        raise BagError(f"depth image: {exc}") from exc


__all__ = [
    "IMAGE_MSGTYPES",
    "BagError",
    "BagInfo",
    "BagMessage",
    "BagOptions",
    "BagWriteError",
    "McapBagWriter",
    "ScanResult",
    "bag_info",
    "camera_info_msg",
    "compressed_depth_msg",
    "compressed_image_msg",
    "depth_counts",
    "depth_msg",
    "depth_to_m",
    "has_footer",
    "header_msg",
    "image_msg",
    "image_to_rgb",
    "iter_mcap",
    "joint_state_msg",
    "plan_msg",
    "read_bag",
    "recover_mcap",
    "resolve_bag_path",
    "scan_mcap",
    "stamp_to_ns",
    "string_msg",
    "typestore",
    "write_empty_mcap",
]
