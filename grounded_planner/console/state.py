"""The console's shared state: one current plan and its one decision, the executor's progress, the episode waiting for
its label. Every browser sees the same snapshot; every change is pushed to all of them."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from grounded_planner.console.graph import PlanAnswer
from grounded_planner.errors import InputError

# executor event states that end a step (the executor's step outcomes); any other state is a motion of the step
OK = "ok"
CANCELLED = "cancelled"  # the step outcome of a cancelled goal (execution.outcomes.Outcome.CANCELLED)
AWAITING_APPROVAL = "awaiting_approval"  # the event executor_node publishes while it holds a goal for approval
GONE = "gone"  # the executor's state in the console while its node is not on the graph (it stopped, or died)
LOG_LINES = 30


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def as_shown(result: dict[str, Any]) -> str:
    """An execution result's message as the page shows it. The message that ends a plan at a step, ``step I (type):
    outcome`` (the executor's; the closed loop's adds ``: why``), names the step by its ``index``, counted from 0 as
    the rollout's records count them; the page's plan table and its running line count from 1. That message becomes
    ``step I+1 (type): outcome``, with what stopped the step after it (the executor's step message, in brackets).
    Any other message (a success, a spent time or replan budget) is shown as it came."""
    message = str(result.get("message", ""))
    steps = result.get("steps") or []
    if not steps:
        return message
    last = steps[-1]  # execution_result_from_msg's step dict: index, type, outcome, message

    def named(number: int) -> str:
        return f"step {number} ({last['type']}): {last['outcome']}"

    head, said = named(last["index"]), named(last["index"] + 1)
    if message.startswith(head + ": "):  # the closed loop's, which says why itself
        return said + message[len(head) :]
    if message != head:
        return message
    return f"{said} ({last['message']})" if last.get("message") else said


def how_it_ended(result: dict[str, Any]) -> tuple[str, str]:
    """An execution result's outcome as the page names it (``succeeded``, ``failed``, or ``stopped`` where a step was
    cancelled) and its message as the page shows it (``as_shown``)."""
    shown = as_shown(result)
    outcome = "succeeded" if result.get("success") else "failed"
    if any(s.get("outcome") == CANCELLED for s in result.get("steps") or []) or "cancelled" in shown:
        outcome = "stopped"
    return outcome, shown


class DecisionError(InputError):
    """A decision the console refuses: the plan is not the current one, or it was already decided."""


class PlanRequests:
    """The plan requests the planner is answering now: any client's (from the plan service's introspection events)
    and the console's own. The live view leaves the CPUs to the planner while there are any. A request with no answer
    after ``lost_after_s`` is taken as lost (a planner that died mid-request). ``listener(busy)`` is called, from
    the thread that noticed, each time the planner becomes busy or idle. Thread-safe."""

    def __init__(self, lost_after_s: float, listener: Callable[[bool], None] | None = None):
        self.lost_after_s = lost_after_s
        self.listener = listener
        self._lock = threading.Lock()
        self._open: dict[Any, float] = {}  # request key -> when it started (time.monotonic())
        self._busy = False

    def started(self, key: Any) -> None:
        with self._lock:
            self._open[key] = time.monotonic()
        self._update()

    def answered(self, key: Any) -> None:
        with self._lock:
            self._open.pop(key, None)
        self._update()

    def busy(self) -> bool:
        return self._update()

    def _update(self) -> bool:
        with self._lock:
            lost = time.monotonic() - self.lost_after_s
            for key in [k for k, t in self._open.items() if t < lost]:
                del self._open[key]
            busy, flipped = bool(self._open), bool(self._open) != self._busy
            self._busy = busy
        if flipped and self.listener is not None:
            self.listener(busy)
        return busy


def why_not_runnable(plan: dict[str, Any]) -> str:
    """Why a previewed plan (ConsoleState.plan) cannot be approved, or '' when it can: it failed, it has no step, or
    the safety envelope refuses a step."""
    if not plan["success"] or not (plan["plan"] or {}).get("actions"):
        return f"plan {plan['id']} has nothing to run ({plan['message'] or 'empty plan'})"
    if plan["refused_steps"]:
        return (
            f"plan {plan['id']}: the safety envelope refuses step(s) "
            f"{', '.join(str(i + 1) for i in plan['refused_steps'])} (counted from 1, as the page's table counts them); "
            "the executor would move nothing"
        )
    return ""


class ConsoleState:
    """Thread-safe; ``listener()`` is called (from whichever thread changed the state) after every change."""

    def __init__(self, listener: Callable[[], None] | None = None):
        self._lock = threading.RLock()
        self._listener = listener
        self.version = 0
        self._next_plan_id = 1
        self.planner: dict[str, Any] | None = None  # the last planner status (any client's request)
        self.executor: dict[str, Any] = {"state": "idle", "step": None, "motion": "", "message": ""}
        self.plan: dict[str, Any] | None = None  # the current plan (the console's last preview)
        self.episode: dict[str, Any] | None = None  # the last closed rollout, waiting for (or holding) its label
        self.tally: list[dict[str, Any]] = []
        self.session: dict[str, Any] | None = None  # an evaluation session's progress and next card
        self.log: list[str] = []
        # the executor's robot backend (its `backend` parameter; "" until read): "sim" can set its scene back
        self.executor_backend = ""

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        self._listener = listener

    def _changed(self) -> None:
        self.version += 1
        listener = self._listener
        if listener is not None:
            listener()

    def note(self, line: str) -> None:
        with self._lock:
            self._note(line)
            self._changed()

    def _note(self, line: str) -> None:
        """(under the lock) A line for the pages' log."""
        self.log = (self.log + [f"{time.strftime('%H:%M:%S')} {line}"])[-LOG_LINES:]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": self.version,
                "planner": self.planner,
                "executor": dict(self.executor),
                "plan": None if self.plan is None else {**self.plan, "progress": dict(self.plan["progress"])},
                "episode": self.episode,
                "tally": self.tally,
                "session": self.session,
                "executor_backend": self.executor_backend,
                "log": list(self.log),
            }

    def on_executor_backend(self, backend: str) -> None:
        """The executor's robot backend, read from its parameters (the pages offer a scene reset on ``sim`` only)."""
        with self._lock:
            if self.executor["state"] == GONE:
                return  # a read that answered as its executor left: the one that comes back is read again
            if backend != self.executor_backend:
                self.executor_backend = backend
                self._changed()

    # -- the plan and its one decision --------------------------------------------------------------------
    def new_plan(self, instruction: str, answer: PlanAnswer, requested_by: str) -> dict[str, Any]:
        with self._lock:
            plan_id = self._next_plan_id
            self._next_plan_id += 1
            refused = [s.index for s in answer.steps if s.verdict and s.verdict != OK]
            self.plan = {
                "id": plan_id,
                "instruction": instruction,
                "success": answer.success,
                "message": answer.message,
                "plan": answer.plan,
                "steps": [s.to_dict() for s in answer.steps],
                "refused_steps": refused,
                "duration_s": round(answer.duration_s, 4),
                "requested_by": requested_by,
                "decision": None,
                "decided_by": None,
                "decided_at": None,
                "progress": {},
                "result": None,
                "error": "",
            }
            self._changed()
            return self.plan

    def decide(self, plan_id: int, approved: bool, client: str) -> dict[str, Any]:
        """Record the one decision on plan ``plan_id``; DecisionError (with the reason shown to that browser) for a
        plan that is not the current one, has nothing to run, or was decided already."""
        with self._lock:
            plan = self.plan
            if plan is None or plan["id"] != plan_id:
                raise DecisionError(
                    f"plan {plan_id} is not the current plan"
                    f"{'' if plan is None else ' (that is plan ' + str(plan['id']) + ')'}"
                )
            if plan["decision"] is not None:
                raise DecisionError(
                    f"plan {plan_id} was already {plan['decision']} by {plan['decided_by']} at "
                    f"{plan['decided_at']}: one plan gets one decision"
                )
            refusal = why_not_runnable(plan) if approved else ""
            if refusal:
                raise DecisionError(refusal)
            plan["decision"] = "approved" if approved else "rejected"
            plan["decided_by"], plan["decided_at"] = client, _now_iso()
            self._changed()
            return plan

    def plan_error(self, plan_id: int, message: str) -> None:
        with self._lock:
            if self.plan is not None and self.plan["id"] == plan_id:
                self.plan["error"] = message
                self._changed()

    # -- what the graph reports ---------------------------------------------------------------------------
    def on_planner_status(self, status: dict[str, Any]) -> None:
        with self._lock:
            self.planner = {**status, "at": _now_iso()}
            self._changed()

    def on_feedback(self, event: dict[str, Any]) -> None:
        """An executor event (``{step, state, message}``): a motion of a step, or the step's outcome."""
        with self._lock:
            step, state = int(event["step"]), str(event["state"])
            if state == AWAITING_APPROVAL:  # the executor holds the goal until /grounded_planner/approve answers
                self.executor = {
                    "state": "waiting_approval",
                    "step": None,
                    "motion": "",
                    "message": event.get("message", ""),
                }
                self._changed()
                return
            self.executor = {"state": "running", "step": step, "motion": state, "message": event.get("message", "")}
            if self.plan is not None and self.plan["decision"] == "approved" and self.plan["result"] is None:
                self.plan["progress"][str(step)] = state
            self._changed()

    def on_result(self, result: dict[str, Any]) -> None:
        """How an execute goal ended (the executor's ExecutionResult as a dict). The page's message counts steps from
        1, as its table does (``as_shown``)."""
        outcome, message = how_it_ended(result)
        result = {**result, "message": message}
        with self._lock:
            self.executor = {
                "state": "idle",
                "step": None,
                "motion": "",
                "message": f"last plan {outcome}: {result.get('message', '')}",
            }
            if self.plan is not None and self.plan["decision"] == "approved" and self.plan["result"] is None:
                self.plan["result"] = {**result, "outcome": outcome}
            self._changed()

    def on_executor_presence(self, present: bool) -> str:
        """The executor left the graph (its node stopped, or its process died: no result will come for a goal it ran)
        or came back. Returns the line for the node's log ('' when nothing changed); the pages get it in their log with
        the change, in one push: the executor is shown ``gone`` until it is back, with the step it was in, since what
        the arm did after the last news is not known."""
        with self._lock:
            was = self.executor
            if present:
                if was["state"] != GONE:
                    return ""
                self.executor = {"state": "idle", "step": None, "motion": "", "message": "the executor is back"}
                line = "the executor is back on the graph"
                self._note(line)
                self._changed()
                return line
            if was["state"] == GONE:
                return ""
            if was["state"] == "running":
                line = (
                    f"the executor left the graph while step {was['step'] + 1} ran ({was['motion']}): what the arm "
                    "did after that is not known; check the robot"
                )
            elif was["state"] == "waiting_approval":
                line = "the executor left the graph while it held a plan for approval: nothing was approved"
            else:
                line = "the executor left the graph: nothing can run until it is back"
            self.executor = {"state": GONE, "step": was["step"], "motion": "", "message": line}
            self.executor_backend = ""  # not known until one is back (read again then): the pages offer no reset
            if self.plan is not None and self.plan["decision"] == "approved" and self.plan["result"] is None:
                self.plan["error"] = line
            self._note(line)
            self._changed()
            return line

    def on_episode(self, episode: dict[str, Any] | None) -> None:
        """The last closed rollout (``{id, task, condition, instruction, auto: {success, failure_mode}, label}``)."""
        with self._lock:
            self.episode = episode
            self._changed()

    def on_closed(self, episode: dict[str, Any] | None, tally: list[dict[str, Any]]) -> None:
        """A rollout closed: the label panel's episode and the tally that counts it, as one change (a page is never
        sent the one without the other)."""
        with self._lock:
            self.episode, self.tally = episode, tally
            self._changed()

    def set_tally(self, tally: list[dict[str, Any]]) -> None:
        with self._lock:
            self.tally = tally
            self._changed()

    def set_session(self, session: dict[str, Any] | None) -> None:
        with self._lock:
            if session != self.session:  # a page's ask for the unchanged progress pushes nothing
                self.session = session
                self._changed()
