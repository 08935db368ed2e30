"""The scenarios' success predicates (inside, on, drawer open/closed, beside) evaluated on a workcell's state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from grounded_planner.sim.scenario import PredicateSpec

# Spa-Bench's relational placement (its Table I): within 3 in of the reference, inside the +-45 degree sector.
RELATION_RADIUS_M = 0.0762
RELATION_HALF_ANGLE_DEG = 45.0
# exactly on the sector's edge or the radius counts as inside, whatever the last bit of the float arithmetic
_ANGLE_EPS_DEG = 1e-9
_DIST_EPS_M = 1e-9


def relation_holds(
    target_xy: Sequence[float],
    reference_xy: Sequence[float],
    direction_xy: Sequence[float],
    radius_m: float = RELATION_RADIUS_M,
    half_angle_deg: float = RELATION_HALF_ANGLE_DEG,
) -> tuple[bool, float, float]:
    """Whether a target centre lies beside a reference centre in a direction, in the table plane.

    True when the distance between the centres is at most ``radius_m`` and the angle between (target - reference)
    and ``direction_xy`` (a unit vector) is at most ``half_angle_deg``; both bounds inclusive. A target on the
    reference's centre has no direction and fails. Returns ``(holds, distance_m, angle_deg)``.
    """
    dx, dy = float(target_xy[0]) - float(reference_xy[0]), float(target_xy[1]) - float(reference_xy[1])
    dist = math.hypot(dx, dy)
    if dist == 0.0:
        return False, 0.0, 180.0
    ux, uy = float(direction_xy[0]), float(direction_xy[1])
    angle = abs(math.degrees(math.atan2(dx * uy - dy * ux, dx * ux + dy * uy)))
    return dist <= radius_m + _DIST_EPS_M and angle <= half_angle_deg + _ANGLE_EPS_DEG, dist, angle


@dataclass(frozen=True)
class PredicateResult:
    """One success predicate evaluated on the current state."""

    predicate: PredicateSpec
    ok: bool
    detail: str  # the measured quantity, for the rollout record

    def to_dict(self) -> dict:
        p = self.predicate
        return {"type": p.type, "object": p.object, "target": p.target, "ok": self.ok, "detail": self.detail}


def evaluate_predicate(cell, p: PredicateSpec) -> PredicateResult:
    """One success predicate on the workcell ``cell``'s current state (nothing held counts as 'placed')."""
    if p.type in ("drawer_open", "drawer_closed"):
        opening = cell.drawer_opening_m(p.object)
        ok = opening >= p.distance_m if p.type == "drawer_open" else opening <= p.distance_m
        return PredicateResult(p, ok, f"drawer out {opening * 1000:.0f} mm (threshold {p.distance_m * 1000:.0f} mm)")
    held = cell.held_body == f"obj:{p.object}"
    lo, hi = cell.body_aabb(f"obj:{p.object}")
    center = 0.5 * (lo + hi)
    if p.type == "beside":
        t_lo, t_hi = cell.body_aabb(f"obj:{p.target}")
        ok, dist, angle = relation_holds(
            center[:2], (0.5 * (t_lo + t_hi))[:2], p.direction_xy or (1.0, 0.0), p.distance_m
        )
        return PredicateResult(
            p,
            ok and not held,
            f"{dist * 1000:.0f} mm from {p.target} (at most "
            f"{p.distance_m * 1000:.1f}), {angle:.0f} deg off the direction "
            f"(at most {RELATION_HALF_ANGLE_DEG:.0f})" + ("; still held" if held else ""),
        )
    target = cell.scenario.object(p.target)
    t_pos, t_rot = cell.object_pose(p.target)
    local = t_rot.T @ (center - t_pos)
    t_lo, t_hi = cell.body_aabb(f"obj:{p.target}")
    if target.kind in ("box", "cabinet"):
        half = np.array(target.size_m[:2]) / 2
        horizontal_ok = bool(np.all(np.abs(local[:2]) <= half))
        horizontal = f"offset {np.round(local[:2] * 1000).astype(int).tolist()} mm (half size {np.round(half * 1000).astype(int).tolist()})"
    else:
        radius = target.size_m[0]
        dist = float(np.hypot(*local[:2]))
        horizontal_ok = dist <= radius - 0.01
        horizontal = f"{dist * 1000:.0f} mm from the centre (radius {radius * 1000:.0f} mm)"
    if p.type == "inside":
        vertical_ok = t_lo[2] - 0.005 <= lo[2] <= t_lo[2] + 0.03 and center[2] < t_hi[2] + 0.05
    else:  # on: resting on the top surface
        vertical_ok = t_hi[2] - 0.02 <= lo[2] <= t_hi[2] + 0.02
    ok = horizontal_ok and vertical_ok and not held
    detail = f"{horizontal}; bottom z {lo[2] * 1000:.0f} mm, target z {t_lo[2] * 1000:.0f}..{t_hi[2] * 1000:.0f} mm"
    return PredicateResult(p, ok, detail + ("; still held" if held else ""))
