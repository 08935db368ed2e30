"""The moveit backend at moveit_py's boundary, with FakeMoveItPy (a test double of moveit_py) and FakeGripper.

moveit_py is not installable without a ROS distribution, so these doubles stand in for it, named as such:
FakeMoveItPy keeps moveit_py's calls (``get_planning_component``, ``set_start_state_to_current_state``,
``set_goal_state(pose_stamped_msg=, pose_link=)``, ``plan(single_plan_parameters=)`` -> result with
``.trajectory``, ``execute(trajectory, controllers=[])``, ``get_trajectory_execution_manager().stop_execution``,
``get_planning_scene_monitor().read_only()``), installed as the ``moveit.planning`` module. The goals it receives
are real ``geometry_msgs/PoseStamped`` messages; FakeGripper keeps franka_gripper's move/grasp/homing.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("geometry_msgs.msg")

from grounded_planner.execution.backend import BackendFault  # noqa: E402
from grounded_planner.execution.backends import make_backend  # noqa: E402
from grounded_planner.execution.backends.moveit_backend import MoveItBackend, MoveItConfig  # noqa: E402
from grounded_planner.execution.config import ExecutorConfig  # noqa: E402
from grounded_planner.execution.executor import Executor  # noqa: E402
from grounded_planner.execution.outcomes import Outcome  # noqa: E402
from grounded_planner.geometry.targets import TargetSet  # noqa: E402
from grounded_planner.plan import GroundedAction, GroundedPlan  # noqa: E402
from helpers.stopping import stop_during_move  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REACH_M = 0.85


class FakeMoveItPy:
    """Test double of moveit_py's MoveItPy: plans succeed within REACH_M of the shoulder; executing a trajectory
    takes ``seconds_per_m / velocity scaling`` per metre and can be stopped by the execution manager."""

    def __init__(self, node_name: str = "", seconds_per_m: float = 0.2, execute_status: bool = True):
        self.node_name = node_name
        self.seconds_per_m = seconds_per_m
        self.execute_status = execute_status
        self.position = np.array([0.3, 0.0, 0.5])
        self.quaternion = np.array([1.0, 0.0, 0.0, 0.0])
        self.goals: list = []  # (PoseStamped, pose_link, PlanRequestParameters)
        self.executed: list = []
        self.stop_calls = 0
        self._stop = threading.Event()
        self._pending = None
        fake = self

        class Component:
            def __init__(self, group: str):
                self.group = group

            def set_start_state_to_current_state(self) -> None:
                pass

            def set_goal_state(self, pose_stamped_msg=None, pose_link=None, **_):
                fake._pending = (pose_stamped_msg, pose_link)

            def plan(self, single_plan_parameters=None, **_):
                msg, link = fake._pending
                fake.goals.append((msg, link, single_plan_parameters))
                p = msg.pose.position
                goal = np.array([p.x, p.y, p.z])
                if np.linalg.norm(goal - [0.0, 0.0, 0.333]) > REACH_M:
                    return _Result(False, None)
                q = msg.pose.orientation
                return _Result(True, (goal, np.array([q.x, q.y, q.z, q.w]), single_plan_parameters))

        self.component = Component

    def get_planning_component(self, name: str):
        return self.component(name)

    def execute(self, trajectory, controllers=None):
        goal, quaternion, params = trajectory
        self._stop.clear()
        duration = np.linalg.norm(goal - self.position) * self.seconds_per_m / params.max_velocity_scaling_factor
        start, begin = self.position.copy(), time.monotonic()
        while time.monotonic() - begin < duration:
            if self._stop.wait(0.002):
                frac = (time.monotonic() - begin) / duration
                self.position = start + (goal - start) * frac
                return _Status(False, "PREEMPTED")
        self.position, self.quaternion = goal, quaternion
        self.executed.append(goal)
        return _Status(self.execute_status, "SUCCEEDED" if self.execute_status else "ABORTED")

    def get_trajectory_execution_manager(self):
        fake = self

        class Manager:
            def stop_execution(self, auto_clear=True):
                fake.stop_calls += 1
                fake._stop.set()

        return Manager()

    def get_planning_scene_monitor(self):
        from geometry_msgs.msg import Pose

        fake = self

        class Monitor:
            @contextlib.contextmanager
            def read_only(self):
                pose = Pose()
                pose.position.x, pose.position.y, pose.position.z = (float(v) for v in fake.position)
                (pose.orientation.x, pose.orientation.y, pose.orientation.z,
                 pose.orientation.w) = (float(v) for v in fake.quaternion)
                yield types.SimpleNamespace(current_state=types.SimpleNamespace(get_pose=lambda link: pose))

        return Monitor()

    def shutdown(self) -> None:
        pass


class _Result:
    def __init__(self, ok: bool, trajectory):
        self.ok, self.trajectory = ok, trajectory

    def __bool__(self) -> bool:
        return self.ok


class _Status:
    def __init__(self, ok: bool, status: str):
        self.ok, self.status = ok, status

    def __bool__(self) -> bool:
        return self.ok


class FakePlanRequestParameters:
    """Test double of moveit.planning.PlanRequestParameters (the fields the backend sets)."""

    def __init__(self, moveit, ns: str):  # the real binding takes the namespace positionally, no default
        self.planning_time = 1.0
        self.max_velocity_scaling_factor = 1.0
        self.max_acceleration_scaling_factor = 1.0


class FakeGripper:
    """Test double of the franka_gripper action client: closes on an object of ``object_width_m`` (None: nothing)."""

    def __init__(self, object_width_m: float | None = None):
        self.object_width_m = object_width_m
        self._width = 0.08
        self.calls: list = []

    def move(self, width_m, speed_mps, timeout_s):
        self.calls.append(("move", width_m))
        self._width = width_m
        return True

    def grasp(self, width_m, speed_mps, force_n, epsilon_inner_m, epsilon_outer_m, timeout_s):
        self.calls.append(("grasp", width_m, force_n))
        self._width = self.object_width_m or 0.0
        return epsilon_inner_m <= self._width - width_m <= epsilon_outer_m or self._width == width_m

    def homing(self, timeout_s):
        self.calls.append(("homing",))
        return True

    def width(self):
        return self._width

    def max_width(self):
        return 0.08

    def cancel(self):
        self.calls.append(("cancel",))

    def close(self):
        pass


@pytest.fixture
def fake_moveit_module(monkeypatch):
    """Install the doubles as the ``moveit.planning`` module, the way moveit_py is imported on a ROS install."""
    made: list[FakeMoveItPy] = []

    def factory(node_name="moveit_py", **kwargs):
        made.append(FakeMoveItPy(node_name))
        return made[-1]

    planning = types.ModuleType("moveit.planning")
    planning.MoveItPy = factory
    planning.PlanRequestParameters = FakePlanRequestParameters
    package = types.ModuleType("moveit")
    package.planning = planning
    monkeypatch.setitem(sys.modules, "moveit", package)
    monkeypatch.setitem(sys.modules, "moveit.planning", planning)
    return made


def franka_config() -> ExecutorConfig:
    return ExecutorConfig.load(ROOT / "config" / "execution_franka.yaml")


def backend_with(fake_moveit_module, gripper: FakeGripper, cfg: ExecutorConfig) -> MoveItBackend:
    backend = MoveItBackend(MoveItConfig(**cfg.backend_options("moveit")), cfg.safety,
                            gripper_factory=lambda c: gripper)
    backend.connect()
    return backend


def test_grasp_place_sends_top_down_pose_goals_within_the_caps(fake_moveit_module):
    cfg = franka_config()
    gripper = FakeGripper(object_width_m=0.035)
    backend = backend_with(fake_moveit_module, gripper, cfg)
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0)),
                                          GroundedAction("place", "cube", "plate", point=(5.0, 5.0))])
    targets = TargetSet.from_dict({"frame": "fr3_link0", "warnings": [], "targets": [
        {"index": 0, "type": "grasp", "object": "cube", "position": [0.5, 0.1, 0.04], "yaw": math.pi / 2},
        {"index": 1, "type": "place", "object": "cube", "position": [0.55, -0.15, 0.0]}]})
    result = Executor(backend, cfg).execute(plan, targets)
    assert result.success, result.to_dict()
    moveit = fake_moveit_module[0]
    assert len(moveit.goals) == 6  # pre-grasp, descend, lift; pre-place, descend, retreat
    for msg, link, params in moveit.goals:
        assert msg.header.frame_id == "fr3_link0" and link == "fr3_hand_tcp"
        q = np.array([msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z, msg.pose.orientation.w])
        # tool pointing down (180 deg about a horizontal axis), closing along base y: quaternion (+-1, 0, 0, 0)
        assert abs(abs(q[0]) - 1.0) < 1e-9
        assert params.max_velocity_scaling_factor <= cfg.safety.max_velocity_scale
        assert params.max_acceleration_scaling_factor <= cfg.safety.max_acceleration_scale
    np.testing.assert_allclose(moveit.position, [0.55, -0.15, cfg.retreat_height_m])
    assert ("homing",) in gripper.calls


def test_no_plan_is_unreachable(fake_moveit_module):
    cfg = franka_config()
    cfg.safety.workspace_max_m = (1.5, 0.45, 0.6)  # let the envelope pass it so MoveIt must say no
    backend = backend_with(fake_moveit_module, FakeGripper(0.03), cfg)
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1.0, 1.0, 9.0, 9.0))])
    targets = TargetSet.from_dict({"frame": "b", "warnings": [], "targets": [
        {"index": 0, "type": "grasp", "object": "cube", "position": [1.2, 0.0, 0.05]}]})
    result = Executor(backend, cfg).execute(plan, targets)
    assert result.steps[0].outcome is Outcome.UNREACHABLE
    assert "no plan" in result.steps[0].message
    # nothing went towards the target; the only motion is the abort retreat straight up from the start
    executed = fake_moveit_module[0].executed
    assert len(executed) == 1
    np.testing.assert_allclose(executed[0], [0.3, 0.0, 0.5 + cfg.abort_retreat_height_m])


def test_stop_halts_execution_through_the_execution_manager(fake_moveit_module):
    cfg = franka_config()
    backend = backend_with(fake_moveit_module, FakeGripper(0.03), cfg)
    moveit = fake_moveit_module[0]
    moveit.seconds_per_m = 20.0
    stopped, took = stop_during_move(backend, (0.6, 0.2, 0.3), speed_scale=0.3)
    assert stopped and moveit.stop_calls >= 1
    assert took < backend.stop_timeout_s
    assert moveit.executed == []  # never reached the goal


def test_aborted_execution_is_a_fault(fake_moveit_module):
    cfg = franka_config()
    backend = backend_with(fake_moveit_module, FakeGripper(0.03), cfg)
    fake_moveit_module[0].execute_status = False
    with pytest.raises(BackendFault, match="ABORTED"):
        backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)


def test_without_moveit_py_connect_says_what_is_missing():
    if "moveit" in sys.modules:
        pytest.skip("a real moveit_py is importable here")
    backend = make_backend("moveit", franka_config())
    with pytest.raises(BackendFault, match="moveit_py"):
        backend.connect()
    assert not backend.is_connected
