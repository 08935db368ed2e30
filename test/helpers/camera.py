"""A camera stand-in for ROS tests: a timer that publishes colour, aligned depth and camera_info on the topics
realsense-ros publishes (grounded_planner.ros.names), each message stamped when it is sent, as the driver stamps
its captures. One helper instead of a publisher written out in every ROS test file."""

from __future__ import annotations

from typing import Callable, Mapping

from grounded_planner.ros import names

# the stand-in publishes in the root namespace, where the nodes under test resolve their relative names
TOPICS = {
    "color": "/" + names.COLOR_IMAGE,
    "depth": "/" + names.ALIGNED_DEPTH_IMAGE,
    "info": "/" + names.COLOR_CAMERA_INFO,
}


def publish_camera(
    node,
    frames: Mapping[str, object] | Callable[[], Mapping[str, object]],
    period_s: float = 0.1,
    older_s: Mapping[str, float] | None = None,
):
    """Publish ``frames`` every ``period_s`` from ``node``; returns the timer.

    ``frames`` maps ``color``/``depth``/``info`` (any subset) to the messages to send each time, or is a callable
    that returns that mapping at each tick (a rendering simulator). The stamp is taken before ``frames()`` is
    called: a driver stamps the exposure, not the end of a slow render. ``older_s`` stamps a stream that many
    seconds in the past (a depth stream lagging the colour one).
    """
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CameraInfo, Image

    qos = QoSProfile(depth=2)
    types = {"color": Image, "depth": Image, "info": CameraInfo}
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
