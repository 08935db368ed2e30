"""`spabench session`: the trials of a scene-cards folder run in order on a real arm. The operator stages each card,
the stack plans and executes (approval as the executor is configured), one rollout is recorded per trial, an outcome
is suggested where the stack can compute one, and the operator confirms outcome and failure mode; the session can be
stopped at any prompt and resumed (a trial already in ``trials.jsonl`` is done).

The live graph and the person are behind two small protocols (:class:`Stack`, :class:`Operator`): ``ros/`` implements
the first over the plan service and the execute action, :class:`TerminalOperator` the second over a terminal."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, TextIO

import numpy as np

from grounded_planner.fileio import append_line
from grounded_planner.plan import GroundedPlan
from grounded_planner.rollout.record import ABORTED, RolloutRecorder
from grounded_planner.rollout.taxonomy import FAILURE_MODES, auto_failure_mode
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.report import load_trials, read_records, trials_path
from grounded_planner.spabench.trial import CARD_RECORD_KEYS, TrialRecord

CARDS_FILE = "cards.jsonl"
# A depth change (m, median over a box) that says something moved there between the first and the last frame.
DEPTH_CHANGE_M = 0.01


class SessionError(SpaBenchError):
    """A cards folder a session cannot run (no cards.jsonl, a bad card line, a planner name that does not fit)."""


@dataclass
class Frame:
    """One camera frame: RGB (H, W, 3) uint8 and aligned depth (H, W) in metres (None when there is no depth)."""

    rgb: np.ndarray
    depth_m: np.ndarray | None = None
    camera: Any = None  # a geometry camera model, for the rollout


@dataclass
class StackPlan:
    plan: GroundedPlan | None  # the back-projected plan, None when planning failed
    error: str = ""  # why planning failed


@dataclass
class StackExecution:
    succeeded: bool
    message: str = ""
    step_outcomes: list[str] = field(default_factory=list)  # the executor's outcome of each step it reached


class Stack(Protocol):
    """The live stack one card runs on."""

    def frame(self) -> Frame | None: ...  # the camera's latest frame (None: none)

    def plan(self, instruction: str) -> StackPlan: ...

    def execute(self, plan: GroundedPlan) -> StackExecution: ...  # blocks until done (approval included)


@dataclass
class Suggestion:
    """The outcome the stack proposes; ``success`` None when it cannot tell."""

    success: bool | None
    failure_mode: str | None
    reason: str


@dataclass
class Label:
    """The operator's verdict on a trial."""

    success: bool
    failure_mode: str | None = None
    notes: str = ""


class Operator(Protocol):
    def stage(self, card: dict[str, Any], index: int, total: int) -> str: ...  # "go" | "skip" | "stop"

    def confirm(self, card: dict[str, Any], suggestion: Suggestion) -> Label | None: ...  # None: stop here


def load_cards(folder: str | Path) -> list[dict[str, Any]]:
    """The card lines of ``folder/cards.jsonl`` (each checked against the trial record contract)."""
    path = Path(folder) / CARDS_FILE
    if not path.is_file():
        raise SessionError(f"{path}: no such file (write a cards folder with `spabench cards --out {folder}`)")
    cards = [card for _, card in read_records(path, SessionError)]
    return cards


def _box_change_m(first: np.ndarray, last: np.ndarray, box: Sequence[float], size: tuple[int, int]) -> float | None:
    """Median absolute depth change (m) inside a plan box (pixels of a ``size`` image) between two depth frames."""
    h, w = first.shape[:2]
    sx, sy = w / size[0], h / size[1]
    x1, y1, x2, y2 = (int(round(v)) for v in (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy))
    a, b = (
        first[max(0, y1) : min(h, y2), max(0, x1) : min(w, x2)],
        last[max(0, y1) : min(h, y2), max(0, x1) : min(w, x2)],
    )
    valid = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b)
    if not valid.any():
        return None
    return float(np.median(np.abs(a[valid] - b[valid])))


