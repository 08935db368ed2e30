"""The plan layer's error: names the action index and the broken rule."""

from __future__ import annotations

from grounded_planner.errors import InputError


class PlanError(InputError):
    """A plan or action that breaks the plan model's rules.

    Attributes
    ----------
    index : int or None
        Index of the offending action in ``plan.actions``, or None for plan-level problems.
    rule : str
        Short machine-readable name of the broken rule (``grasp_then_place``, ``bbox_order``, ...).
    """

    def __init__(self, message: str, *, index: int | None = None, rule: str = "invalid"):
        self.index = index
        self.rule = rule
        where = f"action {index}: " if index is not None else ""
        super().__init__(f"{where}{message} [rule: {rule}]")
