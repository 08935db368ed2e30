"""Executor rules (envelope, aborts, cancel, timeouts, dry run) against the KinematicArm test double.

KinematicArm (test/helpers/kinematic_arm.py) is a test double: it records every command the executor sends
and fails on demand, which no real arm or simulator lets a test do exactly. The same executor runs against
franky-sim in test_execution_franky.py.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from grounded_planner.execution.backend import UnreachableError
from grounded_planner.execution.config import ConfigError, ExecutorConfig, SafetyConfig
from grounded_planner.execution.executor import ExecutionInputError, Executor
from grounded_planner.execution.motions import StepFailure, plan_primitive
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.geometry.targets import Target
from grounded_planner.plan import GroundedAction
from helpers.kinematic_arm import KinematicArm, fault
from helpers.staged_plans import plan_of, targets_of

ROOT = Path(__file__).resolve().parents[1]


def config(**safety) -> ExecutorConfig:
    return ExecutorConfig(safety=SafetyConfig(**safety))


GRASP_IN = ("grasp", (0.5, 0.1, 0.04), {"yaw": 0.0, "width": 0.04})
PLACE_IN = ("place", (0.5, -0.2, 0.0))


def test_grasp_place_sends_the_primitive_motions_in_order():
    arm = KinematicArm()
    arm.connect()
    cfg = config()
    result = Executor(arm, cfg).execute(plan_of("grasp", "place"), targets_of(GRASP_IN, PLACE_IN))
    assert result.success, result.to_dict()
    kinds = [c[0] for c in arm.calls]
    assert kinds == ["move", "open", "move", "close", "move", "move", "move", "open", "move"]
    pre, descend, lift = arm.calls[0], arm.calls[2], arm.calls[4]
    assert pre[1] == pytest.approx((0.5, 0.1, 0.04 + cfg.approach_height_m))
    assert descend[1] == pytest.approx((0.5, 0.1, 0.04 + cfg.grasp_height_offset_m))
    assert lift[1] == pytest.approx((0.5, 0.1, 0.04 + cfg.retreat_height_m))
    release_height = arm.calls[6][1][2]
    assert release_height == pytest.approx(cfg.place_clearance_m)
    # every speed respects the envelope's cap
    assert all(c[3] <= cfg.safety.max_velocity_scale for c in arm.moves())
    assert result.to_dict() == {
        "success": True,
        "steps": [
            {"index": 0, "type": "grasp", "outcome": "ok", "message": result.steps[0].message},
            {"index": 1, "type": "place", "outcome": "ok", "message": result.steps[1].message},
        ],
    }


def test_target_outside_workspace_is_refused_and_nothing_is_sent():
    arm = KinematicArm()
    arm.connect()
    # the place (second step) is 1.2 m away: the whole plan is refused before the grasp moves
    plan, targets = plan_of("grasp", "place"), targets_of(GRASP_IN, ("place", (1.2, 0.0, 0.0)))
    result = Executor(arm, config()).execute(plan, targets)
    assert not result.success
    assert [s.outcome for s in result.steps] == [Outcome.OUTSIDE_WORKSPACE]
    assert result.steps[0].index == 1
    assert "x=1.200" in result.steps[0].message
    assert arm.calls == [] and arm.stops == []


def test_waypoint_above_the_workspace_is_refused():
    arm = KinematicArm()
    arm.connect()
    # the target is inside, but its pre-grasp (0.12 m higher) pokes through the 0.2 m ceiling
    result = Executor(arm, config(workspace_max_m=(0.8, 0.45, 0.2))).execute(
        plan_of("grasp"), targets_of(("grasp", (0.5, 0.0, 0.1)))
    )
    assert result.steps[0].outcome is Outcome.OUTSIDE_WORKSPACE
    assert "pre_grasp" in result.steps[0].message
    assert arm.calls == []


def test_unreachable_pose_is_reported_before_any_motion():
    arm = KinematicArm(unreachable_x_above=0.6)
    arm.connect()
    result = Executor(arm, config()).execute(
        plan_of("grasp", "place"), targets_of(GRASP_IN, ("place", (0.7, 0.0, 0.0)))
    )
    assert [s.outcome for s in result.steps] == [Outcome.UNREACHABLE]
    assert arm.calls == []


def test_backend_fault_mid_step_aborts_and_the_rest_is_not_run():
    # command 2 is the grasp's descend: the arm faults half-way through step 0 of a three-step plan
    arm = KinematicArm(fail_on={2: fault()})
    arm.connect()
    plan = plan_of("grasp", "place", "grasp")
    targets = targets_of(GRASP_IN, PLACE_IN, ("grasp", (0.6, 0.0, 0.04)))
    result = Executor(arm, config()).execute(plan, targets)
    assert not result.success
    assert [(s.index, s.outcome) for s in result.steps] == [(0, Outcome.FAULT)]
    assert "injected controller reflex" in result.steps[0].message
    assert "rest of the plan not run" in result.steps[0].message
    # nothing after the faulting command: no retreat, no further step; the arm was told to stop
    assert len(arm.calls) == 3
    assert arm.stops


def test_empty_gripper_is_grasp_failed_then_opens_and_rises():
    arm = KinematicArm(closed_width_m=0.001)
    arm.connect()
    cfg = config()
    result = Executor(arm, cfg).execute(plan_of("grasp", "place"), targets_of(GRASP_IN, PLACE_IN))
    assert [s.outcome for s in result.steps] == [Outcome.GRASP_FAILED]
    assert "1.0 mm" in result.steps[0].message
    # after the failed close: open the gripper, then rise straight up from where the arm is
    assert arm.calls[4][0] == "open"
    retreat = arm.calls[5]
    assert retreat[0] == "move" and retreat[1] == pytest.approx((0.5, 0.1, 0.03 + cfg.abort_retreat_height_m))
    assert len(arm.calls) == 6  # the place never ran


def test_unreachable_raised_by_the_backend_during_motion_aborts():
    arm = KinematicArm(fail_on={0: UnreachableError("planner found no path")})
    arm.connect()
    result = Executor(arm, config()).execute(plan_of("grasp"), targets_of(GRASP_IN))
    assert result.steps[0].outcome is Outcome.UNREACHABLE
    assert "no path" in result.steps[0].message


def test_motion_over_its_time_limit_is_stopped_with_timeout():
    arm = KinematicArm(move_duration_s=5.0)
    arm.connect()
    start = time.monotonic()
    result = Executor(arm, config(motion_timeout_s=0.3)).execute(plan_of("grasp"), targets_of(GRASP_IN))
    elapsed = time.monotonic() - start
    assert result.steps[0].outcome is Outcome.TIMEOUT
    assert arm.stops, "the arm must be told to stop"
    # 0.3 s for the move, 0.3 s for the abort retreat (held to the same limit), plus the stops
    assert elapsed < 0.3 + 0.3 + 2 * arm.stop_timeout_s + 0.3
    assert "retreat failed" in result.steps[0].message


def test_cancel_mid_plan_stops_within_the_bound():
    arm = KinematicArm(move_duration_s=2.0)
    arm.connect()
    cfg = config(stop_timeout_s=0.5)
    cancel = threading.Event()
    cancelled_at: list[float] = []

    def cancel_later() -> None:
        time.sleep(0.3)
        cancelled_at.append(time.monotonic())
        cancel.set()

    threading.Thread(target=cancel_later).start()
    result = Executor(arm, cfg).execute(plan_of("grasp", "place"), targets_of(GRASP_IN, PLACE_IN), cancel=cancel)
    returned = time.monotonic()
    assert [s.outcome for s in result.steps] == [Outcome.CANCELLED]
    assert returned - cancelled_at[0] < cfg.safety.stop_timeout_s
    # the message tells the state the arm was left in: where it stopped, the gripper untouched
    x, y, z = arm.position
    assert f"arm still at ({x:.3f}, {y:.3f}, {z:.3f}) m" in result.steps[0].message
    assert "gripper at 80.0 mm" in result.steps[0].message
    # the arm stopped part-way through the first move and nothing else was sent
    assert len(arm.calls) == 1
    assert arm.stops and arm.stops[0] - cancelled_at[0] < 0.1
    assert not np.allclose(arm.position, arm.calls[0][1])


def test_dry_run_checks_every_step_and_sends_nothing():
    arm = KinematicArm()
    plan = plan_of("grasp", "place", "grasp", "place")
    targets = targets_of(GRASP_IN, ("place", (0.5, 0.9, 0.0)), ("grasp", (0.6, 0.0, 0.05)), PLACE_IN)
    result = Executor(arm, config()).execute(plan, targets, dry_run=True)
    assert not result.success
    assert [s.outcome for s in result.steps] == [Outcome.OK, Outcome.OUTSIDE_WORKSPACE, Outcome.OK, Outcome.OK]
    assert "pre_grasp (0.500, 0.100, 0.160)" in result.steps[0].message
    assert "y=0.900" in result.steps[1].message
    assert arm.calls == []


def test_dry_run_needs_no_backend():
    result = Executor(None, config()).execute(plan_of("grasp", "place"), targets_of(GRASP_IN, PLACE_IN), dry_run=True)
    assert result.success and len(result.steps) == 2


def test_grasp_yaw_becomes_the_backend_closing_axis():
    # geometry yaw pi/2: close along base y, which is backend yaw 0; geometry yaw 0 (along x) is backend +-pi/2
    for target_yaw, expected in ((math.pi / 2, 0.0), (0.0, math.pi / 2), (math.pi / 4, -math.pi / 4)):
        arm = KinematicArm()
        arm.connect()
        Executor(arm, config()).execute(plan_of("grasp"), targets_of(("grasp", (0.5, 0.0, 0.04), {"yaw": target_yaw})))
        assert arm.calls[0][2] == pytest.approx(expected)


def test_place_keeps_the_yaw_of_the_grasp():
    arm = KinematicArm()
    arm.connect()
    Executor(arm, config()).execute(
        plan_of("grasp", "place"),
        targets_of(("grasp", (0.5, 0.1, 0.04), {"yaw": 0.3}), ("place", (0.5, -0.2, 0.0), {"yaw": 1.2})),
    )
    yaws = {round(c[2], 6) for c in arm.moves()}
    assert yaws == {round(0.3 - math.pi / 2, 6)}


def test_a_place_run_on_its_own_keeps_the_yaw_it_is_told_the_object_is_held_at():
    # the closed loop runs one step per call: its place keeps the yaw the earlier call's grasp closed at
    arm = KinematicArm()
    arm.connect()
    executor = Executor(arm, config())
    grasp = executor.execute(plan_of("grasp"), targets_of(("grasp", (0.5, 0.1, 0.04), {"yaw": 0.3})))
    held = grasp.steps[0].motions[0].yaw_rad
    arm.calls.clear()
    executor.execute(plan_of("place"), targets_of(("place", (0.5, -0.2, 0.0), {"yaw": 1.2})), held_yaw=held)
    assert {round(c[2], 6) for c in arm.moves()} == {round(0.3 - math.pi / 2, 6)}
    arm.calls.clear()
    executor.execute(plan_of("place"), targets_of(("place", (0.5, -0.2, 0.0), {"yaw": 1.2})))
    assert {round(c[2], 6) for c in arm.moves()} == {round(1.2 - math.pi / 2, 6)}  # nothing held: its own yaw
    with pytest.raises(ValueError, match="held_yaw"):
        executor.execute(plan_of("place"), targets_of(PLACE_IN), held_yaw=float("nan"))


def test_open_pulls_along_the_surface_normal():
    arm = KinematicArm()
    arm.connect()
    cfg = config()
    normal = np.array([-1.0, 0.0, 0.0])  # drawer front faces the robot
    handle = np.array([0.6, 0.0, 0.2])
    Executor(arm, cfg).execute(plan_of("open"), targets_of(("open", handle, {"normal": normal.tolist()})))
    labels = [c for c in arm.calls]
    close_at = next(i for i, c in enumerate(labels) if c[0] == "close")
    grasp_point = np.array(labels[close_at - 1][1])
    pulled_to = np.array(labels[close_at + 1][1])
    np.testing.assert_allclose(pulled_to - grasp_point, normal * cfg.open_pull_distance_m, atol=1e-9)
    # fingers close along the normal (base x): backend yaw +-pi/2
    assert abs(abs(labels[close_at - 1][2]) - math.pi / 2) < 1e-9


def test_open_on_an_upward_facing_surface_pulls_up():
    arm = KinematicArm()
    arm.connect()
    cfg = config()
    Executor(arm, cfg).execute(
        plan_of("open"), targets_of(("open", (0.5, 0.0, 0.1), {"normal": [0.0, 0.1, 1.0], "yaw": math.pi / 2}))
    )
    close_at = next(i for i, c in enumerate(arm.calls) if c[0] == "close")
    moved = np.array(arm.calls[close_at + 1][1]) - np.array(arm.calls[close_at - 1][1])
    np.testing.assert_allclose(moved, [0.0, 0.0, cfg.open_pull_distance_m], atol=1e-9)
    assert arm.calls[close_at - 1][2] == pytest.approx(0.0)  # the target's yaw, not the normal's


def test_close_pushes_against_the_normal():
    arm = KinematicArm()
    arm.connect()
    cfg = config()
    Executor(arm, cfg).execute(plan_of("close"), targets_of(("close", (0.5, 0.0, 0.2), {"normal": [-1.0, 0.0, 0.0]})))
    close_at = next(i for i, c in enumerate(arm.calls) if c[0] == "close")
    moved = np.array(arm.calls[close_at + 1][1]) - np.array(arm.calls[close_at - 1][1])
    np.testing.assert_allclose(moved, [cfg.close_push_distance_m, 0.0, 0.0], atol=1e-9)


def test_grasp_height_below_the_floor_is_raised_and_said():
    arm = KinematicArm()
    arm.connect()
    result = Executor(arm, config(min_height_above_surface_m=0.02)).execute(
        plan_of("grasp"), targets_of(("grasp", (0.5, 0.0, 0.015)))
    )
    assert result.success
    assert arm.calls[2][1][2] == pytest.approx(0.02)
    assert "raised to the floor" in result.steps[0].message


def test_plan_and_targets_that_do_not_match_are_input_errors():
    arm = KinematicArm()
    arm.connect()
    ex = Executor(arm, config())
    with pytest.raises(ExecutionInputError, match="action 1 .place. has no target"):
        ex.execute(plan_of("grasp", "place"), targets_of(GRASP_IN))
    with pytest.raises(ExecutionInputError, match="is a grasp but its target is a place"):
        ex.execute(plan_of("grasp"), targets_of(PLACE_IN))
    assert arm.calls == []


def test_targets_in_the_camera_frame_are_refused():
    arm = KinematicArm()
    arm.connect()
    targets = targets_of(GRASP_IN)
    targets.frame = "camera_color_optical_frame"
    with pytest.raises(ExecutionInputError, match="camera frame .*--extrinsics"):
        Executor(arm, config()).execute(plan_of("grasp"), targets, dry_run=True)
    assert arm.calls == []


def test_an_unexpected_error_stops_the_arm_before_it_propagates():
    arm = KinematicArm(fail_on={2: ZeroDivisionError("driver bug")})
    arm.connect()
    with pytest.raises(ZeroDivisionError):
        Executor(arm, config()).execute(plan_of("grasp"), targets_of(GRASP_IN))
    assert arm.stops and len(arm.calls) == 3


def test_one_real_run_at_a_time():
    arm = KinematicArm(move_duration_s=0.5)
    arm.connect()
    executor = Executor(arm, config())
    first = threading.Thread(target=executor.execute, args=(plan_of("grasp"), targets_of(GRASP_IN)))
    first.start()
    time.sleep(0.1)
    with pytest.raises(RuntimeError, match="already running"):
        executor.execute(plan_of("grasp"), targets_of(GRASP_IN))
    # a dry run does not touch the robot and is allowed alongside
    assert executor.execute(plan_of("grasp"), targets_of(GRASP_IN), dry_run=True).success
    assert first.is_alive()
    first.join()


def test_running_on_a_disconnected_backend_is_refused():
    from grounded_planner.execution.backend import NotConnectedError

    with pytest.raises(NotConnectedError, match="not connected"):
        Executor(KinematicArm(), config()).execute(plan_of("grasp"), targets_of(GRASP_IN))


def test_feedback_reports_each_motion_and_the_outcome():
    arm = KinematicArm()
    arm.connect()
    seen = []
    Executor(arm, config()).execute(
        plan_of("grasp"),
        targets_of(GRASP_IN),
        on_feedback=lambda i, state, action: seen.append((i, state, action.type)),
    )
    assert [s for _, s, _ in seen] == ["pre_grasp", "open_gripper", "descend", "close_gripper", "lift", "ok"]


# -- configuration ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["execution_franka.yaml", "execution_so101.yaml"])
def test_shipped_configs_load(name):
    cfg = ExecutorConfig.load(ROOT / "config" / name)
    assert cfg.safety.violation(np.array(cfg.safety.workspace_min_m) + 0.02) is None


@pytest.mark.parametrize(
    "data, match",
    [
        ({"safety": {"workspace_min_m": [0.5, 0, 0], "workspace_max_m": [0.4, 1, 1]}}, "workspace_min_m.x"),
        ({"safety": {"max_velocity_scale": 1.5}}, "max_velocity_scale must be in"),
        ({"executor": {"approach_hieght_m": 0.1}}, "unknown key.*approach_hieght_m"),
        ({"executor": {"backend": "ur5"}}, "backend must be one of"),
        ({"backends": {"ur5": {}}}, "unknown backend"),
        ({"safty": {}}, "unknown section"),
    ],
)
def test_bad_config_names_the_field(data, match):
    with pytest.raises(ConfigError, match=match):
        ExecutorConfig.from_dict(data)


def test_bad_backend_option_names_the_key():
    from grounded_planner.execution.backends import make_backend

    cfg = ExecutorConfig.from_dict({"backends": {"franky": {"hostnme": "x"}}})
    with pytest.raises(ConfigError, match="backends.franky: unknown key.*hostnme"):
        make_backend("franky", cfg)


def test_a_cancel_landing_just_before_a_command_still_stops_it():
    """The stop arrives between the executor's cancel check and the backend's command (a race a real arm can hit):
    the double clears stop requests when a command starts, like the real backends do."""
    arm = KinematicArm(move_duration_s=3.0)
    arm.connect()
    cancel = threading.Event()
    original = arm.move_to_pose

    def cancel_then_move(*args, **kwargs):
        if not cancel.is_set():
            cancel.set()
            time.sleep(0.05)  # the watcher's stop() lands now, before the command clears the request
        return original(*args, **kwargs)

    arm.move_to_pose = cancel_then_move  # type: ignore[method-assign]
    start = time.monotonic()
    result = Executor(arm, config(stop_timeout_s=0.5)).execute(plan_of("grasp"), targets_of(GRASP_IN), cancel=cancel)
    assert [s.outcome for s in result.steps] == [Outcome.CANCELLED]
    assert time.monotonic() - start < 1.0  # not the full 3 s move
    assert len(arm.calls) == 1


def test_a_place_on_the_table_measured_a_hair_below_it_is_accepted_a_deeper_one_refused():
    """Depth puts a point on the support surface up to a few mm below it (noise, 1 mm quantisation): a place on the
    table must not be refused for that, while a target clearly under the surface still is."""
    config = ExecutorConfig()
    place = GroundedAction("place", target="the table", point=(10.0, 10.0))

    def target(z: float) -> Target:
        return Target(
            1, "place", "the table", np.array([0.45, 0.0, z]), None, None, np.array([0.0, 0.0, 1.0]), "depth", 1.0
        )

    motions, _ = plan_primitive(place, target(-0.0004), config)
    release = next(m for m in motions if m.label == "descend")
    assert release.position_m[2] >= config.safety.floor_z_m  # still released above the floor
    with pytest.raises(StepFailure, match="z=-0.010 m is outside the workspace"):
        plan_primitive(place, target(-0.01), config)
