"""The lifecycle nodes that hold a device (camera_node, executor_node; node_main.DeviceNode) let go of it on every way
out of the configured states: cleanup and shutdown, from inactive and from active. In this process, on the test's
own ROS domain; the robot is the KinematicArm test double, the camera pyrealsense2's software device."""

from __future__ import annotations

import pytest

from conftest import requires_ros
from helpers.kinematic_arm import KinematicArm

pytestmark = [requires_ros, pytest.mark.ros]


def test_the_executor_disconnects_its_robot_on_cleanup_and_on_shutdown(rclpy_context):
    from rclpy.lifecycle import TransitionCallbackReturn

    from grounded_planner.ros.executor_node import ExecutorNode

    arms: list[KinematicArm] = []
    node = ExecutorNode(
        context=rclpy_context, backend_factory=lambda name, config: arms.append(KinematicArm()) or arms[-1]
    )
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS and arms[0].is_connected
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert not arms[0].is_connected and not node.robot_reachable
        node.trigger_configure()
        node.trigger_activate()
        assert arms[1].is_connected
        assert node.trigger_shutdown() == TransitionCallbackReturn.SUCCESS  # from active, as Ctrl-C under launch
        assert not arms[1].is_connected
    finally:
        node.destroy_node()


class _ClosedRecorder:
    """A camera source that says whether it was closed (and reads from the software device meanwhile)."""

    def __init__(self, source):
        self.source, self.closed = source, False

    def read(self, timeout_s: float = 1.0):
        return self.source.read(timeout_s)

    def close(self) -> None:
        self.closed = True
        self.source.close()


def test_the_camera_closes_its_device_on_cleanup_and_on_shutdown(rclpy_context):
    pytest.importorskip("pyrealsense2")
    from grounded_planner.ros.camera_node import CameraNode
    from grounded_planner.ros.realsense import SoftwareCamera
    from helpers.software_camera_node import COLOR_SIZE, DEPTH_SIZE, FX_PX

    camera = SoftwareCamera(COLOR_SIZE, DEPTH_SIZE, FX_PX, fps=30)
    sources: list[_ClosedRecorder] = []
    node = CameraNode(
        source_factory=lambda p: sources.append(_ClosedRecorder(camera.source())) or sources[-1],
        context=rclpy_context,
    )
    try:
        node.trigger_configure()
        node.trigger_activate()
        node.trigger_deactivate()
        assert not sources[0].closed  # inactive keeps the device open, ready to activate again
        node.trigger_cleanup()
        assert sources[0].closed
        node.trigger_configure()
        node.trigger_activate()
        node.trigger_shutdown()
        assert sources[1].closed
    finally:
        node.destroy_node()
        camera.close()