def suggest_outcome(
    card: dict[str, Any], planned: StackPlan, execution: StackExecution | None, first: Frame | None, last: Frame | None
) -> Suggestion:
    """What the stack can tell about a trial's outcome: its own failures (planner, refusal, grasp check, nothing to
    do), and from the first and last camera frames whether the grasped object left its place."""
    expects = bool(card["expects_action"])
    steps = [{"outcome": o} for o in (execution.step_outcomes if execution else [])]
    success, mode = auto_failure_mode(
        {"steps": steps},
        planned.plan.to_dict() if planned.plan else None,
        planner_error=planned.error,
        expects_action=expects,
    )
    if mode or success is not None:
        why = {
            "planner_error": f"the planner failed: {planned.error}",
            "refused": "the safety layer refused a step",
            "grasp_failure": "the gripper closed on nothing",
            "no_action": "the plan had nothing to do",
        }
        return Suggestion(success, mode, why.get(mode or "", "the plan had nothing to do, as the card expects"))
    if execution is not None and not execution.succeeded and not any(steps):
        return Suggestion(
            None if expects else True,
            None,
            f"the executor did not run the plan ({execution.message}); check that nothing moved",
        )
    if not expects:
        return Suggestion(False, "wrong_object", "the arm acted in a trial where no action was required")
    plan = planned.plan
    grasp = next((a for a in plan.actions if a.type == "grasp" and a.bbox), None) if plan else None
    if grasp is None or first is None or last is None or first.depth_m is None or last.depth_m is None:
        return Suggestion(None, None, "no camera depth before and after: judge from the scene")
    change = _box_change_m(first.depth_m, last.depth_m, grasp.bbox, plan.image_size)
    if change is None:
        return Suggestion(None, None, "no valid depth where the object was: judge from the scene")
    if change < DEPTH_CHANGE_M:
        return Suggestion(
            False,
            "grasp_failure",
            f"the depth where the {grasp.object or 'object'} stood changed by "
            f"{change * 1000:.0f} mm only: it seems not to have moved",
        )
    return Suggestion(
        None,
        None,
        f"the {grasp.object or 'object'} left its place (depth there changed by "
        f"{change * 1000:.0f} mm): check where it ended up",
    )


class TerminalOperator:
    """The operator at a terminal: ``ask`` reads one answer line (``input`` by default), ``out`` shows the prompts."""

    def __init__(self, ask: Callable[[str], str] = input, out: TextIO | None = None):
        self.ask = ask
        self.out = out

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def stage(self, card: dict[str, Any], index: int, total: int) -> str:
        self._say(f"\n[{index}/{total}] {card['trial_id']}: stage the scene of card {card.get('card_png', '')}")
        self._say(f"  instruction: {card['instruction']}")
        if card.get("success_rule"):
            self._say(f"  success: {card['success_rule']}")
        while True:
            answer = self.ask("  Enter = run it, s = skip, q = stop the session: ").strip().lower()
            if answer in ("", "g", "go"):
                return "go"
            if answer in ("s", "skip"):
                return "skip"
            if answer in ("q", "quit", "stop"):
                return "stop"
            self._say(f"  {answer!r}: answer Enter, s or q")

    def confirm(self, card: dict[str, Any], suggestion: Suggestion) -> Label | None:
        verdict = {True: "success", False: f"failure ({suggestion.failure_mode})", None: "unknown"}[suggestion.success]
        self._say(f"  the stack suggests: {verdict} - {suggestion.reason}")
        default = {True: "y", False: "n"}.get(suggestion.success, "")
        while True:
            answer = self.ask(f"  success? y / n{' (Enter = ' + default + ')' if default else ''}, q = stop: ")
            answer = answer.strip().lower() or default
            if answer in ("q", "quit", "stop"):
                return None
            if answer in ("y", "n"):
                break
            self._say(f"  {answer!r}: answer y, n or q")
        notes = ""
        if answer == "y":
            return Label(True, None, notes)
        modes = list(FAILURE_MODES)
        for i, m in enumerate(modes, 1):
            self._say(f"    {i}. {m}: {FAILURE_MODES[m]}")
        suggested = modes.index(suggestion.failure_mode) + 1 if suggestion.failure_mode in modes else None
        while True:
            answer = (
                self.ask(
                    f"  failure mode 1-{len(modes)}{' (Enter = ' + str(suggested) + ')' if suggested else ''}"
                    ", q = stop: "
                )
                .strip()
                .lower()
            )
            if answer in ("q", "quit", "stop"):
                return None
            if not answer and suggested:
                answer = str(suggested)
            if answer.isdigit() and 1 <= int(answer) <= len(modes):
                break
            self._say(f"  {answer!r}: answer a number 1-{len(modes)} or q")
        notes = self.ask("  notes (Enter = none): ").strip()
        return Label(False, modes[int(answer) - 1], notes)


@dataclass
class SessionSummary:
    recorded: list[str] = field(default_factory=list)  # trial ids labelled in this session
    skipped: list[str] = field(default_factory=list)
    stopped: bool = False
    remaining: int = 0  # cards still without an outcome


