"""Pure per-primitive motion planning: one grasp, place, open or close with its 3D target -> checked motions.

No robot and no state: :func:`plan_primitive` turns an action and its target into the Cartesian waypoints and
gripper commands that the executor's state machine (:mod:`grounded_planner.execution.executor`) checks against the
backend and runs; waypoints outside the safety envelope are refused here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.execution.validate import ExecutionInputError
from grounded_planner.geometry.transforms import fold_half_turn

UP = np.array([0.0, 0.0, 1.0])


@dataclass
class Motion:
    """One command of a primitive: a Cartesian move or a gripper action.

    ``position_m`` (3,) is the tool centre point in the base frame (moves only); ``yaw_rad`` is the backend
    yaw (closing axis about base z, 0 = along base y).
    """

    kind: str  # "move" | "open" | "close"
    label: str  # what the motion is for: pre_grasp, descend, close_gripper, lift, ...
    position_m: np.ndarray | None = None
    yaw_rad: float = 0.0
    speed_scale: float = 0.1
    width_m: float | None = None  # open: finger opening, m (None = fully)
    force_n: float | None = None  # close: gripping force, N
    expected_width_m: float | None = None  # close: width of the object to hold (the target's width), m; None: unknown
    check_grasp: bool = False  # close: the closed width must show that something is held

    def describe(self) -> str:
        if self.kind == "move":
            x, y, z = (float(v) for v in self.position_m)  # type: ignore[union-attr]
            return f"{self.label} ({x:.3f}, {y:.3f}, {z:.3f}) m yaw {math.degrees(self.yaw_rad):.0f} deg"
        if self.kind == "open":
            return f"{self.label} ({'full' if self.width_m is None else f'{self.width_m * 1000:.0f} mm'})"
        return f"{self.label} ({'default force' if self.force_n is None else f'{self.force_n:.0f} N'})"


class StepFailure(RunFailure):
    """A step ends with ``outcome`` and ``message`` (raised while its motions are planned or run)."""

    def __init__(self, outcome: Outcome, message: str):
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def _backend_yaw(target_yaw: float | None) -> float:
    """Target yaw (closing direction from base x, geometry.transforms' convention) -> the backends' yaw (closing
    axis from base y), folded to (-pi/2, pi/2]: a parallel gripper is symmetric under a half turn."""
    return 0.0 if target_yaw is None else fold_half_turn(float(target_yaw) - math.pi / 2)


def _unit_horizontal(vector: Any) -> np.ndarray | None:
    v = np.asarray(vector, dtype=float).reshape(3).copy()
    v[2] = 0.0
    n = float(np.linalg.norm(v))
    return None if n < 1e-6 else v / n


# A target point measured on the support surface (a place on the table) reads up to this far below it: depth noise
# and quantisation (1 mm on a D400). Such a target is still on the surface; the waypoints derived from it keep to the
# floor (min_height_above_surface_m) as every waypoint does.
SURFACE_TOLERANCE_M = 0.003


def box_violation(position: np.ndarray, safety: Any, z_tolerance_m: float = 0.0) -> str | None:
    """Why ``position`` lies outside the workspace box of ``safety`` (a SafetyConfig); None when inside.

    ``z_tolerance_m``: how far below the box's lower z a point still counts as inside (measured surface points).
    """
    for axis, v, lo, hi in zip("xyz", position, safety.workspace_min_m, safety.workspace_max_m):
        if axis == "z":
            lo -= z_tolerance_m
        if not lo <= v <= hi:
            return f"{axis}={v:.3f} m is outside the workspace [{lo:.3f}, {hi:.3f}] m"
    return None


# An opening narrower than what the fingers go round plus this (m) is too tight: a grasp of such an object, and the
# release of one held that wide, open fully instead
OPENING_MARGIN_M = 0.01


def plan_primitive(
    action: Any, target: Any, config: ExecutorConfig, held_yaw: float | None = None
) -> tuple[list[Motion], list[str]]:
    """The motions of one primitive and notes about adjustments (e.g. a height raised to the floor).

    Raises :class:`StepFailure` (``outside_workspace``) when a target or waypoint leaves the envelope.
    """
    cfg, safety = config, config.safety
    kind = str(action.type)
    position = np.asarray(target.position, dtype=float).reshape(3)
    if not np.all(np.isfinite(position)):
        raise StepFailure(Outcome.OUTSIDE_WORKSPACE, f"target position {position.tolist()} is not finite")
    # the target point lies on an object or surface: it must be inside the box; the floor applies to the
    # TCP waypoints derived from it (a grasp height below it is raised, with a note); a point measured on the support
    # surface may read a hair below it
    surface_point = abs(float(position[2]) - safety.support_surface_z_m) <= SURFACE_TOLERANCE_M
    problem = box_violation(position, safety, SURFACE_TOLERANCE_M if surface_point else 0.0)
    if problem:
        raise StepFailure(
            Outcome.OUTSIDE_WORKSPACE, f"{kind} target {fmt_position(position)}: {problem}; nothing moved"
        )
    notes: list[str] = []
    travel, fine = cfg.speed(cfg.travel_speed_scale), cfg.speed(cfg.fine_speed_scale)
    open_width = cfg.gripper_open_width_m

    def low(z: float, what: str) -> float:
        if z < safety.floor_z_m:
            notes.append(f"{what} height {z:.3f} m raised to the floor {safety.floor_z_m:.3f} m")
            return safety.floor_z_m
        return z

    def at(p: np.ndarray, dz: float) -> np.ndarray:
        return p + UP * dz

    if kind == "grasp":
        yaw = _backend_yaw(target.yaw)
        if target.width is not None and open_width is not None and target.width + OPENING_MARGIN_M > open_width:
            notes.append(
                f"object width {target.width * 1000:.0f} mm + 10 mm exceeds gripper_open_width_m; opening fully"
            )
            open_width = None
        grasp_z = low(float(position[2]) + cfg.grasp_height_offset_m, "grasp")
        grasp_p = np.array([position[0], position[1], grasp_z])
        motions = [
            Motion("move", "pre_grasp", at(position, cfg.approach_height_m), yaw, travel),
            Motion("open", "open_gripper", width_m=open_width),
            Motion("move", "descend", grasp_p, yaw, fine),
            Motion(
                "close",
                "close_gripper",
                force_n=cfg.grasp_force_n,
                check_grasp=True,
                expected_width_m=None if target.width is None else float(target.width),
            ),
            Motion("move", "lift", at(position, cfg.retreat_height_m), yaw, fine),
        ]
    elif kind == "place":
        yaw = held_yaw if held_yaw is not None else _backend_yaw(target.yaw)
        release_z = low(float(position[2]) + cfg.place_clearance_m, "release")
        motions = [
            Motion("move", "pre_place", at(position, cfg.approach_height_m), yaw, travel),
            Motion("move", "descend", np.array([position[0], position[1], release_z]), yaw, fine),
            Motion("open", "release", width_m=cfg.gripper_open_width_m),
            Motion("move", "retreat", at(position, cfg.retreat_height_m), yaw, fine),
        ]
    elif kind in ("open", "close"):
        raw = None if target.normal is None else np.asarray(target.normal, dtype=float).reshape(3)
        if raw is not None and np.linalg.norm(raw) > 1e-6 and abs(raw[2]) / np.linalg.norm(raw) >= math.sqrt(0.5):
            # a lid or hatch (surface facing up): pull straight up, grasp with the target's yaw
            if raw[2] < 0:
                raise StepFailure(
                    Outcome.UNREACHABLE,
                    f"{kind} target {fmt_position(position)}: its surface faces down; "
                    "a top-down gripper cannot pull it",
                )
            normal, yaw = UP.copy(), _backend_yaw(target.yaw)
        else:
            normal = None if raw is None else _unit_horizontal(raw)
            if normal is None:
                # no usable surface normal: assume the front faces the robot base (pull towards the base)
                normal = _unit_horizontal(-position)
                if normal is None:
                    raise StepFailure(
                        Outcome.UNREACHABLE,
                        f"{kind} target {fmt_position(position)} has no usable surface normal and sits above the base",
                    )
                notes.append("no surface normal: pulling towards the robot base")
            # the tool stays vertical (top-down contract): the fingers straddle the handle from above, closing
            # along the normal; the approach, the pull/push and the retreat run along the normal
            yaw = _backend_yaw(math.atan2(normal[1], normal[0]))
        handle_z = low(float(position[2]) + cfg.grasp_height_offset_m, "handle grasp")
        handle = np.array([position[0], position[1], handle_z])
        standoff = handle + normal * cfg.handle_approach_distance_m
        stroke = cfg.open_pull_distance_m if kind == "open" else -cfg.close_push_distance_m
        moved = handle + normal * stroke
        motions = [
            Motion("move", "pre_handle", at(standoff, cfg.approach_height_m), yaw, travel),
            Motion("move", "above_handle", at(handle, cfg.approach_height_m), yaw, fine),
            Motion("open", "open_gripper", width_m=cfg.gripper_open_width_m),
            Motion("move", "descend", handle, yaw, fine),
            Motion("close", "close_gripper", force_n=cfg.grasp_force_n, check_grasp=True),
            Motion("move", "pull" if kind == "open" else "push", moved, yaw, fine),
            Motion("open", "release", width_m=cfg.gripper_open_width_m),
            # straight up first: the open fingers still straddle the handle, and backing off sideways
            # dragged a pushed-shut drawer several cm back out in the simulator
            Motion("move", "retreat", at(moved, cfg.retreat_height_m), yaw, fine),
        ]
    else:
        raise ExecutionInputError(f"action {action!r}: unknown primitive type {kind!r}")
    for motion in motions:
        if motion.kind == "move":
            problem = safety.violation(motion.position_m)
            if problem:
                raise StepFailure(
                    Outcome.OUTSIDE_WORKSPACE,
                    f"{kind} waypoint {motion.label} {fmt_position(motion.position_m)}: {problem}; nothing moved",
                )
    return motions, notes


def fmt_position(position: Any) -> str:
    x, y, z = (float(v) for v in position)
    return f"({x:.3f}, {y:.3f}, {z:.3f}) m"
