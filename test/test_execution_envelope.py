"""The safety envelope on its edges: a target or waypoint exactly on the workspace boundary runs, one millimetre
outside is refused before anything moves; the floor (support surface + minimum height) the same; the config's own
bounds (fractions in (0, 1], offsets within +-0.1 m, unit quaternions, widths >= 0) on and just past their limits.

Workspaces here use binary fractions (0.25, 0.5, 0.125 ...) so that "exactly on the edge" is exact in floats.
KinematicArm (test/helpers/kinematic_arm.py) is the recording test double of test_execution_executor.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grounded_planner.execution.config import ConfigError, ExecutorConfig, SafetyConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.execution.motions import plan_primitive
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.execution.validate import (
    UNIT_QUATERNION_TOLERANCE,
    GoalPose,
    InvalidGoalError,
    check_poses,
    check_target,
)
from grounded_planner.plan import GroundedAction, GroundedPlan
from helpers.kinematic_arm import KinematicArm
from helpers.staged_plans import targets_of

MM = 1e-3
LO = (0.25, -0.5, 0.0)
HI = (0.75, 0.5, 0.5)


def safety(**changes) -> SafetyConfig:
    return SafetyConfig(**{"workspace_min_m": LO, "workspace_max_m": HI, "min_height_above_surface_m": 0.0, **changes})


def executor_config(**changes) -> ExecutorConfig:
    # approach 0.125 m and retreat 0.25 m above the target: a target at z = 0.25 lifts to exactly the 0.5 m ceiling
    return ExecutorConfig(
        safety=changes.pop("safety", safety()),
        approach_height_m=0.125,
        retreat_height_m=0.25,
        grasp_height_offset_m=0.0,
        place_clearance_m=0.0,
        **changes,
    )


class Target:
    def __init__(self, position, yaw=None, width=None, normal=None, confidence=1.0):
        self.position, self.yaw, self.width, self.normal, self.confidence = position, yaw, width, normal, confidence


def grasp_motions(position, config=None):
    return plan_primitive(
        GroundedAction("grasp", "cube", bbox=(1, 1, 2, 2)), Target(position), config or executor_config()
    )


# ---- SafetyConfig.violation --------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", range(3))
@pytest.mark.parametrize("side", ["min", "max"])
def test_a_point_exactly_on_each_face_is_inside_and_a_millimetre_past_it_is_not(axis, side):
    envelope = safety()
    on = [0.5, 0.0, 0.25]
    on[axis] = (LO if side == "min" else HI)[axis]
    assert envelope.violation(on) is None, (axis, side)
    out = list(on)
    out[axis] += -MM if side == "min" else MM
    problem = envelope.violation(out)
    assert problem is not None and problem.startswith(f"{'xyz'[axis]}={out[axis]:.3f} m is outside the workspace"), (
        problem
    )


def test_the_floor_is_the_support_surface_plus_the_minimum_height():
    envelope = safety(support_surface_z_m=0.125, min_height_above_surface_m=0.0625)
    assert envelope.floor_z_m == 0.1875
    assert envelope.violation([0.5, 0.0, 0.1875]) is None
    problem = envelope.violation([0.5, 0.0, 0.1875 - MM])
    assert problem is not None and "below the minimum height 0.188 m" in problem and "0.062 m above" in problem
    # with no minimum height the floor is the surface itself
    assert safety(support_surface_z_m=0.125).violation([0.5, 0.0, 0.125 - MM]) is not None
    assert safety(support_surface_z_m=0.125).violation([0.5, 0.0, 0.125]) is None


# ---- plan_primitive: targets and waypoints ----------------------------------------------------------------
@pytest.mark.parametrize("corner", [(0.75, 0.5), (0.25, -0.5), (0.75, -0.5), (0.25, 0.5)])
def test_a_grasp_target_on_a_workspace_corner_plans_and_one_millimetre_out_is_refused(corner):
    x, y = corner
    motions, notes = grasp_motions((x, y, 0.25))
    assert [m.label for m in motions if m.kind == "move"] == ["pre_grasp", "descend", "lift"]
    assert motions[-1].position_m[2] == 0.5  # the lift sits on the ceiling
    for dx, dy in ((MM * np.sign(x - 0.5), 0.0), (0.0, MM * np.sign(y))):
        with pytest.raises(Exception) as info:
            grasp_motions((x + dx, y + dy, 0.25))
        assert getattr(info.value, "outcome", None) is Outcome.OUTSIDE_WORKSPACE, info.value
        assert "grasp target" in str(info.value) and "nothing moved" in str(info.value)


def test_a_waypoint_one_millimetre_above_the_ceiling_is_refused_by_name():
    with pytest.raises(Exception) as info:
        grasp_motions((0.5, 0.0, 0.25 + MM))  # the target is inside; its lift is 1 mm above 0.5 m
    assert getattr(info.value, "outcome", None) is Outcome.OUTSIDE_WORKSPACE
    assert "waypoint lift" in str(info.value) and "z=0.501 m is outside the workspace [0.000, 0.500] m" in str(
        info.value
    )


def test_a_target_below_the_workspace_bottom_is_refused_even_when_the_floor_would_raise_it():
    config = executor_config(safety=safety(workspace_min_m=(0.25, -0.5, 0.125)))
    motions, _ = grasp_motions((0.5, 0.0, 0.125), config)
    assert motions[2].position_m[2] == 0.125
    with pytest.raises(Exception) as info:
        grasp_motions((0.5, 0.0, 0.125 - MM), config)
    assert getattr(info.value, "outcome", None) is Outcome.OUTSIDE_WORKSPACE and "z=0.124" in str(info.value)


def test_a_grasp_exactly_on_the_floor_is_not_raised_and_a_millimetre_below_is_raised_with_a_note():
    config = executor_config(safety=safety(min_height_above_surface_m=0.0625))
    motions, notes = grasp_motions((0.5, 0.0, 0.0625), config)
    assert motions[2].position_m[2] == 0.0625 and notes == []
    motions, notes = grasp_motions((0.5, 0.0, 0.0625 - MM), config)
    assert motions[2].position_m[2] == 0.0625
    assert notes == ["grasp height 0.061 m raised to the floor 0.062 m"]
    # the pre-grasp and the lift stay relative to the target, not to the floor
    assert motions[0].position_m[2] == pytest.approx(0.0615 + 0.125, abs=1e-12)


def test_place_release_height_is_raised_to_the_floor_of_a_raised_support_surface():
    config = executor_config(safety=safety(support_surface_z_m=0.125, min_height_above_surface_m=0.0))
    motions, notes = plan_primitive(
        GroundedAction("place", "cube", "plate", point=(1, 1)), Target((0.5, 0.0, 0.125 - MM)), config
    )
    assert motions[1].label == "descend" and motions[1].position_m[2] == 0.125
    assert notes and notes[0].startswith("release height")


# ---- the executor on the edge -------------------------------------------------------------------------------
def test_the_executor_runs_a_plan_on_the_edge_and_refuses_it_a_millimetre_out_without_moving():
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "cube", bbox=(1, 1, 20, 20)),
            GroundedAction("place", "cube", "plate", point=(10, 10)),
        ],
    )
    arm = KinematicArm()
    arm.connect()
    result = Executor(arm, executor_config()).execute(
        plan, targets_of(("grasp", (0.75, 0.5, 0.25)), ("place", (0.25, -0.5, 0.0)))
    )
    assert result.success, result.to_dict()
    assert max(c[1][2] for c in arm.moves()) == 0.5 and min(c[1][0] for c in arm.moves()) == 0.25
    arm = KinematicArm()
    arm.connect()
    result = Executor(arm, executor_config()).execute(
        plan, targets_of(("grasp", (0.75, 0.5, 0.25)), ("place", (0.25, -0.5 - MM, 0.0)))
    )
    assert [(s.index, s.outcome) for s in result.steps] == [(1, Outcome.OUTSIDE_WORKSPACE)]
    assert "y=-0.501 m" in result.steps[0].message and arm.calls == []


def test_the_abort_retreat_stops_at_the_ceiling():
    # the gripper closes on nothing with the arm 0.0625 m under the ceiling; the retreat (0.125 m) is capped there
    arm = KinematicArm(closed_width_m=0.0)
    arm.connect()
    config = executor_config(abort_retreat_height_m=0.125)
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1, 1, 20, 20))])
    result = Executor(arm, config).execute(plan, targets_of(("grasp", (0.5, 0.0, 0.25))))
    assert result.steps[0].outcome is Outcome.GRASP_FAILED
    assert arm.calls[-1][0] == "move" and arm.calls[-1][1][2] == pytest.approx(0.375)  # 0.25 + 0.125, under 0.5
    arm = KinematicArm(closed_width_m=0.0)
    arm.connect()
    result = Executor(arm, executor_config(abort_retreat_height_m=0.375)).execute(
        plan, targets_of(("grasp", (0.5, 0.0, 0.25)))
    )
    assert arm.calls[-1][1][2] == 0.5 and "retreated to z=0.500 m" in result.steps[0].message


@pytest.mark.parametrize("closed_mm, outcome", [(4.0, Outcome.OK), (3.9, Outcome.GRASP_FAILED)])
def test_a_gripper_closed_exactly_to_the_minimum_width_holds_something(closed_mm, outcome):
    arm = KinematicArm(closed_width_m=closed_mm * MM)
    arm.connect()
    plan = GroundedPlan("x", (640, 480), [GroundedAction("grasp", "cube", bbox=(1, 1, 20, 20))])
    result = Executor(arm, executor_config(min_grasp_width_m=0.004)).execute(
        plan, targets_of(("grasp", (0.5, 0.0, 0.125)))
    )
    assert result.steps[0].outcome is outcome, result.steps[0].message


def test_speeds_are_capped_by_the_envelope_and_kept_below_it():
    config = executor_config(safety=safety(max_velocity_scale=0.25), travel_speed_scale=0.5, fine_speed_scale=0.125)
    motions, _ = grasp_motions((0.5, 0.0, 0.125), config)
    assert [m.speed_scale for m in motions if m.kind == "move"] == [0.25, 0.125, 0.125]
    assert config.speed(0.25) == 0.25 and config.speed(1.0) == 0.25 and config.speed(0.0625) == 0.0625


# ---- the config's own bounds -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, ok",
    [
        ({"workspace_min_m": (0.25, -0.5, 0.5)}, False),  # min z == max z: an empty box
        ({"workspace_min_m": (0.25, -0.5, 0.5 - MM)}, True),
        ({"max_velocity_scale": 1.0}, True),
        ({"max_velocity_scale": 1.0 + 1e-9}, False),
        ({"max_velocity_scale": 0.0}, False),
        ({"max_acceleration_scale": 1.0}, True),
        ({"max_acceleration_scale": 0.0}, False),
        ({"min_height_above_surface_m": 0.0}, True),
        ({"min_height_above_surface_m": -MM}, False),
        ({"support_surface_z_m": math.nan}, False),
        ({"motion_timeout_s": 0.0}, False),
        ({"stop_timeout_s": 0.0}, False),
        ({"joint_limits_rad": {"shoulder": (-1.0, -1.0)}}, False),
        ({"joint_limits_rad": {"shoulder": (-1.0, -0.999)}}, True),
    ],
)
def test_safety_config_bounds(changes, ok):
    if ok:
        safety(**changes)
    else:
        with pytest.raises(ConfigError, match=next(iter(changes))):
            safety(**changes)


@pytest.mark.parametrize(
    "changes, ok",
    [
        ({"grasp_height_offset_m": 0.1}, True),
        ({"grasp_height_offset_m": -0.1}, True),
        ({"grasp_height_offset_m": 0.1 + MM}, False),
        ({"grasp_height_offset_m": -0.1 - MM}, False),
        ({"place_clearance_m": 0.0}, True),
        ({"place_clearance_m": -MM}, False),
        ({"approach_height_m": 0.0}, False),
        ({"min_grasp_width_m": 0.0}, False),
        ({"travel_speed_scale": 1.0}, True),
        ({"fine_speed_scale": 0.0}, False),
        ({"gripper_open_width_m": 0.0}, False),
        ({"grasp_force_n": 0.0}, False),
        ({"closed_loop": {"max_attempts_per_step": 0}}, False),
        ({"closed_loop": {"max_attempts_per_step": 1}}, True),
        ({"closed_loop": {"max_replans": 0}}, True),
        ({"closed_loop": {"max_replans": -1}}, False),
        ({"closed_loop": {"grasp_changed_fraction": 1.0}}, True),
        ({"closed_loop": {"grasp_changed_fraction": 0.0}}, False),
    ],
)
def test_executor_config_bounds(changes, ok):
    if ok:
        ExecutorConfig(**changes)
    else:
        key = next(iter(changes))
        key = next(iter(changes[key])) if isinstance(changes[key], dict) else key
        with pytest.raises(ConfigError, match=key):
            ExecutorConfig(**changes)


# ---- goal checks on their limits -----------------------------------------------------------------------------
def test_a_zero_width_is_unknown_not_refused_and_a_negative_one_is_refused():
    check_target(0, "grasp", Target((0.5, 0.0, 0.1), width=0.0))
    with pytest.raises(InvalidGoalError) as info:
        check_target(0, "grasp", Target((0.5, 0.0, 0.1), width=-1e-6))
    assert info.value.field == "width" and info.value.step == 0


def pose(q) -> GoalPose:
    return GoalPose(0, "grasp", "base", (0.5, 0.0, 0.1), q)


def test_quaternions_within_the_tolerance_pass_and_past_it_are_refused():
    assert UNIT_QUATERNION_TOLERANCE == 1e-3  # |q| within 1e-3 of 1; the numbers below are written for it
    check_poses([pose((0.0, 0.0, 0.7071, 0.7071))])  # hand-written: |q| = 0.99999
    check_poses([pose((0.0, 0.0, 0.0, 1.0009))])
    check_poses([pose((0.0, 0.0, 0.0, 0.9991))])
    for w in (1.002, 0.998, 1.0011):
        with pytest.raises(InvalidGoalError, match="not a unit quaternion") as info:
            check_poses([pose((0.0, 0.0, 0.0, w))])
        assert info.value.field == "pose.orientation"


def test_a_surface_point_may_sit_up_to_the_surface_tolerance_below_the_workspace_bottom():
    """Depth noise puts a place point on the table a millimetre or two below it; up to SURFACE_TOLERANCE_M (3 mm)
    under the workspace bottom such a point is still a target (its waypoints stay above the floor); past it, or
    for a point away from the support surface, the bottom is strict."""
    from grounded_planner.execution.motions import SURFACE_TOLERANCE_M

    assert SURFACE_TOLERANCE_M == 0.003
    config = ExecutorConfig(safety=SafetyConfig(workspace_min_m=(0.25, -0.45, 0.0), support_surface_z_m=0.0))
    place = GroundedAction("place", "cube", "table", point=(1, 1))
    planned, _ = plan_primitive(place, Target((0.5, 0.0, -0.003)), config)
    assert planned[1].label == "descend" and planned[1].position_m[2] == pytest.approx(
        -0.003 + config.place_clearance_m
    )
    with pytest.raises(Exception) as info:
        plan_primitive(place, Target((0.5, 0.0, -0.0031)), config)
    assert getattr(info.value, "outcome", None) is Outcome.OUTSIDE_WORKSPACE and "z=-0.003" in str(info.value)
    # a workspace bottom above the table: no tolerance for points that are not on the support surface
    raised = ExecutorConfig(safety=SafetyConfig(workspace_min_m=(0.25, -0.45, 0.1), support_surface_z_m=0.0))
    with pytest.raises(Exception) as info:
        plan_primitive(place, Target((0.5, 0.0, 0.099)), raised)
    assert getattr(info.value, "outcome", None) is Outcome.OUTSIDE_WORKSPACE
