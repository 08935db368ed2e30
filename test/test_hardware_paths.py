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
    backend = MoveItBackend(
        MoveItConfig(params_files=[params], robot_namespace="left"), **fake.backend_args(lambda c: FakeGripper(0.03))
    )
    backend.connect()
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert fake[0].executed

    unaware = MoveItBackend(
        MoveItConfig(params_files=[params]),
        **FakeMoveItModule(robot_namespace="left").backend_args(lambda c: FakeGripper(0.03)),
    )
    started = time.monotonic()
    with pytest.raises(
        BackendFault,
        match=r"Unable to configure planning scene monitor.*/joint_states.*"
        r"backends\.moveit\.robot_namespace",
    ):
        unaware.connect()
    assert time.monotonic() - started >= 0.3  # the double waited, holding the GIL, as MoveItCpp does


def test_an_integer_where_moveit_reads_a_double_is_a_backend_fault_naming_it(tmp_path):
    """`planning_time: 1` in plan_request_params: rclcpp's typed get_parameter throws (RuntimeError through
    pybind11), which escaped connect unwrapped."""
    params = str(moveit_params_file(tmp_path, plan_request_params={"planning_time": 1}))
    backend = MoveItBackend(
        MoveItConfig(params_files=[params]), **FakeMoveItModule().backend_args(lambda c: FakeGripper(0.03))
    )
    with pytest.raises(
        BackendFault,
        match=r"plan_request_params\.planning_time' has invalid type: expected "
        r"\[double\] got \[integer\].*planning_time: 1\.0, not 1",
    ):
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
    wrong_group = MoveItBackend(
        MoveItConfig(params_files=[params], planning_group="panda_arm"),
        **FakeMoveItModule().backend_args(lambda c: FakeGripper(0.03)),
    )
    with pytest.raises(BackendFault, match=r"no planning group 'panda_arm'.*Could not find joint model group"):
        wrong_group.connect()

    no_controllers = str(moveit_params_file(tmp_path, moveit_simple_controller_manager={"controller_names": []}))
    fake = FakeMoveItModule()
    backend = MoveItBackend(
        MoveItConfig(params_files=[no_controllers]), **fake.backend_args(lambda c: FakeGripper(0.03))
    )
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
    backend = MoveItBackend(
        MoveItConfig(params_files=[params], robot_namespace="left"),
        state_probe=probe,
        **fake.backend_args(lambda c: FakeGripper(0.03)),
    )
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


# -- the simulated Feetech bus (grounded_planner/sim/feetech.py, so101_bus.py), driven by LeRobot 0.4.4 itself --------


@pytest.fixture
def so101_sim(tmp_path):
    pytest.importorskip("mujoco")
    pytest.importorskip("lerobot.robots.so_follower")
    pytest.importorskip("placo")
    from pathlib import Path

    from grounded_planner.sim.so101_bus import So101BusSim

    scenario = Path(__file__).resolve().parents[1] / "config" / "scenarios" / "box_in_bowl_so101.yaml"
    sim = So101BusSim(scenario, seed=0, calibration_dir=tmp_path).start()
    yield sim
    sim.close()


def _so101_backend(sim):
    from pathlib import Path

    from grounded_planner.execution.backends.lerobot_backend import LeRobotBackend, LeRobotConfig
    from grounded_planner.execution.config import ExecutorConfig

    config = ExecutorConfig.load(Path(__file__).resolve().parents[1] / "config" / "execution_so101.yaml")
    options = {
        **config.backend_options("lerobot"),
        "port": sim.port,
        "calibration": str(sim.calibration_path),
        "on_disconnect": "hold",
    }
    return LeRobotBackend(LeRobotConfig(**options), config.safety)


def _sag_deg(backend, sim, joint: str, seconds: float = 2.0) -> float:
    """How far ``joint`` stays short of the goal its servo holds, degrees, after ``seconds``."""
    from grounded_planner.sim.feetech import ADDR

    time.sleep(seconds)
    robot = backend._robot
    goal = robot.bus.read("Goal_Position", joint)
    present = robot.bus.read("Present_Position", joint)
    assert sim.bus.servos[robot.bus.motors[joint].id].mem[ADDR["Torque_Enable"]] == 1
    return abs(goal - present)


