"""Spa-Bench's success predicates (its Table I), pure functions of a trial's spec, the objects' initial and final
positions and whether a grasp was attempted, plus the one place that measures those positions in the simulator.

Conventions (the outside checks recompute these from ``trials.jsonl`` alone):
- positions are object centres (the middle of each object's bounding box), base frame, metres; "in the table plane"
  means x and y only;
- *in the bowl*: the object's centre lies within ``receptacle_radius_m`` (the bowl's rim radius) of the bowl's
  centre in the table plane, inclusive;
- *relational placement*: the target's centre lies within 76.2 mm (3 in) of the reference's centre in the table
  plane and the direction from the reference to the target is within +-45 degrees of ``direction_xy`` (the requested
  left/right/front/behind as seen from the camera, as a base-frame unit vector); both bounds inclusive;
- *counting*: exactly ``count`` objects (the receptacle aside) end in the bowl;
- *no intervention* (``expects_action`` false): no object's centre moved more than 2 cm (3D) and no grasp was
  attempted (``grasp_attempted`` null counts as none: the real arm's session asks the operator);
- the other tasks: the target ends in the bowl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from grounded_planner.sim.predicates import RELATION_HALF_ANGLE_DEG, RELATION_RADIUS_M, relation_holds
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.trial import TASKS, TrialSpec, check_name

NO_MOVE_M = 0.02  # Table I: no object moved more than 2 cm
_EPS_M = 1e-9  # a distance exactly on a bound counts as on it, whatever the last bit of the float arithmetic
IN_BOWL_TASKS = ("object_state", "relative_size", "referential_description", "ordinal_position")

Positions = Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class Verdict:
    """A predicate's answer and the measured quantity behind it (for reports and failure labels)."""

    success: bool
    detail: str


def in_bowl(obj_xyz: Sequence[float], bowl_xyz: Sequence[float], radius_m: float) -> bool:
    """Whether an object's centre lies within ``radius_m`` of the bowl's centre in the table plane (inclusive)."""
    return math.hypot(obj_xyz[0] - bowl_xyz[0], obj_xyz[1] - bowl_xyz[1]) <= radius_m + _EPS_M


def objects_in_bowl(spec: TrialSpec, positions: Positions) -> list[str]:
    """Ids of the objects (the receptacle aside) whose centre lies in the bowl, sorted."""
    bowl = _need(spec.receptacle, "receptacle")
    radius = _need(spec.receptacle_radius_m, "receptacle_radius_m")
    centre = _pos(positions, bowl, "positions")
    return sorted(k for k, xyz in positions.items() if k != bowl and in_bowl(xyz, centre, radius))


def moved_objects(initial: Positions, final: Positions, threshold_m: float = NO_MOVE_M) -> dict[str, float]:
    """Object id -> how far (m, 3D) its centre moved, for the objects that moved more than ``threshold_m``."""
    out = {}
    for key, start in initial.items():
        end = _pos(final, key, "final_positions")
        dist = math.dist(start, end)
        if dist > threshold_m + _EPS_M:
            out[key] = dist
    return out


def evaluate(
    task: str,
    spec: TrialSpec,
    expects_action: bool,
    initial: Positions,
    final: Positions | None,
    grasp_attempted: bool | None,
) -> Verdict:
    """Table I's verdict on one trial. ``final`` None (unknown on a real arm) raises :class:`SpaBenchError`."""
    check_name(task, TASKS, "task")
    if final is None:
        raise SpaBenchError("final_positions are unknown: the outcome needs an operator's label")
    if not expects_action:
        moved = moved_objects(initial, final)
        if grasp_attempted:
            return Verdict(False, "a grasp was attempted where no action was required")
        if moved:
            worst = max(moved, key=moved.get)  # type: ignore[arg-type]
            return Verdict(
                False,
                f"{len(moved)} object(s) moved more than {NO_MOVE_M * 100:.0f} cm "
                f"({worst}: {moved[worst] * 1000:.0f} mm)",
            )
        return Verdict(True, "nothing moved more than 2 cm and nothing was grasped")
    if task == "relational_placement":
        target, reference = _need(spec.target, "target"), _need(spec.reference, "reference")
        direction = _need(spec.direction_xy, "direction_xy")
        ok, dist, angle = relation_holds(
            _pos(final, target, "final_positions")[:2], _pos(final, reference, "final_positions")[:2], direction
        )
        return Verdict(
            ok,
            f"{target} {dist * 1000:.1f} mm from {reference} (at most {RELATION_RADIUS_M * 1000:.1f}), "
            f"{angle:.1f} deg off {spec.direction} (at most {RELATION_HALF_ANGLE_DEG:.0f})",
        )
    inside = objects_in_bowl(spec, final)
    if task == "counting":
        count = _need(spec.count, "count")
        return Verdict(
            len(inside) == count,
            f"{len(inside)} object(s) in the bowl (want exactly {count}): {', '.join(inside) or 'none'}",
        )
    target = _need(spec.target, "target")
    _pos(final, target, "final_positions")
    return Verdict(
        target in inside,
        f"{target} {'is' if target in inside else 'is not'} in the bowl; in it: {', '.join(inside) or 'nothing'}",
    )


def evaluate_record(record) -> Verdict:
    """:func:`evaluate` on a :class:`~grounded_planner.spabench.trial.TrialRecord`."""
    return evaluate(
        record.task,
        record.spec,
        record.expects_action,
        record.initial_positions,
        record.final_positions,
        record.grasp_attempted,
    )


def object_positions(workcell) -> dict[str, tuple[float, float, float]]:
    """Every scenario object's centre (the middle of its bounding box) in the simulator now, base frame, m."""
    out = {}
    for obj in workcell.scenario.objects:
        lo, hi = workcell.body_aabb(f"obj:{obj.id}")
        centre = 0.5 * (lo + hi)
        out[obj.id] = (float(centre[0]), float(centre[1]), float(centre[2]))
    return out


def _need(value, field: str):
    if value is None:
        raise SpaBenchError(f"spec.{field} is null, but this task's success rule needs it")
    return value


def _pos(positions: Positions, key: str, where: str) -> Sequence[float]:
    if key not in positions:
        raise SpaBenchError(f"{where}: no position for object {key!r} (have {', '.join(sorted(positions))})")
    return positions[key]
