"""camera_node fed by a pyrealsense2 software_device instead of a camera (test peer, own process).

Usage: software_camera_node.py [--ros-args ...]. Pushes a known pattern: colour from seed 0, depth 800 mm in the
left half and 1200 mm in the right half, at half the colour resolution (so alignment has work to do).
"""

import threading

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

from grounded_planner.ros.camera_node import CameraNode
from grounded_planner.ros.realsense import SoftwareCamera

COLOR_SIZE = (160, 120)
DEPTH_SIZE = (80, 60)
FX_PX = 100.0


def pattern():
    color = np.random.default_rng(0).integers(0, 255, (COLOR_SIZE[1], COLOR_SIZE[0], 3), dtype=np.uint8)
    depth = np.full((DEPTH_SIZE[1], DEPTH_SIZE[0]), 800, np.uint16)
    depth[:, DEPTH_SIZE[0] // 2 :] = 1200
    return color, depth


def record_pattern(path, frames: int = 15):
    """A RealSense recording of :func:`pattern` made with pyrealsense2's recorder from the software device
    (librealsense >= 2.56 writes rosbag2 sqlite: name it .db3). Returns ``path``."""
    import pyrealsense2 as rs

    camera = SoftwareCamera(COLOR_SIZE, DEPTH_SIZE, FX_PX, fps=30)
    recorder = rs.recorder(str(path), camera.device)
    color_px, depth_px = pattern()
    for _ in range(frames):
        camera.push(color_px, depth_px)
        camera.syncer.try_wait_for_frames(100)
    del recorder  # closes the file
    camera.close()
    return path


def main(args=None):
    camera = SoftwareCamera(COLOR_SIZE, DEPTH_SIZE, FX_PX, fps=30)
    stop = threading.Event()
    color, depth = pattern()

    def feed():
        while not stop.is_set():
            camera.push(color, depth)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        with rclpy.init(args=args):
            node = CameraNode(source_factory=lambda params: camera.source())
            if node.get_parameter("autostart").value:
                node.trigger_configure()
                node.trigger_activate()
            executor = MultiThreadedExecutor()
            executor.add_node(node)
            print("ready", flush=True)
            executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        stop.set()


if __name__ == "__main__":
    main()
