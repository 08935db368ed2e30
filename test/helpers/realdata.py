"""Bags with real pixels: the librealsense unit-test recording (test/fixtures/librealsense) as ROS messages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIBREALSENSE_BAG = FIXTURES / "librealsense" / "single_depth_color_640x480.bag"
NS = "/camera/camera"
COLOR_COMPRESSED = f"{NS}/color/image_raw/compressed"
DEPTH_COMPRESSED = f"{NS}/aligned_depth_to_color/image_raw/compressedDepth"
COLOR_INFO = f"{NS}/color/camera_info"
DEPTH_INFO = f"{NS}/aligned_depth_to_color/camera_info"
# A fisheye-style calibration for the same pixels: small k1..k4, the image still looks like the recording
EQUIDISTANT_D = (0.012, -0.004, 0.001, 0.0)
# what the recording shows (640x480): a black backpack on a red chair, markers in a rack on a whiteboard
BACKPACK_BOX_PX = (225.0, 270.0, 355.0, 415.0)
CHAIR_POINT_PX = (270.0, 445.0)
MARKER_BOX_PX = (455.0, 185.0, 505.0, 212.0)
RACK_POINT_PX = (490.0, 300.0)
PLANS = {
    "put the backpack on the chair": [
        {"type": "grasp", "object": "backpack", "bbox": list(BACKPACK_BOX_PX)},
        {"type": "place", "object": "backpack", "target": "chair", "point": list(CHAIR_POINT_PX)},
    ],
    "put the orange marker back in the rack": [
        {"type": "grasp", "object": "orange marker", "bbox": list(MARKER_BOX_PX)},
        {"type": "place", "object": "orange marker", "target": "rack", "point": list(RACK_POINT_PX)},
    ],
}


@dataclass
class RealFrame:
    color_rgb: np.ndarray  # (480, 640, 3) uint8
    depth_mm: np.ndarray  # (480, 640) uint16, aligned to colour by librealsense
    K: np.ndarray  # (3, 3) colour intrinsics, pixels


def real_frame(timeout_s: float = 20.0) -> RealFrame:
    """The recording's first colour and depth pair, depth aligned to colour, read by librealsense itself (playback +
    rs.align). ``RealSenseSource.read`` gives None for a frameset that did not come in time or lacks a stream, and
    the camera node reads on; so does this (the playback loops). Twice in clean-clone CI runs no pair came for 20 s:
    librealsense's looping had left the playback stopped at its start (1 start in 250 with the CPUs held busy);
    ``RealSenseSource`` now starts such a playback again, and the pair comes about 1 s later."""
    import time

    from grounded_planner.ros.realsense import RealSenseSource

    source = RealSenseSource.open("", "640x480", "640x480", 30, str(LIBREALSENSE_BAG), True)
    deadline = time.monotonic() + timeout_s
    try:
        while (frames := source.read(1.0)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no colour and depth pair from {LIBREALSENSE_BAG} within {timeout_s:g} s")
    finally:
        source.close()
    i = frames.intrinsics
    K = np.array([[i.fx, 0.0, i.ppx], [0.0, i.fy, i.ppy], [0.0, 0.0, 1.0]])
    return RealFrame(frames.color_rgb.copy(), frames.depth_mm.copy(), K)


def write_replay_file(path: Path) -> Path:
    """Recorded plans for the ``replay`` planner backend (any image), one per instruction of :data:`PLANS`."""
    lines = [
        json.dumps({"instruction": text, "plan": {"instruction": text, "image_size": [640, 480], "actions": actions}})
        for text, actions in PLANS.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_compressed_equidistant_bag(
    path: Path, frame: RealFrame, frames: int = 3, distortion_model: str = "equidistant"
) -> Path:
    """A rosbag2 MCAP as image_transport and realsense-ros record it: JPEG colour on ``.../compressed``,
    depth on ``.../compressedDepth``, and camera_info whose distortion model is ``equidistant`` (or the name
    given, written as is: ``F-Theta`` is librealsense's, which nothing here can deproject)."""
    from sensor_msgs.msg import CameraInfo, CompressedImage
    from std_msgs.msg import Header

    from grounded_planner.geometry.camera import CameraModel
    from grounded_planner.msgs.camera_info import camera_model_to_msg
    from grounded_planner.msgs.images import numpy_to_compressed, numpy_to_compressed_depth
    from grounded_planner.ros.bags import write_bag

    camera = CameraModel(640, 480, frame.K, EQUIDISTANT_D, "equidistant", "camera_color_optical_frame")

    def info(header):
        msg = camera_model_to_msg(camera, CameraInfo, header)
        msg.distortion_model = distortion_model
        return msg

    messages = []
    for n in range(frames):
        stamp_ns = 1_700_000_000_000_000_000 + n * 100_000_000
        header = Header(frame_id="camera_color_optical_frame")
        header.stamp.sec, header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
        messages += [
            (COLOR_COMPRESSED, stamp_ns, numpy_to_compressed(frame.color_rgb, CompressedImage, "jpeg", header)),
            (DEPTH_COMPRESSED, stamp_ns, numpy_to_compressed_depth(frame.depth_mm, CompressedImage, header)),
            (COLOR_INFO, stamp_ns, info(header)),
            (DEPTH_INFO, stamp_ns, info(header)),
        ]
    return write_bag(path, messages)


def ask_every_plan(node, executor, timeout_s: float = 90.0) -> dict:
    """Call ``/grounded_planner/plan`` (with back-projection) once per instruction of :data:`PLANS`; the responses."""
    from grounded_planner_interfaces.srv import GetGroundedPlan

    from helpers.ros_wait import call

    client = node.create_client(GetGroundedPlan, "/grounded_planner/plan")
    return {
        text: call(
            executor,
            client,
            GetGroundedPlan.Request(instruction=text, backproject=True),
            timeout_s,
            f"a plan for {text!r}",
        )
        for text in PLANS
    }
