"""An evaluation session in the console: a Spa-Bench scene-card folder (``spabench cards --out DIR``) worked through
card by card — the next card's scene and instruction, then the operator's label appended to ``DIR/trials.jsonl``,
the same files ``spabench session DIR`` reads and writes (a trial already there is done: resume)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from grounded_planner.console.rollouts import inside
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.report import load_trials, trials_path
from grounded_planner.spabench.session import SessionError, load_cards
from grounded_planner.spabench.trial import TrialRecord

OPERATOR = "operator"


class EvalSession:
    """The cards of ``folder`` and the trials already recorded there."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        self.cards: list[dict[str, Any]] = load_cards(self.folder)  # SessionError naming the file and line
        if not self.cards:
            raise SessionError(f"{self.folder}/cards.jsonl holds no card")

    @property
    def trials_path(self) -> Path:
        return trials_path(self.folder)

    def done(self) -> set[str]:
        """Trial ids already in trials.jsonl (the same checked reader as `spabench report` and `spabench session`)."""
        if not self.trials_path.exists():
            return set()
        try:
            return {r["trial_id"] for r in load_trials(self.folder)}
        except SpaBenchError as exc:
            raise SessionError(str(exc)) from exc

    def next_card(self) -> dict[str, Any] | None:
        done = self.done()
        return next((card for card in self.cards if card["trial_id"] not in done), None)

    def card(self, trial_id: str) -> dict[str, Any]:
        for card in self.cards:
            if card["trial_id"] == trial_id:
                return card
        raise SessionError(f"no card {trial_id!r} in {self.folder}/cards.jsonl")

    def progress(self) -> dict[str, Any]:
        """What the page shows: how far the session is and the next card (without its bulky fields)."""
        done = self.done()
        card = next((c for c in self.cards if c["trial_id"] not in done), None)
        shown = (
            None
            if card is None
            else {
                k: card.get(k)
                for k in (
                    "trial_id",
                    "task",
                    "condition",
                    "seed",
                    "robot",
                    "instruction",
                    "expects_action",
                    "success_rule",
                    "card_png",
                    "objects",
                )
            }
        )
        return {
            "folder": str(self.folder),
            "total": len(self.cards),
            "done": sum(c["trial_id"] in done for c in self.cards),
            "card": shown,
        }

    def file(self, relative: str) -> Path:
        """A file of the session folder (a card's PNG); OutsideFolderError for a path that leaves it."""
        return inside(self.folder, relative)

    def record(
        self,
        trial_id: str,
        *,
        success: bool,
        failure_mode: str | None,
        planner: str,
        rollout_dir: str | Path | None,
        grasp_attempted: bool | None,
        error: str | None,
        started_at: str | None,
        wall_s: float | None,
    ) -> dict[str, Any]:
        """Append the operator's outcome of ``trial_id`` to trials.jsonl (one line, flushed to disk); returns it.

        ``rollout_dir``: the trial's rollout folder, written relative to the session folder when it lies inside it
        (the contract's ``DIR/rollouts/``), else as given. SessionError for a trial already recorded or unknown."""
        card = self.card(trial_id)
        if trial_id in self.done():
            raise SessionError(f"trial {trial_id} is already in {self.trials_path}: one outcome per trial")
        rollout = None
        if rollout_dir:
            path = Path(rollout_dir).resolve()
            try:
                rollout = path.relative_to(self.folder.resolve()).as_posix()
            except ValueError:
                rollout = str(path)
        try:
            record = dataclasses.replace(
                TrialRecord.from_dict(card, where=f"card {trial_id}"),
                planner=planner or "unknown",
                final_positions=None,  # a real arm's final object positions are not measured here
                grasp_attempted=grasp_attempted,
                success=bool(success),
                failure_mode=None if success else failure_mode,
                outcome_source=OPERATOR,
                rollout=rollout,
                error=error or None,
                started_at=started_at,
                wall_s=wall_s,
            )
            line = json.dumps(record.to_dict(), ensure_ascii=False)
        except SpaBenchError as exc:
            raise SessionError(str(exc)) from exc
        with open(self.trials_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return json.loads(line)
