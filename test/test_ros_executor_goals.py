"""executor_node checks goals at the door (issue 18 item 3): a NaN or non-unit quaternion, a non-finite position or
a wrong frame ends the goal ABORTED with a message naming step and field, `execution/result` is published for
every goal (refused ones included), dry run refuses alike, and two goals at the door are never both accepted."""

import importlib.util
import math
import threading

import pytest

from conftest import requires_ros
from helpers.ros_wait import reach, spin_until, stop_process
from helpers.sim_executor import EXECUTE_ACTION, goal_result, plan_msg, send_goal, start_sim_executor

pytestmark = [requires_ros, pytest.mark.ros]

needs_mujoco = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)")


@needs_mujoco
def test_bad_goals_end_with_a_result_naming_step_and_field(ros_domain, tmp_path, rclpy_context):
    import rclpy
    from action_msgs.msg import GoalStatus
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile

    from grounded_planner_interfaces.action import ExecutePlan
    from grounded_planner_interfaces.msg import ExecutionResult

    child = start_sim_executor(tmp_path)
    node = rclpy.create_node("goal_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        client = ActionClient(node, ExecutePlan, EXECUTE_ACTION)
        results = []
        node.create_subscription(
            ExecutionResult, "/grounded_planner/execution/result", results.append, QoSProfile(depth=20)
        )

        def run(goal):
            handle = send_goal(executor, node, client, goal)
            assert handle.accepted, "a goal was rejected by an idle executor"
            return goal_result(executor, handle)

        nan = math.nan
        bad = [
            (
                ExecutePlan.Goal(plan=plan_msg(grasp_q=(nan, 0.0, 0.0, nan)), dry_run=True),
                "step 0 (grasp) pose.orientation: [nan, 0, 0, nan] must be 4 finite numbers",
            ),
            (ExecutePlan.Goal(plan=plan_msg(grasp_q=(nan, 0.0, 0.0, nan))), "step 0 (grasp) pose.orientation"),
            (ExecutePlan.Goal(plan=plan_msg(grasp_q=(0.0, 0.0, 0.0, 2.0))), "is not a unit quaternion (norm 2)"),
            (
                ExecutePlan.Goal(plan=plan_msg(place_position=(0.45, math.inf, 0.0)), dry_run=True),
                "step 1 (place) pose.position",
            ),
            (ExecutePlan.Goal(plan=plan_msg(grasp_width=-0.01), dry_run=True), "step 0 (grasp) width: -0.01"),
            (
                ExecutePlan.Goal(plan=plan_msg(frame="camera_link"), dry_run=True),
                "step 0 (grasp) pose.header.frame_id: 'camera_link', expected 'base_link'",
            ),
        ]
        for goal, message in bad:
            outcome = run(goal)
            assert outcome.status == GoalStatus.STATUS_ABORTED, outcome.result.message
            assert outcome.result.message.startswith("invalid goal: ") and message in outcome.result.message, (
                outcome.result.message
            )
        # the node keeps serving: a sound goal is accepted and answered
        outcome = run(ExecutePlan.Goal(plan=plan_msg(), dry_run=True))
        assert outcome.status in (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_ABORTED)
        assert not outcome.result.message.startswith("invalid goal"), outcome.result.message
        # one execution/result per goal, the refused ones included, each with the reason
        spin_until(executor, lambda: len(results) >= len(bad) + 1, 30.0, "a result message for every goal")
        assert len(results) == len(bad) + 1
        for (_goal, message), published in zip(bad, results):
            assert published.success is False and message in published.message, published
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_two_goals_at_the_door_are_never_both_accepted(rclpy_context):
    # the busy check and taking the lock are one step: 16 goals arriving at the same moment, one accepted
    from rclpy.action import GoalResponse

    from grounded_planner_interfaces.action import ExecutePlan
    from grounded_planner.ros.executor_node import ExecutorNode
    from helpers.kinematic_arm import KinematicArm  # test double: the door's rule needs no robot

    node = ExecutorNode(context=rclpy_context, backend_factory=lambda name, config: KinematicArm())
    try:
        node.trigger_configure()
        node.trigger_activate()
        start = threading.Barrier(16)
        answers = []

        def knock():
            start.wait()
            answers.append(node._on_goal(ExecutePlan.Goal()))

        threads = [threading.Thread(target=knock) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10.0)
        assert answers.count(GoalResponse.ACCEPT) == 1 and answers.count(GoalResponse.REJECT) == 15, answers
    finally:
        node.destroy_node()


def _cancel_run(tmp_path, rclpy_context, ros_domain, owner_only: bool):
    """A goal sent by node goal_owner (the test's process) and cancelled by node operator_panel (another DDS
    participant, as another process is): the cancel's answer, the owner's result, the executor's output."""
    import rclpy
    from action_msgs.srv import CancelGoal
    from rclpy.action import ActionClient
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner_interfaces.action import ExecutePlan

    child = start_sim_executor(tmp_path, f"cancel_owner_only:={'true' if owner_only else 'false'}", realtime_factor=1.0)
    panel_context = Context()
    rclpy.init(context=panel_context, domain_id=ros_domain)
    owner = rclpy.create_node("goal_owner", context=rclpy_context)
    operator = rclpy.create_node("operator_panel", context=panel_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(owner)
        panel = SingleThreadedExecutor(context=panel_context)
        panel.add_node(operator)
        client = ActionClient(owner, ExecutePlan, EXECUTE_ACTION)
        ActionClient(operator, ExecutePlan, EXECUTE_ACTION)  # the panel holds an execute client too
        cancel = operator.create_client(CancelGoal, EXECUTE_ACTION + "/_action/cancel_goal")
        feedback = []
        handle = send_goal(executor, owner, client, ExecutePlan.Goal(plan=plan_msg()), feedback=feedback.append)
        assert handle.accepted
        spin_until(executor, lambda: feedback, 60.0, "the arm to start moving")
        assert cancel.wait_for_service(timeout_sec=30.0)
        reach(panel, operator, EXECUTE_ACTION + "/_action/cancel_goal", 30.0)
        asked = cancel.call_async(CancelGoal.Request())  # zero id and stamp: every goal, as an e-stop panel sends
        spin_until(panel, asked.done, 30.0, "the cancel answer")
        if owner_only:  # refused: the owner may still cancel its own goal
            own = handle.cancel_goal_async()
            spin_until(executor, own.done, 30.0, "the owner's cancel answer")
            assert len(own.result().goals_canceling) == 1
        result = goal_result(executor, handle, what="the cancelled goal's result")
    finally:
        owner.destroy_node()
        operator.destroy_node()
        rclpy.shutdown(context=panel_context)
        out = stop_process(child)
    return asked.result(), result, out


@needs_mujoco
def test_a_cancel_from_another_client_names_who_asked_and_the_owner_is_told(ros_domain, tmp_path, rclpy_context):
    """Issue 30.5: any client may cancel (stopping is the safe direction); every cancel is logged with who asked and
    whose goal it is, and the goal's owner reads it in its result."""
    from action_msgs.msg import GoalStatus

    answer, result, out = _cancel_run(tmp_path, rclpy_context, ros_domain, owner_only=False)
    assert len(answer.goals_canceling) == 1
    assert result.status == GoalStatus.STATUS_CANCELED
    message = result.result.message
    assert "'put the box in the bowl', sent by /goal_owner) requested by /operator_panel" in message, message
    logged = [line for line in out.splitlines() if "cancel of goal" in line]
    assert len(logged) == 1 and "requested by /operator_panel" in logged[0], out


@needs_mujoco
def test_cancel_owner_only_refuses_another_clients_cancel(ros_domain, tmp_path, rclpy_context):
    from action_msgs.msg import GoalStatus

    answer, result, out = _cancel_run(tmp_path, rclpy_context, ros_domain, owner_only=True)
    assert len(answer.goals_canceling) == 0, out[-3000:]  # the panel's cancel was refused
    assert "by /operator_panel refused: cancel_owner_only" in out, out
    assert result.status == GoalStatus.STATUS_CANCELED  # its owner's own cancel was taken
    assert "requested by /goal_owner" in result.result.message, result.result.message
