"""The executor's remaining branches, each reached by a staged scenario on the KinematicArm test double
(test/helpers/kinematic_arm.py): a motion stopped by nobody, a backend error of no known kind, a robot whose state
cannot be read after a fault, an object wider than the configured opening, surfaces facing down or missing, a dry
run with a refused step, a cancel before the first command. test_execution_executor.py holds the main rules."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from grounded_planner.execution.backend import BackendError, MotionStoppedError
from grounded_planner.execution.config import ExecutorConfig, SafetyConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.plan import GroundedPlan
from helpers.kinematic_arm import KinematicArm, fault
from helpers.staged_plans import plan_of, targets_of


GRASP = ("grasp", (0.5, 0.1, 0.05))
PLACE = ("place", (0.5, -0.2, 0.02))


def connected(arm: KinematicArm) -> KinematicArm:
    arm.connect()
    return arm


def test_a_motion_stopped_by_nobody_is_a_fault_and_the_arm_is_stopped():
    arm = connected(KinematicArm(fail_on={2: MotionStoppedError("controller aborted the trajectory")}))
    result = Executor(arm).execute(plan_of("grasp"), targets_of(GRASP))
    step = result.steps[0]
    assert step.outcome is Outcome.FAULT
    assert "descend: motion stopped unexpectedly: controller aborted the trajectory" in step.message
    assert arm.stops and "rest of the plan not run" in step.message


def test_a_backend_error_of_no_known_kind_is_a_fault_naming_its_type():
    arm = connected(KinematicArm(fail_on={0: BackendError("socket closed")}))
    result = Executor(arm).execute(plan_of("grasp"), targets_of(GRASP))
    assert (
        result.steps[0].outcome is Outcome.FAULT and "pre_grasp: BackendError: socket closed" in result.steps[0].message
    )


def test_a_fault_report_says_when_the_robot_state_cannot_be_read():
    class Blind(KinematicArm):
        def current_pose(self):
            raise fault("double: state stream lost")

    result = Executor(connected(Blind(fail_on={0: fault()}))).execute(plan_of("grasp"), targets_of(GRASP))
    assert "state unknown: double: state stream lost" in result.steps[0].message


def test_the_state_note_after_a_fault_says_where_the_arm_and_gripper_are():
    arm = connected(KinematicArm(fail_on={2: fault()}))
    result = Executor(arm).execute(plan_of("grasp"), targets_of(GRASP))
    x, y, z = arm.position
    assert (
        f"arm still at ({x:.3f}, {y:.3f}, {z:.3f}) m, gripper at {arm.width * 1000:.1f} mm" in result.steps[0].message
    )


def test_an_object_wider_than_the_configured_opening_opens_fully_and_says_so():
    config = ExecutorConfig(gripper_open_width_m=0.05)
    arm = connected(KinematicArm())
    result = Executor(arm, config).execute(plan_of("grasp"), targets_of(("grasp", (0.5, 0.1, 0.05), {"width": 0.045})))
    assert (
        result.success
        and "object width 45 mm + 10 mm exceeds gripper_open_width_m; opening fully" in result.steps[0].message
    )
    assert arm.calls[1] == ("open", None)
    arm = connected(KinematicArm())
    Executor(arm, config).execute(plan_of("grasp"), targets_of(("grasp", (0.5, 0.1, 0.05), {"width": 0.035})))
    assert arm.calls[1] == ("open", 0.05)  # 35 + 10 mm fits the 50 mm opening


def test_a_handle_on_a_surface_facing_down_is_unreachable_before_any_motion():
    arm = connected(KinematicArm())
    result = Executor(arm).execute(plan_of("open"), targets_of(("open", (0.5, 0.0, 0.3), {"normal": [0.0, 0.0, -1.0]})))
    assert result.steps[0].outcome is Outcome.UNREACHABLE and "surface faces down" in result.steps[0].message
    assert arm.calls == []


def test_a_handle_without_a_normal_is_pulled_towards_the_base_and_one_above_the_base_is_refused():
    arm = connected(KinematicArm())
    result = Executor(arm).execute(plan_of("open"), targets_of(("open", (0.6, 0.0, 0.2))))
    assert result.success and "no surface normal: pulling towards the robot base" in result.steps[0].message
    pull = next(c for c in arm.calls if c[0] == "move" and c[1][0] < 0.6 - 0.1)
    assert pull[1] == pytest.approx(
        (0.6 - ExecutorConfig().open_pull_distance_m, 0.0, 0.2 + ExecutorConfig().grasp_height_offset_m)
    )
    # straight above the base there is no "towards the base"
    config = ExecutorConfig(safety=SafetyConfig(workspace_min_m=(-0.5, -0.5, 0.0)))
    result = Executor(connected(KinematicArm()), config).execute(plan_of("open"), targets_of(("open", (0.0, 0.0, 0.3))))
    assert result.steps[0].outcome is Outcome.UNREACHABLE and "sits above the base" in result.steps[0].message


def test_a_dry_run_lists_every_step_and_counts_the_refused_ones():
    result = Executor(None).execute(
        plan_of("grasp", "place"), targets_of(GRASP, ("place", (1.5, 0.0, 0.0))), dry_run=True
    )
    assert not result.success and result.message == "dry run: 1 of 2 steps would be refused"
    assert [s.outcome for s in result.steps] == [Outcome.OK, Outcome.OUTSIDE_WORKSPACE]
    assert (
        result.steps[0].message.startswith("would run 5 motions")
        and "reachability not checked offline]" in result.steps[0].message
    )


def test_a_real_run_refused_before_motion_reports_only_the_first_refused_step():
    arm = connected(KinematicArm())
    result = Executor(arm).execute(plan_of("grasp", "place"), targets_of(GRASP, ("place", (1.5, 0.0, 0.0))))
    assert [(s.index, s.outcome) for s in result.steps] == [(1, Outcome.OUTSIDE_WORKSPACE)]
    assert result.message.startswith("plan refused before any motion: place target") and arm.calls == []


def test_a_cancel_before_the_first_command_sends_nothing():
    cancel = threading.Event()
    cancel.set()
    arm = connected(KinematicArm())
    result = Executor(arm).execute(plan_of("grasp"), targets_of(GRASP), cancel=cancel)
    assert result.steps[0].outcome is Outcome.CANCELLED and result.steps[0].message.startswith(
        "cancelled before pre_grasp"
    )
    assert arm.calls == []


def test_an_empty_plan_and_bad_arguments():
    assert (
        Executor(None).execute(GroundedPlan("x", (640, 480), [], reason="done"), targets_of()).message
        == "empty plan: nothing to do"
    )
    with pytest.raises(ValueError, match="needs a backend unless dry_run"):
        Executor(None).execute(plan_of("grasp"), targets_of(GRASP))
    with pytest.raises(ValueError, match="held_yaw must be a finite angle"):
        Executor(connected(KinematicArm())).execute(plan_of("place"), targets_of(PLACE), held_yaw=math.nan)


def test_a_place_keeps_a_held_yaw_given_by_an_earlier_call():
    arm = connected(KinematicArm())
    Executor(arm).execute(plan_of("place"), targets_of(("place", (0.5, -0.2, 0.02), {"yaw": 0.0})), held_yaw=0.4)
    assert {c[2] for c in arm.moves()} == {0.4}
    assert np.isfinite(arm.position).all()


def test_a_release_at_the_configured_opening_never_squeezes_what_the_fingers_hold():
    # the SO-101 releases at 45 mm (its moving jaw, opened to 70 mm, swept into a block 34 mm away); an object it
    # grips wider than 35 mm was grasped with the jaws fully open and is let go with them fully open again
    config = ExecutorConfig(gripper_open_width_m=0.045)
    grasp = ("grasp", (0.5, 0.1, 0.05), {"width": 0.04})
    place = ("place", (0.5, -0.1, 0.0), {"object": "plate"})
    for held, release in ((0.03, 0.045), (0.04, None)):
        arm = connected(KinematicArm(closed_width_m=held))
        result = Executor(arm, config).execute(plan_of("grasp", "place"), targets_of(grasp, place))
        assert result.success, result.steps
        assert [c for c in arm.calls if c[0] == "open"][-1] == ("open", release), (held, arm.calls)
