"""PlannerStatus, ExecutionEvent and ExecutionResult messages <-> plain data, for rclpy and rosbags alike.

Building takes ``types`` as :mod:`grounded_planner.msgs.plan` does (a typestore's ``types`` or a callable);
reading returns the plain dicts the rollout log stores (the same keys the executor's ``to_dict()`` gives).
"""

from __future__ import annotations

from typing import Any, Mapping

from grounded_planner.msgs.plan import TypeSource, action_from_msg, action_to_msg, header_msg, resolver
from grounded_planner.plan import GroundedAction

PLANNER_STATUS_MSGTYPE = "grounded_planner_interfaces/msg/PlannerStatus"
EXECUTION_EVENT_MSGTYPE = "grounded_planner_interfaces/msg/ExecutionEvent"
EXECUTION_RESULT_MSGTYPE = "grounded_planner_interfaces/msg/ExecutionResult"
STEP_OUTCOME_MSGTYPE = "grounded_planner_interfaces/msg/StepOutcome"


def _value(outcome: Any) -> str:
    return str(getattr(outcome, "value", outcome))


# -- planner status ---------------------------------------------------------------------------------------------
def planner_status_msg(
    types: TypeSource,
    instruction: str,
    success: bool,
    message: str = "",
    num_actions: int = 0,
    backprojected: bool = False,
    duration_s: float = 0.0,
    stamp_ns: int = 0,
) -> Any:
    """One answered plan request."""
    return resolver(types)(PLANNER_STATUS_MSGTYPE)(
        header=header_msg(types, stamp_ns),
        instruction=str(instruction),
        success=bool(success),
        message=str(message),
        num_actions=int(num_actions),
        backprojected=bool(backprojected),
        duration_s=float(duration_s),
    )


def planner_status_from_msg(msg: Any) -> dict[str, Any]:
    return {
        "instruction": str(msg.instruction),
        "success": bool(msg.success),
        "message": str(msg.message),
        "num_actions": int(msg.num_actions),
        "backprojected": bool(msg.backprojected),
        "duration_s": round(float(msg.duration_s), 6),
    }


# -- executor events ---------------------------------------------------------------------------------------------
def execution_event_msg(
    types: TypeSource, step: int, state: str, action: GroundedAction | None = None, message: str = "", stamp_ns: int = 0
) -> Any:
    """One executor event: a step entering a state (a motion label, ``ok``, a failure outcome)."""
    get = resolver(types)
    has_action = action is not None
    if action is None:
        action = GroundedAction("grasp")  # the message needs a value; has_action says it means nothing
    return get(EXECUTION_EVENT_MSGTYPE)(
        header=header_msg(types, stamp_ns),
        step=int(step),
        state=str(state),
        has_action=has_action,
        action=action_to_msg(action, types, stamp_ns),
        message=str(message),
    )


def execution_event_from_msg(msg: Any) -> dict[str, Any]:
    """``{step, state, message[, action]}`` with the action as a plan-model dict."""
    out: dict[str, Any] = {"step": int(msg.step), "state": str(msg.state), "message": str(msg.message)}
    if msg.has_action:
        out["action"] = action_from_msg(msg.action, int(msg.step)).to_dict()
    return out


# -- execution result -------------------------------------------------------------------------------------------
def _getter(source: Any):
    """``get(key, default)`` over a dict or an object's attributes (a dataclass the executor returns)."""
    if isinstance(source, Mapping):
        return lambda key, default=None: source.get(key, default)
    return lambda key, default=None: getattr(source, key, default)


def step_outcome_msg(types: TypeSource, step: Any) -> Any:
    """A StepOutcome from an executor ``StepOutcome`` (or a dict of the same keys: index, type, outcome, message,
    duration_s, attempts, check)."""
    get = _getter(step)
    return resolver(types)(STEP_OUTCOME_MSGTYPE)(
        index=int(get("index", 0)),
        type=str(get("type", "")),
        outcome=_value(get("outcome", "")),
        message=str(get("message", "")),
        duration_s=float(get("duration_s", 0.0) or 0.0),
        attempts=int(get("attempts", 1) or 1),
        check=str(get("check", "") or ""),
    )


def attempt_outcome_msg(types: TypeSource, attempt: Any) -> Any:
    """A StepOutcome for one closed-loop try: a ``closed_loop.Attempt`` (or its dict), whose ``step`` is the
    message's ``index`` and whose ``attempt`` (1 = the first try) is its ``attempts``."""
    get = _getter(attempt)
    fields = {key: get(key) for key in ("type", "outcome", "message", "duration_s", "check")}
    return step_outcome_msg(
        types,
        {
            "index": get("step", 0),
            "attempts": get("attempt", 1),
            **{key: value for key, value in fields.items() if value is not None},
        },
    )


def execution_result_msg(
    types: TypeSource,
    result: Any,
    instruction: str = "",
    dry_run: bool = False,
    scene_success: bool | None = None,
    condition: str = "open_loop",
    replans: int = 0,
    stamp_ns: int = 0,
) -> Any:
    """How one execute goal ended, from the executor's ``ExecutionResult`` (``success``, ``message``, ``steps``)."""
    return resolver(types)(EXECUTION_RESULT_MSGTYPE)(
        header=header_msg(types, stamp_ns),
        instruction=str(instruction),
        success=bool(result.success),
        message=str(result.message),
        dry_run=bool(dry_run),
        steps=[step_outcome_msg(types, s) for s in result.steps],
        scene_success_known=scene_success is not None,
        scene_success=bool(scene_success),
        condition=str(condition),
        replans=int(replans),
    )


def execution_result_from_msg(msg: Any) -> dict[str, Any]:
    """The dict the rollout log keeps: success, message, dry_run, steps, condition, replans[, scene_success]."""
    out: dict[str, Any] = {
        "success": bool(msg.success),
        "message": str(msg.message),
        "dry_run": bool(msg.dry_run),
        "steps": [
            {
                "index": int(s.index),
                "type": str(s.type),
                "outcome": str(s.outcome),
                "message": str(s.message),
                "duration_s": round(float(s.duration_s), 6),
                "attempts": int(s.attempts),
                "check": str(s.check),
            }
            for s in msg.steps
        ],
        "condition": str(msg.condition),
        "replans": int(msg.replans),
    }
    if msg.scene_success_known:
        out["scene_success"] = bool(msg.scene_success)
    if str(msg.instruction):
        out["instruction"] = str(msg.instruction)
    return out
