"""The moveit backend at moveit_py's boundary, against a test double of moveit_py 2.12.4 (moveit2 jazzy).

moveit_py is not installable without a ROS distribution with MoveIt, so test/helpers/fake_moveit_py.py stands in
for it, named as such and keeping what the real bindings do awkwardly: start-up throws without a MoveIt
configuration, PlanRequestParameters(moveit, ns) reads ``<ns>.plan_request_params.*``, plan() holds the GIL
for its whole planning time, execute() needs ``controllers``. FakeGripper is a double of the franka_gripper
client (the real client meets a live action server in test_ros_franka_gripper.py). Goals are real
``geometry_msgs/PoseStamped`` messages. The configuration is config/moveit_py_franka.yaml, shipped, merged into a
stand-in for the config package's parameters the way real.launch.py merges it.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("geometry_msgs.msg")

from grounded_planner.execution.backend import (
    BackendFault,
    MotionStoppedError,  # noqa: E402
    UnreachableError,
)
from grounded_planner.execution.backends import make_backend  # noqa: E402
from grounded_planner.execution.backends.moveit_backend import (
    MoveItBackend,
    MoveItConfig,  # noqa: E402
    check_moveit_py_version,
    write_params_file,
)
from grounded_planner.execution.config import ConfigError, ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.geometry.targets import TargetSet  # noqa: E402
from grounded_planner.plan import GroundedAction, GroundedPlan  # noqa: E402
from helpers.fake_moveit_py import (
    CONFIG_PACKAGE_PARAMS,
    FakeGripper,
    FakeMoveItModule,
    moveit_params,  # noqa: E402
    moveit_params_file,
)
from helpers.stopping import stop_during_move  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_moveit():
    return FakeMoveItModule()


@pytest.fixture
def params_file(tmp_path):
    return moveit_params_file(tmp_path)


def franka_config() -> ExecutorConfig:
    return ExecutorConfig.load(ROOT / "config" / "execution_franka.yaml")


def backend_with(
    fake: FakeMoveItModule, gripper: FakeGripper, cfg: ExecutorConfig, params_file: Path, **options
) -> MoveItBackend:
    opts = {**cfg.backend_options("moveit"), "params_files": [str(params_file)], **options}
    backend = MoveItBackend(MoveItConfig(**opts), cfg.safety, **fake.backend_args(lambda c: gripper))
    backend.connect()
    return backend


def test_grasp_place_sends_top_down_pose_goals_within_the_caps(fake_moveit, params_file):
    cfg = franka_config()
    gripper = FakeGripper(object_width_m=0.035)
    backend = backend_with(fake_moveit, gripper, cfg, params_file)
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0)),
            GroundedAction("place", "cube", "plate", point=(5.0, 5.0)),
        ],
    )
    targets = TargetSet.from_dict(
        {
            "frame": "fr3_link0",
            "warnings": [],
            "targets": [
                {"index": 0, "type": "grasp", "object": "cube", "position": [0.5, 0.1, 0.04], "yaw": math.pi / 2},
                {"index": 1, "type": "place", "object": "cube", "position": [0.55, -0.15, 0.0]},
            ],
        }
    )
    result = Executor(backend, cfg).execute(plan, targets)
    assert result.success, result.to_dict()
    moveit = fake_moveit[0]
    assert moveit.node_name == "grounded_planner_moveit"
    assert len(moveit.goals) == 6  # pre-grasp, descend, lift; pre-place, descend, retreat
    for msg, link, params, pipeline, velocity in moveit.goals:
        assert msg.header.frame_id == "fr3_link0" and link == "fr3_hand_tcp"
        q = np.array([msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z, msg.pose.orientation.w])
        # tool pointing down (180 deg about a horizontal axis), closing along base y: quaternion (+-1, 0, 0, 0)
        assert abs(abs(q[0]) - 1.0) < 1e-9
        assert pipeline == "ompl" and params.planner_id == "RRTConnectkConfigDefault"  # the shipped config, as read
        assert velocity <= cfg.safety.max_velocity_scale
        assert params.max_acceleration_scaling_factor <= cfg.safety.max_acceleration_scale
    np.testing.assert_allclose(moveit.position, [0.55, -0.15, cfg.retreat_height_m])
    assert ("homing",) in gripper.calls
    backend.disconnect()
    assert moveit.shut_down and ("close",) in gripper.calls


def test_planner_settings_are_read_where_moveit_reads_them(fake_moveit, tmp_path):
    """PlanRequestParameters(moveit, ns) appends .plan_request_params itself: the old default doubled it."""
    with pytest.raises(ConfigError, match="appends '.plan_request_params' itself"):
        MoveItConfig(plan_request_namespace="plan_request_params")
    # a named block, as in MoveIt's tutorials (ompl_rrtc.plan_request_params.*)
    named = moveit_params_file(
        tmp_path,
        ompl_rrtc={"plan_request_params": {"planning_pipeline": "ompl", "planner_id": "RRTConnectkConfigDefault"}},
    )
    backend = backend_with(fake_moveit, FakeGripper(0.03), franka_config(), named, plan_request_namespace="ompl_rrtc")
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert fake_moveit[-1].goals[-1][3] == "ompl"
    # a namespace with no plan_request_params under it: refused at connect, not "unreachable" on every move
    backend = MoveItBackend(
        MoveItConfig(params_files=[str(named)], plan_request_namespace="pilz_lin"),
        **fake_moveit.backend_args(lambda c: FakeGripper()),
    )
    with pytest.raises(BackendFault, match=r"pilz_lin\.plan_request_params\.planning_pipeline is not set"):
        backend.connect()
    assert not backend.is_connected and fake_moveit[-1].shut_down


def test_start_up_needs_the_moveit_configuration(fake_moveit, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["executor_node"])
    backend = MoveItBackend(MoveItConfig(), **fake_moveit.backend_args(lambda c: FakeGripper()))
    with pytest.raises(
        BackendFault, match="no MoveIt configuration for moveit_py.*moveit_config:=franka_fr3_moveit_config"
    ):
        backend.connect()
    # a file without the robot: MoveIt's own start-up error, named with where the parameters came from
    empty = Path(write_params_file({"plan_request_params": {"planning_pipeline": "ompl"}}, directory=str(tmp_path)))
    backend = MoveItBackend(
        MoveItConfig(params_files=[str(empty)]), **fake_moveit.backend_args(lambda c: FakeGripper())
    )
    with pytest.raises(BackendFault, match=f"did not start from params files {empty}: Unable to configure planning"):
        backend.connect()
    # franka_fr3_moveit_config alone names OMPL planners but no pipeline plugin: what our config file adds
    no_plugins = dict(CONFIG_PACKAGE_PARAMS, planning_pipelines={"pipeline_names": ["ompl"]})
    backend = MoveItBackend(MoveItConfig(), **fake_moveit.backend_args(lambda c: FakeGripper()), config_dict=no_plugins)
    with pytest.raises(BackendFault, match="Planning plugin name is empty or not defined in namespace 'ompl'"):
        backend.connect()
    # config_dict (MoveItConfigsBuilder(...).to_dict()) and the process's --params-file both start it
    MoveItBackend(
        MoveItConfig(), **fake_moveit.backend_args(lambda c: FakeGripper()), config_dict=moveit_params()
    ).connect()
    monkeypatch.setattr("sys.argv", ["executor_node", "--ros-args", "--params-file", str(moveit_params_file(tmp_path))])
    MoveItBackend(MoveItConfig(), **fake_moveit.backend_args(lambda c: FakeGripper())).connect()
    assert [m.pipelines for m in fake_moveit[-2:]] == [["ompl"], ["ompl"]]
    assert all(m.params["robot_description"] == CONFIG_PACKAGE_PARAMS["robot_description"] for m in fake_moveit[-2:])


def test_humble_and_iron_are_refused_by_name(tmp_path, monkeypatch, params_file):
    with pytest.raises(BackendFault, match=r"moveit_py 2\.5\.9 \(ROS 2 Humble\) is not supported.*>= 2\.9\.0"):
        check_moveit_py_version((2, 5, 9), "humble")
    with pytest.raises(BackendFault, match=r"moveit_py 2\.7\.4 \(ROS 2 Iron\)"):
        check_moveit_py_version((2, 7, 4), "")
    check_moveit_py_version((2, 12, 4), "jazzy")
    # found through the ament index the way a sourced Humble install has it
    share = tmp_path / "humble" / "share" / "moveit_py"
    share.mkdir(parents=True)
    share.joinpath("package.xml").write_text("<package><name>moveit_py</name><version>2.5.9</version></package>")
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "humble"))
    made = FakeMoveItModule(humble=True)  # moveit_py 2.5.9
    backend = MoveItBackend(MoveItConfig(params_files=[str(params_file)]), **made.backend_args(lambda c: FakeGripper()))
    with pytest.raises(BackendFault, match="Humble"):
        backend.connect()
    assert made == []  # refused before MoveIt starts
    # no package.xml to read, but Humble's binding: the signature gives it away
    monkeypatch.setenv("AMENT_PREFIX_PATH", "")
    monkeypatch.setenv("ROS_DISTRO", "")
    with pytest.raises(BackendFault, match=r"Humble's PlanRequestParameters\(moveit\)"):
        backend.connect()
    assert made[-1].shut_down and not backend.is_connected


def test_no_plan_is_unreachable_after_the_whole_budget(fake_moveit, params_file):
    cfg = franka_config()
    cfg.safety.workspace_max_m = (1.5, 0.45, 0.6)  # let the envelope pass it so MoveIt must say no
    backend = backend_with(fake_moveit, FakeGripper(0.03), cfg, params_file, planning_time_s=1.0, plan_slice_s=0.25)
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0))])
    targets = TargetSet.from_dict(
        {
            "frame": "b",
            "warnings": [],
            "targets": [{"index": 0, "type": "grasp", "object": "cube", "position": [1.2, 0.0, 0.05]}],
        }
    )
    result = Executor(backend, cfg).execute(plan, targets)
    assert result.steps[0].outcome is Outcome.UNREACHABLE
    assert "no plan" in result.steps[0].message and "PLANNING_FAILED" in result.steps[0].message
    moveit = fake_moveit[0]
    toward_target = moveit.plan_calls[:-1]  # the last plan is the abort retreat
    assert sum(toward_target) == pytest.approx(1.0, abs=0.05) and max(toward_target) <= 0.25 + 1e-9
    # nothing went towards the target; the only motion is the abort retreat straight up from the start
    assert len(moveit.executed) == 1
    np.testing.assert_allclose(moveit.executed[0], [0.3, 0.0, 0.5 + cfg.abort_retreat_height_m])


def test_a_hard_plan_gets_the_whole_budget_in_slices(fake_moveit, params_file):
    backend = backend_with(
        fake_moveit, FakeGripper(0.03), franka_config(), params_file, planning_time_s=2.0, plan_slice_s=0.3
    )
    fake_moveit[0].solve_s = 0.2  # within one slice
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert len(fake_moveit[0].executed) == 1
    fake_moveit[0].solve_s = 0.6  # longer than any slice: never found, and said so after the budget
    with pytest.raises(UnreachableError, match="TIMED_OUT"):
        backend.move_to_pose((0.5, 0.1, 0.3), 0.0, 0.3)


def stop_while_planning(backend, moveit, after_s: float) -> tuple[bool, float]:
    """Move, and stop from a second thread ``after_s`` into the first plan() call, while it holds the GIL (so the
    stopping thread waits for it, as a cancel from the executor node would); return (the move raised
    MotionStoppedError, seconds from the intended stop to stop() returning)."""
    outcome: list = []

    def move() -> None:
        try:
            backend.move_to_pose((0.5, 0.1, 0.3), 0.0, 0.3)
            outcome.append("moved")
        except MotionStoppedError:
            outcome.append("stopped")

    def stop() -> None:
        asked = time.monotonic() + after_s
        time.sleep(after_s)  # ends while plan() holds the GIL
        backend.stop()
        outcome.append(time.monotonic() - asked)

    stopper = threading.Thread(target=stop)

    def on_plan() -> None:
        moveit.on_plan = None
        stopper.start()  # started now, sleeping (without the GIL) when plan() takes hold of it

    moveit.on_plan = on_plan
    mover = threading.Thread(target=move)
    mover.start()
    mover.join(10.0)
    stopper.join(10.0)
    assert not mover.is_alive() and not stopper.is_alive(), "move or stop did not return"
    return "stopped" in outcome, next(x for x in outcome if isinstance(x, float))


def test_stop_while_planning_returns_within_a_slice_and_the_plan_is_never_executed(fake_moveit, params_file):
    cfg = franka_config()
    slice_s = 0.3
    backend = backend_with(fake_moveit, FakeGripper(0.03), cfg, params_file, planning_time_s=5.0, plan_slice_s=slice_s)
    # a stop waits for the plan() slice in progress (it cannot run before), never for the 5 s budget; the slack
    # is for a loaded machine waking the stopping thread late
    bound_s = slice_s + 1.0
    moveit = fake_moveit[0]
    moveit.solve_s = 0.25  # found 0.15 s after the stop was asked for
    stopped, took = stop_while_planning(backend, moveit, after_s=0.1)
    assert stopped and took < bound_s, f"stop took {took:.2f} s"
    assert moveit.execute_calls == 0 and moveit.executed == [], "a plan found after the stop was executed"
    moveit.solve_s = 10.0  # a plan that is never found: the stop still ends it within a slice
    stopped, took = stop_while_planning(backend, moveit, after_s=0.1)
    assert stopped and moveit.execute_calls == 0
    assert took < bound_s, f"stop took {took:.2f} s"


def test_plan_slices_must_fit_the_stop_bound(params_file):
    cfg = franka_config()
    with pytest.raises(ConfigError, match=r"plan_slice_s \(1.5 s\) must be below safety.stop_timeout_s"):
        MoveItBackend(MoveItConfig(plan_slice_s=1.5), cfg.safety)


def test_stop_halts_execution_through_the_execution_manager(fake_moveit, params_file):
    cfg = franka_config()
    backend = backend_with(fake_moveit, FakeGripper(0.03), cfg, params_file)
    moveit = fake_moveit[0]
    moveit.seconds_per_m = 20.0
    stopped, took = stop_during_move(backend, (0.6, 0.2, 0.3), speed_scale=0.3)
    assert stopped and moveit.stop_calls >= 1
    assert took < backend.stop_timeout_s
    assert moveit.executed == []  # never reached the goal


def test_aborted_execution_is_a_fault(fake_moveit, params_file):
    backend = backend_with(fake_moveit, FakeGripper(0.03), franka_config(), params_file)
    fake_moveit[0].execute_status = "ABORTED"
    with pytest.raises(BackendFault, match="ABORTED"):
        backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)


def test_gripper_errors_are_typed(fake_moveit, params_file):
    from grounded_planner.execution.backend import MotionTimeoutError

    class Silent(FakeGripper):
        def move(self, width_m, speed_mps, timeout_s):
            raise TimeoutError("/franka_gripper/move did not finish within 20.0 s (goal cancelled)")

    backend = backend_with(fake_moveit, Silent(), franka_config(), params_file)
    with pytest.raises(MotionTimeoutError, match="did not finish"):
        backend.gripper_open()
    missing = MoveItBackend(
        MoveItConfig(params_files=[str(params_file)]),
        **fake_moveit.backend_args(lambda c: _raise(ConnectionError("no action server /franka_gripper/homing"))),
    )
    with pytest.raises(BackendFault, match=r"under /franka_gripper not usable \(franka_ros2_version 3\)"):
        missing.connect()
    assert not missing.is_connected and fake_moveit[-1].shut_down


def _raise(exc):
    raise exc


def test_gripper_names_per_franka_ros2_release():
    assert MoveItConfig().gripper_namespace == "/franka_gripper"  # v2.x (Humble), v3.x (Jazzy)
    assert MoveItConfig(franka_ros2_version="v1.1.0").gripper_namespace == "/fr3_gripper"
    assert MoveItConfig(franka_ros2_version="0", arm_id="fer").gripper_namespace == "/fer_gripper"
    assert MoveItConfig(robot_namespace="/left/").gripper_namespace == "/left/franka_gripper"
    assert MoveItConfig(gripper_action_namespace="my/gripper").gripper_namespace == "/my/gripper"
    with pytest.raises(ConfigError, match="franka_ros2_version must look like"):
        MoveItConfig(franka_ros2_version="jazzy")


def test_shipped_config_works_as_shipped(fake_moveit, params_file):
    cfg = franka_config()
    opts = cfg.backend_options("moveit")
    assert opts["plan_request_namespace"] == "" and opts["franka_ros2_version"] == "3"
    backend = make_backend("moveit", cfg, **fake_moveit.backend_args(lambda c: FakeGripper(0.03)))
    backend.config.params_files = [str(params_file)]
    backend.connect()
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert fake_moveit[0].executed


def test_without_a_ros_install_connect_says_what_is_missing(params_file):
    import importlib.util

    from grounded_planner.ros.moveit import moveit_backend_args

    backend = make_backend("moveit", franka_config())  # no ROS pieces passed in
    with pytest.raises(BackendFault, match="come from a ROS install.*moveit_backend_args"):
        backend.connect()
    if importlib.util.find_spec("moveit") is not None:
        pytest.skip("a real moveit_py is importable here")
    backend = make_backend("moveit", franka_config(), **moveit_backend_args())  # what executor_node passes
    with pytest.raises(BackendFault, match="needs moveit_py.*ros-jazzy-moveit-py"):
        backend.connect()
    assert not backend.is_connected
