"""executor_node in a child process on the MuJoCo simulator: the ExecutePlan action with feedback, dry run,
cancel, and goals without poses refused (real DDS between processes)."""

import importlib.util

import pytest

from conftest import REPO, requires_ros, spawn_python
from helpers.ros_wait import call, spin_until, stop_process
from helpers.sim_executor import EXECUTE_ACTION, goal_result, send_goal, start_sim_executor

# find_spec, not importorskip: importing mujoco before the sim layer sets MUJOCO_GL breaks headless rendering
pytestmark = [
    requires_ros,
    pytest.mark.ros,
    pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)"),
]

SCENARIO = REPO / "config" / "scenarios" / "box_in_bowl.yaml"


def sim_plan_msg():
    """The box_in_bowl ground-truth plan (seed 0) with poses back-projected from the simulated RGB-D frame."""
    from grounded_planner.geometry.targets import backproject
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner.sim.export import gt_plan
    from grounded_planner.sim.workcell import SimWorkcell

    with SimWorkcell.from_scenario(SCENARIO, seed=0) as cell:
        _rgb, depth_m = cell.render()
        plan = gt_plan(cell)
        located = backproject(plan, depth_m, cell.camera_model, cell.extrinsics)
    return plan, plan_to_msg(located)


class ActionClientSide:
    def __init__(self, context):
        import rclpy
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile
        from grounded_planner_interfaces.action import ExecutePlan
        from grounded_planner_interfaces.msg import ExecutionEvent, ExecutionResult

        self.node = rclpy.create_node("executor_probe", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.client = ActionClient(self.node, ExecutePlan, EXECUTE_ACTION)
        self.Goal = ExecutePlan.Goal
        self.results = []
        self.events = []
        self.node.create_subscription(
            ExecutionResult, "/grounded_planner/execution/result", self.results.append, QoSProfile(depth=10)
        )
        self.node.create_subscription(
            ExecutionEvent, "/grounded_planner/execution/feedback", self.events.append, QoSProfile(depth=100)
        )

    def send(self, goal, feedback=None, timeout_s=60.0):
        return send_goal(self.executor, self.node, self.client, goal, timeout_s, feedback)

    def result(self, handle, timeout_s=120.0):
        return goal_result(self.executor, handle, timeout_s)


@pytest.fixture
def executor_child(ros_domain, tmp_path, request):
    # realtime 1.0 paces the simulator to the wall clock, so that a cancel after the first feedback lands mid-plan
    child = start_sim_executor(tmp_path, realtime_factor=getattr(request, "param", 0.0))
    yield child
    out = stop_process(child)
    assert "Traceback" not in out, out


def test_plan_runs_on_the_simulator_with_feedback_per_step(executor_child, rclpy_context):
    from action_msgs.msg import GoalStatus
    from std_srvs.srv import SetBool

    plan, msg = sim_plan_msg()
    side = ActionClientSide(rclpy_context)
    feedback = []
    handle = side.send(side.Goal(plan=msg, dry_run=True))
    assert handle.accepted
    dry = side.result(handle)
    assert dry.status == GoalStatus.STATUS_SUCCEEDED and dry.result.success
    assert list(dry.result.step_outcomes) == ["ok", "ok"] and "dry run" in dry.result.message

    handle = side.send(side.Goal(plan=msg), feedback=lambda f: feedback.append(f.feedback))
    done = side.result(handle)
    assert done.status == GoalStatus.STATUS_SUCCEEDED, done.result.message
    assert done.result.success and done.result.steps_completed == 2
    assert [f.step for f in feedback][0] == 0 and {f.step for f in feedback} == {0, 1}
    assert "close_gripper" in [f.state for f in feedback] and feedback[0].current.type == "grasp"
    spin_until(side.executor, lambda: len(side.results) >= 2, 30.0, "the typed result on the result topic")
    real = side.results[-1]
    assert real.scene_success_known and real.scene_success, "the box did not end up in the bowl"
    assert [s.outcome for s in real.steps] == ["ok", "ok"] and not real.dry_run and side.results[0].dry_run
    assert real.instruction == plan.instruction
    spin_until(side.executor, lambda: any(e.state == "close_gripper" for e in side.events), 10.0, "typed events")
    grasp_event = next(e for e in side.events if e.state == "close_gripper")
    assert grasp_event.has_action and grasp_event.action.type == "grasp" and grasp_event.action.width > 0

    # the same plan again: the box is in the bowl already (nothing set the scene back), so the scene's success says
    # nothing of this goal, which grasps where the box was: no automatic label (it was "success", whatever happened)
    again = side.result(side.send(side.Goal(plan=msg)))
    spin_until(side.executor, lambda: len(side.results) >= 3, 30.0, "the second run's result")
    second = side.results[-1]
    assert not second.dry_run and not second.scene_success_known, (again.result.message, second.scene_success)

    # the scene set back by the service: the box is where the camera saw it, and the same plan does the task again
    from std_srvs.srv import Trigger

    reset = side.node.create_client(Trigger, "/grounded_planner/reset_scene")
    held = side.send(side.Goal(plan=msg, require_approval=True))  # a plan waiting for approval: no reset under it
    spin_until(side.executor, lambda: any(e.state == "awaiting_approval" for e in side.events), 30.0, "the hold")
    refused = call(side.executor, reset, Trigger.Request(), 30.0, "/grounded_planner/reset_scene")
    assert not refused.success and "awaiting approval" in refused.message, refused.message
    approve = side.node.create_client(SetBool, "/grounded_planner/approve")
    assert call(side.executor, approve, SetBool.Request(data=False), 30.0, "a rejection").success
    assert not side.result(held).result.success
    answer = call(side.executor, reset, Trigger.Request(), 30.0, "/grounded_planner/reset_scene")
    assert answer.success and "back at its start" in answer.message, answer.message
    third = side.result(side.send(side.Goal(plan=msg)))
    assert third.result.success, third.result.message
    spin_until(side.executor, lambda: len(side.results) >= 5, 30.0, "the run after the reset")
    assert side.results[-1].scene_success_known and side.results[-1].scene_success
    side.node.destroy_node()
    out = stop_process(executor_child)
    assert "the scene met its success check before this goal began" in out and "Traceback" not in out, out
    assert "scene reset (grounded_planner/reset_scene)" in out, out


@pytest.mark.parametrize("executor_child", [1.0], indirect=True)
def test_cancel_stops_the_plan_and_goals_without_poses_are_refused(executor_child, rclpy_context):
    from action_msgs.msg import GoalStatus

    from grounded_planner.ros.convert import plan_to_msg

    plan, msg = sim_plan_msg()
    side = ActionClientSide(rclpy_context)
    no_poses = side.result(side.send(side.Goal(plan=plan_to_msg(plan))))
    assert no_poses.status == GoalStatus.STATUS_ABORTED and "have no pose" in no_poses.result.message

    feedback = []
    handle = side.send(side.Goal(plan=msg), feedback=lambda f: feedback.append(f.feedback))
    spin_until(side.executor, lambda: len(feedback) >= 1, 60.0, "the first feedback")
    cancel = handle.cancel_goal_async()
    spin_until(side.executor, cancel.done, 30.0, "the cancel response")
    outcome = side.result(handle)
    assert outcome.status == GoalStatus.STATUS_CANCELED
    assert not outcome.result.success and "cancelled" in list(outcome.result.step_outcomes)
    side.node.destroy_node()


def test_inactive_executor_rejects_goals_until_activated(ros_domain, tmp_path, rclpy_context):
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    child = spawn_python(
        ["-m", "grounded_planner.ros.executor_node", "--ros-args", "-p", "backend:=sim", "-p", "autostart:=false"]
    )
    try:
        _plan, msg = sim_plan_msg()
        side = ActionClientSide(rclpy_context)
        change = side.node.create_client(ChangeState, "/executor/change_state")
        assert call(
            side.executor,
            change,
            ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE)),
            60.0,
            "configure",
        ).success
        assert not side.send(side.Goal(plan=msg, dry_run=True)).accepted, (
            "an inactive (configured) executor took a goal"
        )
        assert call(
            side.executor,
            change,
            ChangeState.Request(transition=Transition(id=Transition.TRANSITION_ACTIVATE)),
            30.0,
            "activate",
        ).success
        handle = side.send(side.Goal(plan=msg, dry_run=True))
        assert handle.accepted and side.result(handle).result.success
        side.node.destroy_node()
    finally:
        out = stop_process(child)
    assert "Traceback" not in out, out
