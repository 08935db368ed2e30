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
from grounded_planner.fileio import append_line
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
        # trials.jsonl as last read: (its stat key, the trial ids in it, or the error its bad line gave). Read again
        # only when the file changed (this console's own append excepted): a campaign's file (Spa-Bench ran 2,892
        # trials) took 110-180 ms to read and check, and every page's session panel and every trial asked for it
        self._read: tuple[tuple[int, int, int] | None, frozenset[str] | SessionError] | None = None

    @property
    def trials_path(self) -> Path:
        return trials_path(self.folder)

    def _key(self) -> tuple[int, int, int] | None:
        """trials.jsonl's inode, size and modification time (None while there is no such file)."""
        try:
            st = os.stat(self.trials_path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def done(self) -> set[str]:
        """Trial ids already in trials.jsonl (the same checked reader as `spabench report` and `spabench session`),
        read again only when the file changed (another process's append, an edit); SessionError naming the file and
        line while a line of it is bad."""
        key = self._key()
        if self._read is None or self._read[0] != key:
            try:
                ids = frozenset() if key is None else frozenset(r["trial_id"] for r in load_trials(self.folder))
                self._read = (key, ids)
            except SpaBenchError as exc:
                self._read = (key, SessionError(str(exc)))
        read = self._read[1]
        if isinstance(read, SessionError):
            raise SessionError(str(read))
        return set(read)

    def next_card(self) -> dict[str, Any] | None:
        done = self.done()
        return next((card for card in self.cards if card["trial_id"] not in done), None)

    def card(self, trial_id: str) -> dict[str, Any]:
        for card in self.cards:
            if card["trial_id"] == trial_id:
                return card
        raise SessionError(f"no card {trial_id!r} in {self.folder}/cards.jsonl")

    def progress(self) -> dict[str, Any]:
        """What the page shows: how far the session is and the next card (without its bulky fields); while trials.jsonl
        cannot be read, ``error`` says why (its file and line) and there is no next card: nothing is recorded on a
        file whose trials cannot be counted."""
        try:
            done, error = self.done(), None
        except SessionError as exc:
            done, error = None, str(exc)
        card = None if done is None else next((c for c in self.cards if c["trial_id"] not in done), None)
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
            "done": None if done is None else sum(c["trial_id"] in done for c in self.cards),
            "card": shown,
            "error": error,
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
        done = self.done()
        read_key = self._read[0]  # done() has just read it, or found it unchanged
        if trial_id in done:
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
        written = append_line(self.trials_path, line)
        after = self._key()
        before_size = 0 if read_key is None else read_key[1]
        same_file = read_key is None or (after is not None and after[0] == read_key[0])
        if same_file and after is not None and after[1] == before_size + written:  # only this line was added
            self._read = (after, frozenset(done | {trial_id}))
        return json.loads(line)