class Session:
    """Runs the pending cards of ``folder`` in order; appends each labelled trial to ``folder/trials.jsonl``."""

    def __init__(
        self,
        folder: str | Path,
        stack: Stack,
        operator: Operator,
        planner: str = "",
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.folder = Path(folder)
        self.stack = stack
        self.operator = operator
        self.planner = planner
        self.clock = clock
        self.cards = load_cards(self.folder)

    def done(self) -> set[str]:
        if not trials_path(self.folder).exists():
            return set()
        return {r["trial_id"] for r in load_trials(self.folder)}

    def pending(self) -> list[dict[str, Any]]:
        done = self.done()
        return [c for c in self.cards if c["trial_id"] not in done]

    def run(self) -> SessionSummary:
        summary = SessionSummary()
        todo = self.pending()
        for i, card in enumerate(todo, 1):
            answer = self.operator.stage(card, i, len(todo))
            if answer == "stop":
                summary.stopped = True
                break
            if answer == "skip":
                summary.skipped.append(card["trial_id"])
                continue
            record = self.run_card(card)
            if record is None:
                summary.stopped = True
                break
            summary.recorded.append(record["trial_id"])
        summary.remaining = len(self.pending())
        return summary

    def run_card(self, card: dict[str, Any]) -> dict[str, Any] | None:
        """Run one card; its record (appended to trials.jsonl), or None when the operator stopped at the verdict
        (nothing is recorded then: the card runs again on resume)."""
        started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        wall0 = self.clock()
        rel = f"rollouts/{card['task']}_{card['condition']}_{card['seed']}"
        folder = self.folder / rel
        if folder.exists():
            shutil.rmtree(folder)  # a card stopped half-way in an earlier session: its rollout is redone
        with RolloutRecorder(
            folder,
            instruction=card["instruction"],
            task=card["task"],
            condition=card["condition"],
            scene_id=card.get("pair_id") or card["trial_id"],
            trial=int(card["seed"]),
            model=self.planner,
            expects_action=bool(card["expects_action"]),
            extra={"spabench": {"trial_id": card["trial_id"], "robot": card["robot"], "spec": card["spec"]}},
        ) as recorder:
            first = self.stack.frame()
            if first is not None:
                recorder.log_frame(first.rgb, first.depth_m, first.camera)
            t_plan = self.clock()
            planned = self.stack.plan(card["instruction"])
            execution = None
            if planned.plan is None:
                recorder.log_planner_error(planned.error)
            else:
                recorder.log_plan(planned.plan, planning_time_s=self.clock() - t_plan)
                execution = self.stack.execute(planned.plan)
                for k, outcome in enumerate(execution.step_outcomes):
                    action = planned.plan.actions[k] if k < len(planned.plan.actions) else None
                    recorder.log_step(
                        k, action.type if action else "", outcome, execution.message if outcome != "ok" else ""
                    )
            last = self.stack.frame()
            if last is not None:
                recorder.log_frame(last.rgb, last.depth_m, last.camera)
            suggestion = suggest_outcome(card, planned, execution, first, last)
            label = self.operator.confirm(card, suggestion)
            if label is None:
                recorder.close(ABORTED, error="the operator stopped the session before labelling")
                return None
            if label.failure_mode is not None and label.failure_mode not in FAILURE_MODES:
                raise SessionError(f"unknown failure mode {label.failure_mode!r}")
            recorder.set_label(
                label.success,
                None if label.success else label.failure_mode,
                notes=label.notes or suggestion.reason,
                source="operator",
            )
        grasp_steps = [
            o
            for k, o in enumerate(execution.step_outcomes if execution else [])
            if planned.plan and k < len(planned.plan.actions) and planned.plan.actions[k].type == "grasp"
        ]
        error = planned.error or (execution.message if execution and not execution.succeeded else "")
        record = {key: card[key] for key in CARD_RECORD_KEYS}
        record["planner"] = self.planner or record.get("planner") or ""
        record.update(
            {
                "final_positions": None,
                "grasp_attempted": any(o not in ("outside_workspace", "unreachable") for o in grasp_steps),
                "success": label.success,
                "failure_mode": None if label.success else label.failure_mode,
                "outcome_source": "operator",
                "rollout": rel,
                "error": error or None,
                "started_at": started_at,
                "wall_s": self.clock() - wall0,
            }
        )
        out = TrialRecord.from_dict(record, where=card["trial_id"]).to_dict()
        append_line(trials_path(self.folder), json.dumps(out, ensure_ascii=False))
        return out
