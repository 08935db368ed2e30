"""Failure-mode taxonomy of real-robot rollouts and the automatic labels the executor can give."""

from __future__ import annotations

from typing import Any, Mapping

from grounded_planner.errors import InputError

# The primary taxonomy of real-robot spatial-grounding benchmarks (Spa-Bench, Table X), plus two causes
# that only a modular stack has: the safety layer refusing, and the planner failing. Order = menu order.
FAILURE_MODES: dict[str, str] = {
    "no_action": "no task-directed arm or gripper motion although movement was required",
    "wrong_object": "approached or manipulated an object outside the intended category, or another wrong target "
    "(also: moved in a trial where no action was required)",
    "wrong_instance": "right category, wrong instance (wrong state or referential relation)",
    "grasp_failure": "intended target selected, but no usable grasp established or kept before transport",
    "incorrect_spatial_outcome": "intended object manipulated, but the final count, direction, relation or "
    "placement is wrong",
    "premature_release": "released the object before the goal, or dropped it during transport",
    "refused": "the safety layer refused the plan (target outside the workspace or unreachable)",
    "planner_error": "the planner failed: server unreachable or an answer that stayed invalid",
}

# Executor step outcomes (execution layer contract) that decide the failure mode on their own.
_OUTCOME_TO_MODE = {
    "outside_workspace": "refused",
    "unreachable": "refused",
    "grasp_failed": "grasp_failure",
}


class FailureModeError(InputError):
    """A failure-mode name that is not in the taxonomy."""


def check_failure_mode(name: str | None) -> str | None:
    """Return ``name`` if it is a known failure mode (or None); raise :class:`FailureModeError` otherwise."""
    if name is None or name == "":
        return None
    if name not in FAILURE_MODES:
        raise FailureModeError(f"unknown failure mode {name!r} (expected one of {', '.join(FAILURE_MODES)})")
    return name


def auto_failure_mode(
    execution: Mapping[str, Any] | None,
    plan: Mapping[str, Any] | None,
    planner_error: str = "",
    expects_action: bool = True,
) -> tuple[bool | None, str | None]:
    """What the stack itself knows about an episode's outcome: ``(success or None, failure mode or None)``.

    - a planner error -> failure, ``planner_error``;
    - a step refused by the safety envelope -> failure, ``refused``; a failed grasp -> ``grasp_failure``;
    - an empty plan when action was required -> failure, ``no_action``; an empty plan in a trial where no
      action was required (the no-intervention condition) -> success;
    - otherwise success is for a person to judge (the executor cannot see where the object ended up):
      ``(None, None)``.
    """
    if planner_error:
        return False, "planner_error"
    steps = (execution or {}).get("steps") or []
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, Mapping):
            continue  # not a step (index, type, outcome): it tells nothing about how the episode ended
        mode = _OUTCOME_TO_MODE.get(str(step.get("outcome", "")))
        if mode:
            return False, mode
    if plan is not None and not plan.get("actions"):
        return (True, None) if not expects_action else (False, "no_action")
    return None, None