def test_the_sim_servo_follows_lerobots_p_gain_and_torque_limit(so101_sim):
    """LeRobot 0.4.4's configure() writes P_Coefficient 16 (factory 32) and halves the gripper's torque limit: the
    simulated servos' position loops follow those registers (stiffness, force cap), so a joint holding the arm
    against gravity stays short of its goal. Measured here (seed 0, arm at (0.22, 0, 0.12) m): 0.18-0.26 deg for
    shoulder_lift at P 16, inside the backend's 2 degree arrival tolerance, so the move still arrives."""
    import numpy as np

    from grounded_planner.sim.feetech import ADDR
    from grounded_planner.sim.so101_bus import FACTORY_P_COEFFICIENT, STALL_TORQUE_NM

    backend = _so101_backend(so101_sim)
    backend.connect()
    try:
        servos, model = so101_sim.bus.servos, so101_sim.cell.model
        assert servos[2].mem[ADDR["P_Coefficient"]] == 16  # shoulder_lift, as LeRobot configured it
        assert servos[6].word("Max_Torque_Limit") == 500  # the gripper: half its stall torque
        backend.move_to_pose((0.22, 0.0, 0.12), 0.0, 0.5)  # reached within arrive_tolerance_deg
        time.sleep(0.5)
        shoulder, gripper = so101_sim._act[1], so101_sim._act[5]
        assert model.actuator_gainprm[shoulder, 0] == pytest.approx(so101_sim._gain[1] * 16 / FACTORY_P_COEFFICIENT)
        np.testing.assert_allclose(model.actuator_forcerange[gripper], (-STALL_TORQUE_NM / 2, STALL_TORQUE_NM / 2))
        assert _sag_deg(backend, so101_sim, "shoulder_lift") < backend.config.arrive_tolerance_deg
    finally:
        backend.disconnect()


def test_a_status_error_bit_reaches_lerobot_as_its_error(so101_sim):
    """An overloaded servo sets ERRBIT_OVERLOAD in every answer: LeRobot raises on it in single reads and writes,
    ignores it in sync reads (observations go on), and its connect handshake (pings that do not raise) counts such
    a servo as missing: the backend refuses naming it."""
    from grounded_planner.sim.feetech import ERRBIT_OVERLOAD

    backend = _so101_backend(so101_sim)
    backend.connect()
    try:
        so101_sim.set_status_error("elbow_flex", ERRBIT_OVERLOAD)
        with pytest.raises(RuntimeError, match="Overload"):
            backend._robot.bus.read("Present_Position", "elbow_flex")
        assert backend.joints_deg().shape == (5,)  # sync reads still answer
    finally:
        backend.disconnect()
    again = _so101_backend(so101_sim)
    with pytest.raises(BackendFault, match=r"Missing motor IDs:\n  - 3 "):
        again.connect()
    so101_sim.set_status_error("elbow_flex", 0)
    again.connect()
    again.disconnect()


# -- the Franka Hand's grasp tolerance (helpers/franka_hand.py mirrors libfranka 0.15.0's Gripper::grasp) ------------


def _grasp_plan(object_width_m: float | None):
    import math

    from grounded_planner.geometry.targets import TargetSet
    from grounded_planner.plan import GroundedAction, GroundedPlan

    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0)),
            GroundedAction("place", "cube", "plate", point=(5.0, 5.0)),
        ],
    )
    grasp = {"index": 0, "type": "grasp", "object": "cube", "position": [0.5, 0.1, 0.04], "yaw": math.pi / 2}
    if object_width_m is not None:
        grasp["width"] = object_width_m
    targets = TargetSet.from_dict(
        {
            "frame": "fr3_link0",
            "warnings": [],
            "targets": [grasp, {"index": 1, "type": "place", "object": "cube", "position": [0.55, -0.15, 0.0]}],
        }
    )
    return plan, targets


def _franka_run(tmp_path, gripper, object_width_m, **moveit_options):
    from pathlib import Path

    from grounded_planner.execution.config import ExecutorConfig
    from grounded_planner.execution.executor import Executor

    cfg = ExecutorConfig.load(Path(__file__).resolve().parents[1] / "config" / "execution_franka.yaml")
    options = {**cfg.backend_options("moveit"), "params_files": [str(moveit_params_file(tmp_path))], **moveit_options}
    backend = MoveItBackend(MoveItConfig(**options), cfg.safety, **FakeMoveItModule().backend_args(lambda c: gripper))
    backend.connect()
    try:
        return Executor(backend, cfg).execute(*_grasp_plan(object_width_m))
    finally:
        backend.disconnect()


