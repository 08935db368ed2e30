"""A camera stand-in for ROS tests: a timer that publishes colour, aligned depth and camera_info on the topics
realsense-ros publishes (grounded_planner.ros.names), each message stamped when it is sent, as the driver stamps
its captures. One helper instead of a publisher written out in every ROS test file: in the test's own node
(``publish_camera``), or in a process of its own that a test can kill mid-stream as a camera driver dies
(``start_camera_process``; ``python -m helpers.camera`` with test/ on the path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

from grounded_planner.ros import names

TEST_DIR = Path(__file__).resolve().parents[1]

# the stand-in publishes in the root namespace, where the nodes under test resolve their relative names
TOPICS = {
    "color": "/" + names.COLOR_IMAGE,
    "depth": "/" + names.ALIGNED_DEPTH_IMAGE,
    "info": "/" + names.COLOR_CAMERA_INFO,
    "depth_info": "/" + names.ALIGNED_DEPTH_CAMERA_INFO,  # the depth image's own camera_info, where a test needs it
}


def publish_camera(
    node,
    frames: Mapping[str, object] | Callable[[], Mapping[str, object]],
    period_s: float = 0.1,
    older_s: Mapping[str, float] | None = None,
):
    """Publish ``frames`` every ``period_s`` from ``node``; returns the timer.

    ``frames`` maps ``color``/``depth``/``info``/``depth_info`` (any subset) to the messages to send each time, or is a callable
    that returns that mapping at each tick (a rendering simulator). The stamp is taken before ``frames()`` is
    called: a driver stamps the exposure, not the end of a slow render. ``older_s`` stamps a stream that many
    seconds in the past (a depth stream lagging the colour one).
    """
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CameraInfo, Image

    qos = QoSProfile(depth=2)
    types = {"color": Image, "depth": Image, "info": CameraInfo, "depth_info": CameraInfo}
    older_s = dict(older_s or {})
    # every publisher exists from the start, so that a test can wait for the nodes under test to subscribe
    publishers = {
        key: node.create_publisher(types[key], TOPICS[key], qos) for key in (TOPICS if callable(frames) else frames)
    }

    def tick():
        now = node.get_clock().now()
        for key, msg in (frames() if callable(frames) else frames).items():
            msg.header.stamp = (now - Duration(nanoseconds=int(older_s.get(key, 0.0) * 1e9))).to_msg()
            publishers[key].publish(msg)

    return node.create_timer(period_s, tick)


def start_camera_process(older_s: Mapping[str, float] | None = None, period_s: float = 0.1) -> subprocess.Popen:
    """The tabletop scene (helpers.tabletop) streamed by :func:`publish_camera` from a node in a child process of
    its own (ROS_DOMAIN_ID inherited); returns once it streams. Stop it with SIGINT (a clean exit) or SIGKILL (a
    camera process that dies: its last frames stay in the subscribers' readers)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TEST_DIR), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen(
        [sys.executable, "-m", "helpers.camera", json.dumps(dict(older_s or {})), str(period_s)],
        cwd=TEST_DIR.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = child.stdout.readline().strip()
    if line != "streaming":
        child.kill()
        raise AssertionError(f"the camera stand-in did not start: {line}{child.communicate()[0]}")
    return child


def _stream(older_s: Mapping[str, float], period_s: float) -> None:
    """The child of :func:`start_camera_process`: streams until Ctrl-C (or a kill)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from helpers.tabletop import scene_messages

    try:
        with rclpy.init():
            node = rclpy.create_node("camera_stand_in")
            color, depth, info = scene_messages()
            publish_camera(node, {"color": color, "depth": depth, "info": info}, period_s, older_s)
            print("streaming", flush=True)
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == "__main__":
    _stream(json.loads(sys.argv[1]), float(sys.argv[2]))
