"""Every key of the executor profile (config/execution_*.yaml: executor, safety, closed_loop sections) at a value other
than its default changes the motions planned, or what is refused, the way its comment in execution/config.py says;
a key the executor ignored would leave the motions as they were. Loaded through ExecutorConfig.from_dict, as
`grounded-planner execute --config FILE` and the executor node load the YAML."""

from __future__ import annotations

import dataclasses

import pytest

from grounded_planner.execution.config import ClosedLoopConfig, ExecutorConfig, SafetyConfig
from grounded_planner.execution.motions import plan_primitive
from grounded_planner.plan import GroundedAction

GRASP = GroundedAction("grasp", "cube", bbox=(1, 1, 2, 2))
PLACE = GroundedAction("place", "cube", "plate", point=(1, 1))
OPEN = GroundedAction("open", "drawer", bbox=(1, 1, 2, 2))
CLOSE = GroundedAction("close", "drawer", bbox=(1, 1, 2, 2))


class Target:
    def __init__(self, position=(0.5, 0.0, 0.125), yaw=None, width=None, normal=None):
        self.position, self.yaw, self.width, self.normal = position, yaw, width, normal


def motions(config: ExecutorConfig, action=GRASP, target=None) -> dict:
    planned, _ = plan_primitive(action, target or Target(), config)
    return {m.label: m for m in planned}


def profile(**executor) -> ExecutorConfig:
    return ExecutorConfig.from_dict({"executor": executor})


DEFAULT = ExecutorConfig()


@pytest.mark.parametrize(
    "key, value, action, label, read",
    [
        ("approach_height_m", 0.2, GRASP, "pre_grasp", lambda m: m.position_m[2]),
        ("retreat_height_m", 0.25, GRASP, "lift", lambda m: m.position_m[2]),
        ("grasp_height_offset_m", -0.03, GRASP, "descend", lambda m: m.position_m[2]),
        ("place_clearance_m", 0.06, PLACE, "descend", lambda m: m.position_m[2]),
        ("travel_speed_scale", 0.2, GRASP, "pre_grasp", lambda m: m.speed_scale),
        ("fine_speed_scale", 0.05, GRASP, "descend", lambda m: m.speed_scale),
        ("gripper_open_width_m", 0.07, GRASP, "open_gripper", lambda m: m.width_m),
        ("gripper_open_width_m", 0.07, PLACE, "release", lambda m: m.width_m),
        ("grasp_force_n", 40.0, GRASP, "close_gripper", lambda m: m.force_n),
        ("handle_approach_distance_m", 0.12, OPEN, "pre_handle", lambda m: m.position_m[0]),
        ("open_pull_distance_m", 0.2, OPEN, "pull", lambda m: m.position_m[0]),
        ("close_push_distance_m", 0.05, CLOSE, "push", lambda m: m.position_m[0]),
    ],
)
def test_each_motion_key_changes_its_motion(key, value, action, label, read):
    assert getattr(DEFAULT, key) != value
    target = Target(normal=(-1.0, 0.0, 0.0)) if action.type in ("open", "close") else Target()
    before = read(motions(DEFAULT, action, target)[label])
    after = read(motions(profile(**{key: value}), action, target)[label])
    assert after != before, key
    base = (0.5, 0.0, 0.125)
    expected = {  # what the key's comment promises, worked out for the target at (0.5, 0, 0.125), normal -x
        "approach_height_m": base[2] + 0.2,
        "retreat_height_m": base[2] + 0.25,
        "grasp_height_offset_m": base[2] - 0.03,
        "place_clearance_m": base[2] + 0.06,
        "travel_speed_scale": 0.2,
        "fine_speed_scale": 0.05,
        "gripper_open_width_m": 0.07,
        "grasp_force_n": 40.0,
        "handle_approach_distance_m": 0.5 - 0.12,
        "open_pull_distance_m": 0.5 - 0.2,
        "close_push_distance_m": 0.5 + 0.05,
    }[key]
    assert after == pytest.approx(expected, abs=1e-12), key


def test_min_grasp_width_and_abort_retreat_are_read_from_the_profile():
    config = profile(min_grasp_width_m=0.01, abort_retreat_height_m=0.05, backend="lerobot")
    assert (config.min_grasp_width_m, config.abort_retreat_height_m, config.backend) == (0.01, 0.05, "lerobot")


@pytest.mark.parametrize(
    "key, value",
    [
        ("workspace_max_m", [0.8, 0.45, 0.2]),
        ("workspace_min_m", [0.55, -0.45, 0.0]),
        ("max_velocity_scale", 0.05),
        ("support_surface_z_m", 0.2),
        ("min_height_above_surface_m", 0.2),
    ],
)
def test_each_safety_key_changes_what_is_refused_or_capped(key, value):
    config = ExecutorConfig.from_dict({"safety": {key: value}})
    default_motions = motions(DEFAULT)
    if key == "max_velocity_scale":
        assert {m.speed_scale for m in motions(config).values() if m.kind == "move"} == {0.05}
        return
    if key in ("support_surface_z_m", "min_height_above_surface_m"):
        floor = {"support_surface_z_m": 0.2 + 0.01, "min_height_above_surface_m": 0.0 + 0.2}[
            key
        ]  # + the other's default
        planned, notes = plan_primitive(GRASP, Target(), config)
        assert planned[2].position_m[2] == pytest.approx(floor, abs=1e-12) != default_motions["descend"].position_m[2]
        assert notes and f"raised to the floor {floor:.3f} m" in notes[0]
        return
    with pytest.raises(Exception) as info:
        motions(config)
    assert getattr(info.value, "outcome", None) is not None and info.value.outcome.value == "outside_workspace"


def test_every_key_of_the_shipped_profiles_is_covered_here():
    """A new profile key must get a test above (or in test_execution_closed_loop.py for closed_loop keys)."""
    covered = {
        "approach_height_m",
        "retreat_height_m",
        "grasp_height_offset_m",
        "place_clearance_m",
        "travel_speed_scale",
        "fine_speed_scale",
        "gripper_open_width_m",
        "grasp_force_n",
        "handle_approach_distance_m",
        "open_pull_distance_m",
        "close_push_distance_m",
        "min_grasp_width_m",
        "abort_retreat_height_m",
        "backend",
        "safety",
        "backends",
        "closed_loop",
    }
    covered_safety = {
        "workspace_max_m",
        "workspace_min_m",
        "max_velocity_scale",
        "support_surface_z_m",
        "min_height_above_surface_m",
        # checked elsewhere: joint limits by the SO-101 IK tests, timeouts by test_execution_executor
        "joint_limits_rad",
        "motion_timeout_s",
        "stop_timeout_s",
        "max_acceleration_scale",
    }
    # test_execution_closed_loop.py sets each of these off its default and sees the verdict change
    covered_closed_loop = {
        "max_attempts_per_step",
        "max_replans",
        "time_budget_s",
        "grasp_depth_change_m",
        "grasp_changed_fraction",
        "place_tolerance_m",
        "handle_min_travel_m",
    }
    assert {f.name for f in dataclasses.fields(ExecutorConfig)} == covered
    assert {f.name for f in dataclasses.fields(SafetyConfig)} == covered_safety
    assert {f.name for f in dataclasses.fields(ClosedLoopConfig)} == covered_closed_loop
