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
from grounded_planner.spabench.errors import TrialRecordError
from grounded_planner.spabench.trial import TrialRecord

CARDS = "cards.jsonl"
TRIALS = "trials.jsonl"
OPERATOR = "operator"


class SessionError(ValueError):
    """A session folder that cannot be used (no cards.jsonl, a malformed line, an unknown trial)."""


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise SessionError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SessionError(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise SessionError(f"{path}:{number}: expected a JSON object, got {type(data).__name__}")
        out.append((number, data))
    return out


class EvalSession:
    """The cards of ``folder`` and the trials already recorded there."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        cards_path = self.folder / CARDS
        if not cards_path.is_file():
            raise SessionError(f"{self.folder} is not a scene-card folder: no {CARDS} (make one with `spabench cards "
                               f"--out {self.folder}`)")
        self.cards: list[dict[str, Any]] = []
        for number, data in _read_jsonl(cards_path):
            try:
                TrialRecord.from_dict(data, where=f"{cards_path}:{number}")
            except TrialRecordError as exc:
                raise SessionError(str(exc)) from exc
            self.cards.append(data)
        if not self.cards:
            raise SessionError(f"{cards_path} holds no card")

    @property
    def trials_path(self) -> Path:
        return self.folder / TRIALS

    def done(self) -> set[str]:
        """Trial ids already in trials.jsonl (a line that is not a JSON object is an error naming it)."""
        return {str(data.get("trial_id")) for _n, data in _read_jsonl(self.trials_path)}

    def next_card(self) -> dict[str, Any] | None:
        done = self.done()
        return next((card for card in self.cards if card["trial_id"] not in done), None)

    def card(self, trial_id: str) -> dict[str, Any]:
        for card in self.cards:
            if card["trial_id"] == trial_id:
                return card
        raise SessionError(f"no card {trial_id!r} in {self.folder / CARDS}")

    def progress(self) -> dict[str, Any]:
        """What the page shows: how far the session is and the next card (without its bulky fields)."""
        done = self.done()
        card = next((c for c in self.cards if c["trial_id"] not in done), None)
        shown = None if card is None else {k: card.get(k) for k in (
            "trial_id", "task", "condition", "seed", "robot", "instruction", "expects_action", "success_rule",
            "card_png", "objects")}
        return {"folder": str(self.folder), "total": len(self.cards), "done": sum(c["trial_id"] in done for c in self.cards),
                "card": shown}

    def file(self, relative: str) -> Path:
        """A file of the session folder (a card's PNG); OutsideFolderError for a path that leaves it."""
        return inside(self.folder, relative)

    def record(self, trial_id: str, *, success: bool, failure_mode: str | None, planner: str,
               rollout_dir: str | Path | None, grasp_attempted: bool | None, error: str | None,
               started_at: str | None, wall_s: float | None) -> dict[str, Any]:
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
                TrialRecord.from_dict(card, where=f"card {trial_id}"), planner=planner or "unknown",
                final_positions=None,  # a real arm's final object positions are not measured here
                grasp_attempted=grasp_attempted, success=bool(success), failure_mode=None if success else failure_mode,
                outcome_source=OPERATOR, rollout=rollout, error=error or None, started_at=started_at, wall_s=wall_s)
            line = json.dumps(record.to_dict(), ensure_ascii=False)
        except TrialRecordError as exc:
            raise SessionError(str(exc)) from exc
        with open(self.trials_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return json.loads(line)
