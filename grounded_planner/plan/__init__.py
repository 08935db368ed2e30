"""The canonical grounded-plan data model (pixels of the original image), validation and JSON I/O."""

from grounded_planner.plan.errors import PlanError
from grounded_planner.plan.model import (
    ACTION_TYPES,
    BOX_TYPES,
    GroundedAction,
    GroundedPlan,
    iter_pairs,
    load_plan,
    save_plan,
    validate_action,
    validate_plan,
)
from grounded_planner.plan.targets import Target, TargetSet

__all__ = [
    "ACTION_TYPES",
    "BOX_TYPES",
    "GroundedAction",
    "GroundedPlan",
    "PlanError",
    "Target",
    "TargetSet",
    "iter_pairs",
    "load_plan",
    "save_plan",
    "validate_action",
    "validate_plan",
]