def test_a_grasp_is_sent_with_the_objects_width_and_a_tolerance_the_hand_accepts(tmp_path):
    """The backend sent grasp(0, eps_inner 0, eps_outer max_width + 1 cm), a window beyond the hand's opening that
    libfranka refuses ("Command failed!", franky #58). Now the grasp target's width and backends.moveit's
    tolerances (1 cm each way by default): a 35 mm cube planned as 35 mm is held."""
    gripper = FakeGripper(object_width_m=0.035)
    result = _franka_run(tmp_path, gripper, 0.035)
    assert result.success, result.to_dict()
    [grasp] = [call for call in gripper.calls if call[0] == "grasp"]
    assert grasp[1] == pytest.approx(0.035) and grasp[3:] == pytest.approx((0.01, 0.01))
    assert grasp[1] + grasp[4] <= gripper.max_width()  # the window stays inside the hand's opening
    # the old window, as the hand answers it
    assert not gripper.grasp(0.0, 0.05, 20.0, 0.0, gripper.max_width() + 0.01, 10.0)
    assert gripper.last_error == "libfranka gripper: Command failed!"


def test_fingers_stopping_outside_the_tolerance_are_a_failed_grasp_named_as_such(tmp_path):
    """A cube of 35 mm planned as 60 mm: the fingers stop 25 mm inside the window's inner edge, libfranka's grasp
    returns false, and the step ends grasp_failed (the gripper opened again) with the widths and the settings."""
    from grounded_planner.execution.outcomes import Outcome

    result = _franka_run(tmp_path, FakeGripper(object_width_m=0.035), 0.06)
    assert not result.success
    step = result.steps[0]
    assert step.outcome is Outcome.GRASP_FAILED, result.to_dict()
    assert (
        "stopped at 35.0 mm, outside the grasp tolerance around the object's expected width 60.0 mm "
        "(-10.0/+10.0 mm, backends.moveit.grasp_epsilon_inner_m/_outer_m): the gripper reports the grasp failed"
    ) in step.message
    assert "gripper opened" in step.message
    # the same plan with a wider inner tolerance (off its default) is held
    assert _franka_run(tmp_path, FakeGripper(object_width_m=0.035), 0.06, grasp_epsilon_inner_m=0.03).success
    # without a width in the plan: whatever is held counts, inside the opening; the width read decides
    gripper = FakeGripper(object_width_m=0.035)
    assert _franka_run(tmp_path, gripper, None).success
    [grasp] = [call for call in gripper.calls if call[0] == "grasp"]
    assert grasp[1] == 0.0 and grasp[4] < gripper.max_width()


def test_a_goal_on_a_link_the_robot_lacks_is_a_fault_naming_the_link(tmp_path):
    """moveit_py's set_goal_state(pose_stamped_msg, pose_link) accepts any link (PlanningComponent::setGoal only
    builds the constraints); plan() answers INVALID_GOAL_CONSTRAINTS once the constraints on the unknown link are
    dropped. The backend names the link and its setting instead of a bare error code; nothing is executed."""
    params = str(moveit_params_file(tmp_path))
    fake = FakeMoveItModule()
    backend = MoveItBackend(
        MoveItConfig(params_files=[params], end_effector_link="panda_hand_tcp"),
        **fake.backend_args(lambda c: FakeGripper(0.03)),
    )
    backend.connect()
    try:
        with pytest.raises(
            BackendFault,
            match=r"INVALID_GOAL_CONSTRAINTS for the goal on link 'panda_hand_tcp': is "
            r"backends\.moveit\.end_effector_link a link of the robot model",
        ):
            backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
        assert not fake[0].executed and len(fake[0].plan_calls) == 1  # answered at once, not retried
    finally:
        backend.disconnect()
    right = MoveItBackend(
        MoveItConfig(params_files=[params]), **FakeMoveItModule().backend_args(lambda c: FakeGripper(0.03))
    )
    right.connect()
    right.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)  # fr3_hand_tcp is in the model
    right.disconnect()
