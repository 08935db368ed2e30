"""Approval before motion through the ROS service, across processes: executor_node (require_approval) in one
child process on the simulator, `grounded-planner approve` in another; rejected and unanswered plans move nothing,
an approved one runs."""

import importlib.util
import subprocess
import sys
import time

import pytest

from conftest import REPO, requires_ros
from helpers.ros_wait import spin_until, stop_process
from helpers.sim_executor import start_sim_executor
from test_ros_executor_node import ActionClientSide, executor_child, sim_plan_msg  # noqa: F401 (a fixture)

pytestmark = [
    requires_ros,
    pytest.mark.ros,
    pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)"),
]


@pytest.fixture
def approving_executor(ros_domain, tmp_path):
    child = start_sim_executor(tmp_path, "require_approval:=true", "approval_timeout_s:=12.0")
    yield child
    out = stop_process(child)
    assert "Traceback" not in out, out


def approve_cli(*args: str, spin=None) -> subprocess.CompletedProcess:
    """`grounded-planner approve` in another process; ``spin``: an executor to keep spinning while it runs.

    The approved plan starts moving while the CLI is still shutting down. rclpy's ActionClient (Kilted) drops the
    feedback it takes after the goal's result (_remove_pending_result_request): a client that stops spinning
    during a goal and then asks for the result loses the feedback still queued."""
    command = [sys.executable, "-m", "grounded_planner.cli.main", "approve", *args, "--timeout", "20"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    end = time.monotonic() + 60
    while spin is not None and child.poll() is None and time.monotonic() < end:
        spin.spin_once(timeout_sec=0.05)
    out, err = child.communicate(timeout=max(1.0, end - time.monotonic()))
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def answer_when_held(*args: str, within_s: float = 30.0, spin=None) -> subprocess.CompletedProcess:
    """Call `grounded-planner approve` until the executor takes the answer (the goal reaches it asynchronously)."""
    end = time.monotonic() + within_s
    while True:
        done = approve_cli(*args, spin=spin)
        if done.returncode != 1 or time.monotonic() > end:
            return done
        time.sleep(0.2)


def test_rejected_and_unanswered_plans_move_nothing_an_approved_one_runs(approving_executor, rclpy_context):
    from action_msgs.msg import GoalStatus

    from rclpy.qos import DurabilityPolicy, QoSProfile
    from visualization_msgs.msg import MarkerArray

    from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

    _plan, msg = sim_plan_msg()
    side = ActionClientSide(rclpy_context)
    feedback, markers, republished = [], [], []
    side.node.create_subscription(
        MarkerArray,
        "/grounded_planner/plan_markers",
        markers.append,
        QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL),
    )
    # no planner runs here: any plan on last_plan would be the executor's (each one there opens a rollout)
    side.node.create_subscription(
        GroundedPlanMsg,
        "/grounded_planner/last_plan",
        republished.append,
        QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL),
    )

    # rejected from a terminal in another process
    handle = side.send(side.Goal(plan=msg), feedback=lambda f: feedback.append(f.feedback.state))
    assert handle.accepted
    rejected = answer_when_held("--reject", "wrong bowl")
    assert rejected.returncode == 0 and "rejected" in rejected.stdout, rejected.stdout + rejected.stderr
    outcome = side.result(handle)
    assert outcome.status == GoalStatus.STATUS_ABORTED and "not approved" in outcome.result.message
    assert outcome.result.steps_completed == 0 and list(outcome.result.step_outcomes) == []
    assert feedback == [], f"motions were started: {feedback}"
    spin_until(side.executor, lambda: bool(markers), 10.0, "the previewed plan's markers")
    assert len(markers[-1].markers) == 1 + 2 * len(msg.actions)  # DELETEALL, then a sphere and a label per step

    # nobody answers: rejected after approval_timeout_s, nothing moved
    t0 = time.monotonic()
    outcome = side.result(side.send(side.Goal(plan=msg), feedback=lambda f: feedback.append(f.feedback.state)))
    assert outcome.status == GoalStatus.STATUS_ABORTED and "no approval within 12 s" in outcome.result.message
    assert time.monotonic() - t0 >= 11.5 and feedback == []
    assert approve_cli().returncode == 1  # nothing is waiting any more

    # approved: the plan runs and the box ends in the bowl
    handle = side.send(side.Goal(plan=msg), feedback=lambda f: feedback.append(f.feedback.state))
    approved = answer_when_held(spin=side.executor)  # this client keeps taking feedback while the CLI runs
    assert approved.returncode == 0 and "approved" in approved.stdout
    outcome = side.result(handle)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.message
    assert "close_gripper" in feedback
    spin_until(side.executor, lambda: len(side.results) >= 3, 30.0, "three results on the result topic")
    results = side.results  # typed ExecutionResult messages
    assert ["not approved" in r.message for r in results] == [True, True, False]
    assert results[-1].scene_success_known and results[-1].scene_success
    # three plans held for approval, none published again as a new plan: the planner's one rollout per plan stands
    # (it did: the logger closed the planner's episode as aborted and recorded a second one without its frames)
    assert republished == [], f"the executor published {len(republished)} held plan(s) on last_plan"
    side.node.destroy_node()


@pytest.mark.usefixtures("executor_child")
def test_a_goal_that_asks_to_be_held_waits_for_approval_where_the_executor_requires_none(rclpy_context):
    """The console sends a preview ahead as such a goal: it must move nothing until approved, dry run or not (the
    executor here has require_approval off, its default)."""
    from action_msgs.msg import GoalStatus

    _plan, msg = sim_plan_msg()
    side = ActionClientSide(rclpy_context)
    feedback = []

    handle = side.send(
        side.Goal(plan=msg, dry_run=True, require_approval=True), feedback=lambda f: feedback.append(f.feedback.state)
    )
    assert handle.accepted
    rejected = answer_when_held("--reject", "not this one")
    assert rejected.returncode == 0 and "rejected" in rejected.stdout, rejected.stdout + rejected.stderr
    outcome = side.result(handle)
    assert outcome.status == GoalStatus.STATUS_ABORTED and "not approved" in outcome.result.message
    assert feedback == [], f"a held dry run went ahead: {feedback}"

    handle = side.send(side.Goal(plan=msg, require_approval=True), feedback=lambda f: feedback.append(f.feedback.state))
    approved = answer_when_held(spin=side.executor)
    assert approved.returncode == 0 and "approved" in approved.stdout
    outcome = side.result(handle)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.message
    assert "close_gripper" in feedback
    side.node.destroy_node()
