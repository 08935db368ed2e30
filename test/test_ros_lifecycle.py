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


def test_an_executor_with_no_robot_says_so_on_diagnostics_and_its_link_check_does_not_end_the_node(rclpy_context):
    """Before configure and after cleanup the executor has no backend, and its idle link check still runs: it
    says "not configured" on /diagnostics. It used to raise (AttributeError on the missing backend's name), which
    in a bringup ended every node of the process (seen in CI: the executor reconfigured while the timer was due)."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.qos import QoSProfile

    from grounded_planner.ros.executor_node import ExecutorNode
    from helpers.ros_wait import spin_until

    node = ExecutorNode(
        context=rclpy_context,
        backend_factory=lambda name, config: KinematicArm(),
        parameter_overrides=[Parameter("link_check_period_s", value=0.05)],
    )
    links: list = []
    node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: links.extend(s for s in m.status if s.name.endswith("robot link")),
        QoSProfile(depth=50),
    )
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    try:
        spin_until(executor, lambda: len(links) >= 3, 20.0, "the link check's diagnostics before configure")
        assert links[-1].level == DiagnosticStatus.WARN and "not configured" in links[-1].message, links[-1]
        assert links[-1].hardware_id == "" and links[-1].values[0].value == "false"
        node.trigger_configure()
        spin_until(executor, lambda: links[-1].level == DiagnosticStatus.OK, 20.0, "a reachable robot")
        node.trigger_cleanup()
        seen = len(links)
        spin_until(executor, lambda: len(links) >= seen + 3, 20.0, "the link check to go on after cleanup")
        assert "not configured" in links[-1].message, links[-1]
    finally:
        executor.remove_node(node)
        node.destroy_node()


class _ClosedRecorder:
    """A camera source that says whether it was closed (and reads from the software device meanwhile)."""

    def __init__(self, source):
        self.source, self.closed = source, False

    def read(self, timeout_s: float = 1.0):
        return self.source.read(timeout_s)

    def __getattr__(self, name: str):  # restarts, ended: the source's own
        return getattr(self.source, name)

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
