"""The hardware paths as the real libraries behave, against doubles that keep the real thing's awkward parts
(helpers/fake_moveit_py.py mirrors moveit_py 2.12.4 / moveit2 jazzy and MoveItCpp's start-up of moveit2 8fcb5d2)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("geometry_msgs.msg")

from grounded_planner.execution.backend import BackendFault  # noqa: E402
from grounded_planner.execution.backends.moveit_backend import MoveItBackend, MoveItConfig  # noqa: E402
from helpers.fake_moveit_py import FakeGripper, FakeMoveItModule, moveit_params_file  # noqa: E402

QUICK_STATE_WAIT = {"planning_scene_monitor_options": {"wait_for_initial_state_timeout": 0.3}}


def test_moveit_py_runs_in_the_namespace_of_a_namespaced_franka_bringup(tmp_path):
    """franka_ros2 launched with namespace:=left publishes /left/joint_states: MoveItPy must be created with
    name_space, or its state monitor waits on /joint_states and the constructor throws after the timeout."""
    params = str(moveit_params_file(tmp_path, **QUICK_STATE_WAIT))
    fake = FakeMoveItModule(robot_namespace="left")
    backend = MoveItBackend(MoveItConfig(params_files=[params], robot_namespace="left"),
                            **fake.backend_args(lambda c: FakeGripper(0.03)))
    backend.connect()
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert fake[0].executed

    unaware = MoveItBackend(MoveItConfig(params_files=[params]), **FakeMoveItModule(robot_namespace="left")
                            .backend_args(lambda c: FakeGripper(0.03)))
    started = time.monotonic()
    with pytest.raises(BackendFault, match=r"Unable to configure planning scene monitor.*/joint_states.*"
                                           r"backends\.moveit\.robot_namespace"):
        unaware.connect()
    assert time.monotonic() - started >= 0.3  # the double waited, holding the GIL, as MoveItCpp does


def test_an_integer_where_moveit_reads_a_double_is_a_backend_fault_naming_it(tmp_path):
    """`planning_time: 1` in plan_request_params: rclcpp's typed get_parameter throws (RuntimeError through
    pybind11), which escaped connect unwrapped."""
    params = str(moveit_params_file(tmp_path, plan_request_params={"planning_time": 1}))
    backend = MoveItBackend(MoveItConfig(params_files=[params]), **FakeMoveItModule().backend_args(
        lambda c: FakeGripper(0.03)))
    with pytest.raises(BackendFault, match=r"plan_request_params\.planning_time' has invalid type: expected "
                                           r"\[double\] got \[integer\].*planning_time: 1\.0, not 1"):
        backend.connect()


# -- SO-101 through LeRobot 0.4.4 (FakeSOFollower of test_execution_lerobot.py mirrors its SOFollower) -------------

def _so101(**double_kwargs):
    from grounded_planner.execution.backends.lerobot_backend import LeRobotConfig, so_follower_config_kwargs
    from test_execution_lerobot import FakeSOFollower, make

    pytest.importorskip("lerobot.utils.errors")
    double = FakeSOFollower(so_follower_config_kwargs(LeRobotConfig()), **double_kwargs)
    return double, lambda: make(double)


def test_an_uncalibrated_so101_is_refused_with_its_torque_left_as_it_was():
    """LeRobot's disconnect() turns torque off first: the refusal used to drop the arm it refused."""
    double, connect = _so101(calibrated=False)
    with pytest.raises(BackendFault, match="not calibrated .* run lerobot-calibrate"):
        connect()
    assert double.torque is True and double.present["shoulder_lift"] == pytest.approx(-30.0)  # held, not sagged
    assert not double.bus.port_handler.is_open  # the port is closed all the same


def test_is_calibrated_reads_registers_and_a_lost_packet_there_is_retried_or_refused_cleanly():
    double, connect = _so101(calibration_read_failures=1)
    backend, robot, _ = connect()  # one lost packet: read again
    assert backend.is_connected and robot.calibration_reads >= 2
    double, connect = _so101(calibration_read_failures=50)  # the servos do not answer the calibration reads
    with pytest.raises(BackendFault, match="no status packet"):
        connect()
    assert double.torque is True and double.present["shoulder_lift"] == pytest.approx(-30.0)


def test_device_not_connected_is_not_retried_as_a_lost_packet():
    """DeviceNotConnectedError is a ConnectionError in LeRobot 0.4.4, and was retried bus_retries times."""
    double, connect = _so101()
    backend, robot, _ = connect()
    robot.port_lost = True  # the port goes away under the next read
    before = robot.observations
    with pytest.raises(BackendFault, match="is not connected"):
        backend.gripper_width()
    assert robot.observations - before == 1


def test_moveit_refuses_an_unknown_planning_group_and_a_trajectory_no_controller_runs(tmp_path):
    params = str(moveit_params_file(tmp_path))
    wrong_group = MoveItBackend(MoveItConfig(params_files=[params], planning_group="panda_arm"),
                                **FakeMoveItModule().backend_args(lambda c: FakeGripper(0.03)))
    with pytest.raises(BackendFault, match=r"no planning group 'panda_arm'.*Could not find joint model group"):
        wrong_group.connect()

    no_controllers = str(moveit_params_file(tmp_path, moveit_simple_controller_manager={"controller_names": []}))
    fake = FakeMoveItModule()
    backend = MoveItBackend(MoveItConfig(params_files=[no_controllers]), **fake.backend_args(lambda c: FakeGripper(0.03)))
    backend.connect()
    with pytest.raises(BackendFault, match=r"status ABORTED \(MoveIt aborts at once when no active controller"):
        backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert not fake[0].executed


def test_without_joint_states_connect_refuses_before_moveit_py_waits_holding_the_gil(tmp_path, rclpy_context):
    """MoveItPy's constructor waits for a complete state with the GIL held (10 s): a cancel or Ctrl-C during
    connect waited that long. connect now looks for joint states first, in Python, and refuses without them."""
    import threading

    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    import rclpy
    from grounded_planner.ros.moveit import wait_for_joint_states

    def probe(topic, _timeout_s):
        return wait_for_joint_states(topic, 1.0, context=rclpy_context)

    params = str(moveit_params_file(tmp_path))  # wait_for_initial_state_timeout: 10 s, as shipped
    fake = FakeMoveItModule(robot_namespace="left")
    backend = MoveItBackend(MoveItConfig(params_files=[params], robot_namespace="left"),
                            state_probe=probe, **fake.backend_args(lambda c: FakeGripper(0.03)))
    started = time.monotonic()
    with pytest.raises(BackendFault, match=r"no joint states on /left/joint_states within 10 s"):
        backend.connect()
    assert time.monotonic() - started < 5.0 and len(fake) == 0  # MoveItPy was never started

    node = rclpy.create_node("franka_ros2_stand_in", namespace="left", context=rclpy_context)
    publisher = node.create_publisher(JointState, "joint_states", 10)
    timer = node.create_timer(0.05, lambda: publisher.publish(JointState(name=["fr3_joint1"], position=[0.0])))
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        backend.connect()
        assert backend.is_connected and len(fake) == 1
    finally:
        executor.shutdown(timeout_sec=1.0)
        timer.cancel()
        node.destroy_node()
