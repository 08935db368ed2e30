"""Every check and recovery branch of the closed loop (execution/closed_loop.py), each reached by a staged scenario:
a top-down camera (fx != fy, off-centre principal point, non-square image) over a flat table with one block, and
the KinematicArm test double (test/helpers/kinematic_arm.py), so each scenario stages exactly the evidence one
branch reads: a gripper that closes to a plausible width on nothing while the grasp box's depth does not change, a
gripper found empty before the release, an object seen 10 cm from the place point, a handle that barely moved...

The MuJoCo scenarios of test_closed_loop_sim.py run the same loop end to end; these are the branches they cannot
stage on demand."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from grounded_planner.execution.closed_loop import FAILURE_MODES, ClosedLoop, Observation
from grounded_planner.execution.config import ClosedLoopConfig, ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.geometry import CameraModel, Extrinsics
from grounded_planner.plan import GroundedAction, GroundedPlan
from helpers.kinematic_arm import KinematicArm, fault

W, H = 320, 200
CAMERA = CameraModel(
    W, H, [[300.0, 0.0, 170.0], [0.0, 280.0, 95.0], [0.0, 0.0, 1.0]], frame_id="camera_color_optical_frame"
)
# looking straight down from 0.8 m above the table: optical x -> base -y, optical y -> base -x, optical z -> base -z
CAM2BASE = Extrinsics.from_matrix(
    np.array([[0.0, -1.0, 0.0, 0.5], [-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.8], [0.0, 0.0, 0.0, 1.0]]),
    "base",
    "camera_color_optical_frame",
)
TABLE_DEPTH_M = 0.79  # the table top 1 cm above the workspace floor (z = 0): float32 depth cannot push it below
BLOCK_TOP_DEPTH_M = 0.74  # a 5 cm block
BLOCK_BOX = (140.0, 80.0, 180.0, 110.0)  # where the block lies at first (pixels)
PLACE_PX = (250.0, 150.0)
PLACE_BOX = (230.0, 135.0, 270.0, 165.0)  # the block put down on the place point
MISSED_BOX = (60.0, 135.0, 100.0, 165.0)  # the block put down 10 cm (and more) from it


def base_of(u: float, v: float, depth_m: float) -> np.ndarray:
    """The base-frame point a pixel of this camera sees at ``depth_m``, written out (not through CameraModel)."""
    x_opt, y_opt = (u - 170.0) / 300.0 * depth_m, (v - 95.0) / 280.0 * depth_m
    return np.array([0.5 - y_opt, -x_opt, 0.8 - depth_m])


def frame(block_box=BLOCK_BOX, block_depth_m=BLOCK_TOP_DEPTH_M) -> Observation:
    depth = np.full((H, W), TABLE_DEPTH_M, np.float32)
    if block_box is not None:
        x1, y1, x2, y2 = (int(v) for v in block_box)
        depth[y1:y2, x1:x2] = block_depth_m
    return Observation(np.zeros((H, W, 3), np.uint8), depth, CAMERA, CAM2BASE)


GRASP = GroundedAction("grasp", "block", bbox=BLOCK_BOX)
PLACE = GroundedAction("place", "block", "mat", point=PLACE_PX)


def plan(*actions) -> GroundedPlan:
    return GroundedPlan("put the block on the mat", (W, H), list(actions))


class Stage:
    """What the camera shows after each executor call, and what re-grounding and replanning answer."""

    def __init__(self, frames, locate=None, replans=()):
        self.frames = list(frames)
        self.locate_answers = locate if locate is not None else (lambda rgb, action: action)
        self.replans = list(replans)
        self.seen = 0

    def observe(self) -> Observation:
        self.seen += 1
        return self.frames.pop(0) if len(self.frames) > 1 else self.frames[0]

    def plan(self, rgb, instruction, done):
        self.done = list(done)
        answer = self.replans.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def locate(self, rgb, action):
        return self.locate_answers(rgb, action)


def loop(arm, stage, **closed_loop) -> ClosedLoop:
    arm.connect()
    config = ExecutorConfig(closed_loop=ClosedLoopConfig(**closed_loop))
    return ClosedLoop(Executor(arm, config), stage.observe, stage.plan, stage.locate)


def checks(result):
    return [(a.type, a.attempt, a.check, a.recovery) for a in result.attempts]


# ---- grasp check ---------------------------------------------------------------------------------------------
def test_a_grasp_that_closes_to_a_plausible_width_on_nothing_is_caught_by_the_unchanged_depth():
    """The fingers stop at 30 mm (a plausible width, as on a foam block the gripper squeezes and slips off), yet
    the depth in the grasp box is what it was before: the block never left. Width alone would pass it."""
    arm = KinematicArm(closed_width_m=0.03)
    stage = Stage([frame()])  # the block stays where it was, every frame
    result = loop(arm, stage, max_attempts_per_step=2, max_replans=0).run("x", plan(GRASP, PLACE), first=frame())
    assert checks(result) == [("grasp", 1, "grasp_failure", "reground"), ("grasp", 2, "grasp_failure", "replan")]
    assert "gripper at 30.0 mm, but only 0% of the grasp box changed depth" in result.attempts[0].message
    assert not result.success and result.failure_mode == "grasp_failure"
    assert "replan budget (0) is spent" in result.message


def test_a_grasp_whose_box_changed_on_too_few_pixels_fails_and_on_enough_passes():
    # the block moved by a third of the box's height: a fraction of its pixels changed depth
    moved = (BLOCK_BOX[0], BLOCK_BOX[1] + 10, BLOCK_BOX[2], BLOCK_BOX[3] + 10)
    arm = KinematicArm(closed_width_m=0.03)
    result = loop(arm, Stage([frame(moved)]), max_attempts_per_step=1, max_replans=0, grasp_changed_fraction=0.5).run(
        "x", plan(GRASP, PLACE), first=frame()
    )
    assert checks(result)[0][2] == "grasp_failure" and "only 33% of the grasp box" in result.attempts[0].message
    result = loop(
        KinematicArm(closed_width_m=0.03),
        Stage([frame(moved), frame(None)]),
        max_attempts_per_step=1,
        max_replans=0,
        grasp_changed_fraction=0.3,
    ).run("x", plan(GRASP), first=frame())
    assert result.success and "33% of the grasp box changed depth" in result.attempts[0].message


def test_the_depth_change_threshold_decides_what_changed():
    # the block's top seen 8 mm lower (it was pressed, not lifted): not a change at 10 mm, a change at 5 mm
    pressed = frame(BLOCK_BOX, BLOCK_TOP_DEPTH_M + 0.008)
    result = loop(
        KinematicArm(), Stage([pressed]), max_attempts_per_step=1, max_replans=0, grasp_depth_change_m=0.01
    ).run("x", plan(GRASP), first=frame())
    assert not result.success and result.attempts[0].check == "grasp_failure"
    result = loop(
        KinematicArm(), Stage([pressed]), max_attempts_per_step=1, max_replans=0, grasp_depth_change_m=0.005
    ).run("x", plan(GRASP), first=frame())
    assert result.success, result.message


def test_an_empty_gripper_after_the_lift_fails_by_width_before_depth_is_read():
    arm = KinematicArm(closed_width_m=0.03)
    stage = Stage([frame(None)])  # the block is gone from the table: depth alone would pass it

    def observe():
        arm.width = 0.002  # ...but the fingers closed on air by the time the lift ended
        return stage.observe()

    closed = loop(arm, stage, max_attempts_per_step=1, max_replans=0)
    closed.observe = observe
    result = closed.run("x", plan(GRASP), first=frame())
    assert result.attempts[0].check == "grasp_failure"
    assert "gripper at 2.0 mm after the lift: nothing held" in result.attempts[0].message


def test_a_grasp_box_with_no_valid_depth_afterwards_is_taken_as_held_and_said():
    result = loop(KinematicArm(), Stage([frame(BLOCK_BOX, 0.0)])).run("x", plan(GRASP), first=frame())
    assert result.success and "no valid depth in the grasp box to confirm" in result.attempts[0].message


def test_a_gripper_that_cannot_be_read_leaves_the_grasp_check_to_the_camera():
    class Unreadable(KinematicArm):
        def gripper_width(self):
            raise fault("double: gripper state unavailable")

    result = loop(Unreadable(), Stage([frame(None)])).run("x", plan(GRASP), first=frame())
    assert result.success and "unknown width; 100% of the grasp box changed depth" in result.attempts[0].message


# ---- place check ---------------------------------------------------------------------------------------------
def test_grasp_then_place_on_the_point_passes_both_checks():
    stage = Stage(
        [frame(None), frame(PLACE_BOX)], locate=lambda rgb, action: GroundedAction("grasp", "block", bbox=PLACE_BOX)
    )
    result = loop(KinematicArm(), stage).run("x", plan(GRASP, PLACE), first=frame())
    assert result.success, result.message
    assert checks(result) == [("grasp", 1, "ok", ""), ("place", 1, "ok", "")]
    # seen on the block's top 5 cm above the table, the centre of its box lies 17 mm from the place point on the table
    seen = np.hypot(*(base_of(250.0, 150.0, BLOCK_TOP_DEPTH_M) - base_of(*PLACE_PX, TABLE_DEPTH_M))[:2])
    reported_mm = float(result.attempts[1].message.split("block seen ")[1].split(" mm")[0])
    assert reported_mm == pytest.approx(seen * 1000, abs=1.0), result.attempts[1].message


def test_an_object_seen_away_from_the_place_point_is_an_incorrect_outcome_and_a_replan_not_a_retry():
    stage = Stage(
        [frame(None), frame(MISSED_BOX)],
        locate=lambda rgb, action: GroundedAction("grasp", "block", bbox=MISSED_BOX),
        replans=[plan()],
    )
    result = loop(KinematicArm(), stage, place_tolerance_m=0.06).run("x", plan(GRASP, PLACE), first=frame())
    assert checks(result) == [("grasp", 1, "ok", ""), ("place", 1, "incorrect_spatial_outcome", "replan")]
    missed = np.hypot(*(base_of(80, 150, BLOCK_TOP_DEPTH_M) - base_of(*PLACE_PX, TABLE_DEPTH_M))[:2])
    assert f"block seen {missed * 1000:.0f} mm from the place point (tolerance 60 mm)" in result.attempts[1].message
    assert stage.done == ["grasp block", "place block on mat (failed: incorrect_spatial_outcome)"]
    assert result.success and result.replans == 1 and "nothing left to do" in result.message
    # with a tolerance wider than the miss the same place passes
    stage = Stage(
        [frame(None), frame(MISSED_BOX)], locate=lambda rgb, action: GroundedAction("grasp", "block", bbox=MISSED_BOX)
    )
    result = loop(KinematicArm(), stage, place_tolerance_m=missed + 0.01).run("x", plan(GRASP, PLACE), first=frame())
    assert result.success and result.attempts[1].check == "ok"


class Slipping(KinematicArm):
    """The block slips out of the fingers during the carry: the gripper reads empty from the pre-place on."""

    def move_to_pose(self, position_xyz, yaw_rad, speed_scale):
        super().move_to_pose(position_xyz, yaw_rad, speed_scale)
        if len(self.calls) == 6:  # grasp: move, open, move, close, move; place: this pre_place
            self.width = 0.0


def test_an_object_lost_on_the_way_is_a_premature_release():
    stage = Stage([frame(None), frame(None)], replans=[plan()])
    result = loop(Slipping(closed_width_m=0.03), stage).run("x", plan(GRASP, PLACE), first=frame())
    assert checks(result)[0] == ("grasp", 1, "ok", "")
    assert checks(result)[1] == ("place", 1, "premature_release", "replan")
    assert "gripper at 0.0 mm before the release" in result.attempts[1].message


def test_an_object_not_found_after_the_place_and_one_found_without_depth_are_incorrect_outcomes():
    stage = Stage(
        [frame(None), frame(None)],
        locate=lambda rgb, action: None if action.type == "grasp" else action,
        replans=[plan()],
    )
    result = loop(KinematicArm(), stage).run("x", plan(GRASP, PLACE), first=frame())
    assert result.attempts[1].check == "incorrect_spatial_outcome" and "not found again" in result.attempts[1].message
    stage = Stage(
        [frame(None), frame(PLACE_BOX, 0.0)],
        locate=lambda rgb, action: GroundedAction("grasp", "block", bbox=PLACE_BOX),
        replans=[plan()],
    )
    stage.frames[1].depth_m[:] = 0.0  # the camera lost depth altogether
    result = loop(KinematicArm(), stage).run("x", plan(GRASP, PLACE), first=frame())
    assert "no depth where it was seen again" in result.attempts[1].message


def test_a_place_with_no_grasp_in_this_episode_only_checks_the_release():
    # a plan cannot start with a place (plan rules), but a replan's first step can be one: the check on its own
    closed = loop(KinematicArm(), Stage([frame(PLACE_BOX)]))
    target = type("T", (), {"position": base_of(*PLACE_PX, TABLE_DEPTH_M)})()
    verdict = closed.check_place(PLACE, target, None, 0.03, frame(PLACE_BOX))
    assert verdict.ok and "no grasp of this episode" in verdict.detail
    verdict = closed.check_place(PLACE, target, None, 0.001, frame(PLACE_BOX))
    assert verdict.verdict == "premature_release"


# ---- open/close check ----------------------------------------------------------------------------------------
HANDLE_BOX = (150.0, 60.0, 190.0, 70.0)


def handle_target(normal):
    return type("T", (), {"position": base_of(170.0, 65.0, TABLE_DEPTH_M), "normal": normal})()


def travel_mm(detail: str) -> float:
    return float(detail.split("handle moved ")[1].split(" mm")[0])


@pytest.mark.parametrize(
    "kind, shift_px, ok",
    [("open", 20, True), ("open", 4, False), ("close", -20, True), ("close", 20, False), ("open", -20, False)],
)
def test_a_handle_must_move_along_the_normal_by_the_minimum_travel(kind, shift_px, ok):
    # normal +x in the base frame = towards smaller v in this image; a handle pulled out moves up the image
    moved = (HANDLE_BOX[0], HANDLE_BOX[1] - shift_px, HANDLE_BOX[2], HANDLE_BOX[3] - shift_px)
    closed = loop(KinematicArm(), Stage([frame()]), handle_min_travel_m=0.03)
    closed.locate = lambda rgb, action: GroundedAction(kind, "drawer", bbox=moved)
    action = GroundedAction(kind, "drawer", bbox=HANDLE_BOX)
    verdict = closed.check_handle(action, handle_target((1.0, 0.0, 0.0)), frame(moved))
    travel = float(base_of(170.0, 65.0 - shift_px, TABLE_DEPTH_M)[0] - handle_target(None).position[0])
    assert verdict.ok is ok, verdict.detail
    assert np.sign(travel_mm(verdict.detail)) == np.sign(travel) and abs(travel_mm(verdict.detail)) > 0.5 * abs(
        travel * 1000
    )


def test_the_minimum_handle_travel_is_the_configured_one():
    moved = (HANDLE_BOX[0], HANDLE_BOX[1] - 20, HANDLE_BOX[2], HANDLE_BOX[3] - 20)
    action = GroundedAction("open", "drawer", bbox=HANDLE_BOX)
    verdicts = {}
    for travel_m in (0.03, 0.1):
        closed = loop(KinematicArm(), Stage([frame()]), handle_min_travel_m=travel_m)
        closed.locate = lambda rgb, action: GroundedAction("open", "drawer", bbox=moved)
        verdicts[travel_m] = closed.check_handle(action, handle_target((1.0, 0.0, 0.0)), frame(moved))
    assert verdicts[0.03].ok and not verdicts[0.1].ok and "(need +100 mm)" in verdicts[0.1].detail


def test_a_handle_with_no_normal_is_judged_towards_the_base_and_a_lost_handle_fails():
    moved = (HANDLE_BOX[0], HANDLE_BOX[1] + 15, HANDLE_BOX[2], HANDLE_BOX[3] + 15)  # towards the base (smaller x)
    closed = loop(KinematicArm(), Stage([frame()]))
    closed.locate = lambda rgb, action: GroundedAction("open", "drawer", bbox=moved)
    assert closed.check_handle(GroundedAction("open", "drawer", bbox=HANDLE_BOX), handle_target(None), frame(moved)).ok
    closed.locate = lambda rgb, action: None
    verdict = closed.check_handle(GroundedAction("open", "drawer", bbox=HANDLE_BOX), handle_target(None), frame())
    assert verdict.verdict == "incorrect_spatial_outcome" and "not found again" in verdict.detail


# ---- recovery and budgets ------------------------------------------------------------------------------------
def test_re_grounding_that_finds_nothing_goes_straight_to_a_replan():
    stage = Stage([frame()], locate=lambda rgb, action: None, replans=[plan()])
    result = loop(KinematicArm(), stage, max_attempts_per_step=3).run("x", plan(GRASP, PLACE), first=frame())
    assert checks(result) == [("grasp", 1, "grasp_failure", "replan")]
    assert "re-grounding found nothing" in result.attempts[0].message and result.replans == 1


def test_a_re_grounded_step_runs_on_the_fresh_frame():
    moved = (200.0, 40.0, 240.0, 70.0)  # the block was moved after the plan's frame: the first grasp closes on air
    stage = Stage([frame(moved), frame(None)], locate=lambda rgb, action: GroundedAction("grasp", "block", bbox=moved))

    class Missing(KinematicArm):
        def gripper_close(self, force_n=None, expected_width_m=None):
            self.closed_width_m = 0.0 if not any(c[0] == "close" for c in self.calls) else 0.03
            return super().gripper_close(force_n)

    arm = Missing()
    result = loop(arm, stage).run("x", plan(GRASP), first=frame())
    assert checks(result) == [("grasp", 1, "grasp_failure", "reground"), ("grasp", 2, "ok", "")]
    assert result.attempts[0].outcome == "grasp_failed"
    assert "gripper closed to 0.0 mm" in result.attempts[0].message  # the executor's own width check
    # the second descend went to the block where the fresh frame shows it, not where the plan saw it
    descends = [c[1] for c in arm.moves()][1::3]
    assert descends[1][:2] == pytest.approx(base_of(220.0, 55.0, BLOCK_TOP_DEPTH_M)[:2], abs=0.005)


def test_a_failing_replan_is_a_planner_error_and_an_empty_first_frame_is_refused():
    stage = Stage([frame()], locate=lambda rgb, action: None, replans=[ConnectionError("VLM server went away")])
    result = loop(KinematicArm(), stage).run("x", plan(GRASP), first=frame())
    assert not result.success and result.failure_mode == "planner_error"
    assert result.message == "replan failed: ConnectionError: VLM server went away"
    # no depth at all where the plan grasps: no 3D target, refused without a motion
    arm = KinematicArm()
    blank = frame(None)
    blank.depth_m[:] = 0.0
    result = loop(arm, Stage([blank], locate=lambda rgb, action: None), max_replans=0).run(
        "x", plan(GRASP), first=blank
    )
    assert result.attempts[0].check == "refused" and result.attempts[0].message.startswith("no 3D target")
    assert result.attempts[0].outcome == "outside_workspace"
    assert result.failure_mode == "refused" and arm.calls == []


@pytest.mark.parametrize("failure, outcome", [(fault(), "fault"), ("timeout", "timeout")])
def test_a_fault_or_a_timeout_stops_the_episode_without_a_retry(failure, outcome):
    arm = KinematicArm(move_duration_s=5.0) if failure == "timeout" else KinematicArm(fail_on={0: failure})
    stage = Stage([frame()])
    closed = loop(arm, stage)
    closed.executor.config.safety.motion_timeout_s = 0.2
    result = closed.run("x", plan(GRASP), first=frame())
    assert checks(result) == [("grasp", 1, outcome, "stop")]
    assert not result.success and result.failure_mode is None and outcome in result.message
    assert stage.seen == 0  # nothing observed, nothing retried


def test_cancel_and_the_time_budget_end_the_episode_before_the_next_try():
    cancel = threading.Event()
    cancel.set()
    arm = KinematicArm()
    result = loop(arm, Stage([frame()])).run("x", plan(GRASP), first=frame(), cancel=cancel)
    assert result.message == "cancelled" and result.attempts == [] and arm.calls == []
    arm = KinematicArm()
    result = loop(arm, Stage([frame()]), time_budget_s=1e-9).run("x", plan(GRASP), first=frame())
    assert result.message.startswith("time budget of 1e-09 s spent at step 0") and arm.calls == []


def test_the_loop_s_failure_modes_are_the_rollout_taxonomy_s():
    from grounded_planner.rollout.taxonomy import FAILURE_MODES as TAXONOMY

    assert set(FAILURE_MODES) <= set(TAXONOMY)


def test_the_retreated_hand_above_the_handle_is_not_taken_for_the_handle():
    # after an open the hand waits 30 cm above the pulled handle and covers most of its box in this top-down view:
    # read as the handle, it would be a handle that moved the wrong way
    moved = (HANDLE_BOX[0], HANDLE_BOX[1] - 20, HANDLE_BOX[2], HANDLE_BOX[3] - 20)
    after = frame(moved)
    after.depth_m[int(moved[1]) : int(moved[3]) - 3, int(moved[0]) : int(moved[2])] = 0.4  # the hand, z = 0.39 m
    closed = loop(KinematicArm(), Stage([after]), handle_min_travel_m=0.03)
    closed.locate = lambda rgb, action: GroundedAction("open", "drawer", bbox=moved)
    verdict = closed.check_handle(
        GroundedAction("open", "drawer", bbox=HANDLE_BOX), handle_target((1.0, 0.0, 0.0)), after
    )
    assert verdict.ok, verdict.detail
