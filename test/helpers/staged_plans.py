"""Plans and their 3D targets written out for executor tests, without a camera or back-projection: one builder
instead of the same lines in each executor test file."""

from __future__ import annotations

from grounded_planner.geometry.targets import TargetSet
from grounded_planner.plan import GroundedAction, GroundedPlan


def plan_of(*kinds: str) -> GroundedPlan:
    """A plan of the given action kinds on a cube (a place puts it on the plate), pixels of a 640x480 image."""
    actions = [
        GroundedAction("place", "cube", "plate", point=(10.0, 10.0))
        if kind == "place"
        else GroundedAction(kind, "cube", bbox=(1.0, 1.0, 20.0, 20.0))
        for kind in kinds
    ]
    return GroundedPlan("x", (640, 480), actions)


def targets_of(*specs: tuple) -> TargetSet:
    """One target per action in plan order, in frame ``base``: each spec is (type, position_m) or (type,
    position_m, fields over the defaults: yaw, width, normal, ...)."""
    targets = []
    for index, (kind, position, *extra) in enumerate(specs):
        target = {
            "index": index,
            "type": kind,
            "object": "cube",
            "position": list(position),
            "yaw": None,
            "width": None,
            "normal": None,
            "method": "test",
            "confidence": 1.0,
        }
        target.update(extra[0] if extra else {})
        targets.append(target)
    return TargetSet.from_dict({"frame": "base", "targets": targets, "warnings": []})
