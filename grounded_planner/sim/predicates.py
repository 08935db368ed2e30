"""The scenarios' success predicates (inside, on, drawer open/closed) evaluated on a workcell's state."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grounded_planner.sim.scenario import PredicateSpec


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
