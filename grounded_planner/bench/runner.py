"""Batch planning over an episode set: concurrent requests, resumable JSONL output, per-episode errors, progress."""

from __future__ import annotations

import json
import logging
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np

from grounded_planner.bench.episodes import Episode, EpisodeError
from grounded_planner.errors import InputError
from PIL import Image

log = logging.getLogger(__name__)


@dataclass
class BenchRunSummary:
    """What one ``run_bench`` call did (counts of episodes)."""

    total: int  # episodes in the set
    skipped: int  # already in the output file (resumed)
    done: int  # planned now, plan written
    failed: int  # planned now, error written
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "skipped": self.skipped,
            "done": self.done,
            "failed": self.failed,
            "elapsed_s": round(self.elapsed_s, 3),
        }


class Progress:
    """A one-line progress report on a stream: redrawn in place on a terminal, every 10% otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, label: str = "bench run"):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.done = self.failed = 0
        self._last_decile = -1

    def update(self, failed: bool) -> None:
        self.done += 1
        self.failed += int(failed)
        decile = 10 * self.done // max(self.total, 1)
        if self.tty or decile != self._last_decile or self.done == self.total:
            self._last_decile = decile
            self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        line = (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"({self.failed} failed) {rate:.2f} ep/s ETA {eta:.0f} s"
        )
        if self.tty:
            self.stream.write("\r" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def read_done(out_path: Path, retry_errors: bool = False) -> set[str]:
    """Ids that already have a record in ``out_path`` (those whose last record is an error excluded when
    ``retry_errors``). A partial last line left by a crash is cut off so that appends start clean."""
    if not out_path.exists():
        return set()
    raw = out_path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        log.warning(
            "%s: dropping a partial last record (%d bytes) left by an interrupted run", out_path, len(raw) - cut
        )
        with out_path.open("r+b") as f:
            f.truncate(cut)
        raw = raw[:cut]
    last_ok: dict[str, bool] = {}
    for lineno, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            last_ok[str(record["id"])] = record.get("plan") is not None
        except (ValueError, KeyError, TypeError):
            raise EpisodeError(
                f"{out_path}:{lineno}: not a prediction record; fix or remove the line to resume"
            ) from None
    return {i for i, ok in last_ok.items() if ok or not retry_errors}


def load_rgb(path: Path) -> np.ndarray:
    """An episode image as (H, W, 3) uint8 RGB."""

    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


def plan_episode(planner: Any, episode: Episode) -> dict[str, Any]:
    """One prediction record; any failure (image, model, parse) becomes the record's ``error``."""
    start = time.monotonic()
    try:
        image = load_rgb(episode.image)
        plan = planner.plan(image, episode.instruction)
        record = {"id": episode.id, "plan": plan.to_dict(), "error": ""}
    except Exception as exc:  # noqa: BLE001 - a failing episode is recorded and the run goes on
        log.debug("episode %s failed", episode.id, exc_info=True)
        record = {"id": episode.id, "plan": None, "error": f"{type(exc).__name__}: {exc}"}
    record["elapsed_s"] = round(time.monotonic() - start, 3)
    return record


def run_bench(
    episodes: list[Episode],
    planner: Any,
    out_path: str | Path,
    *,
    concurrency: int = 4,
    retry_errors: bool = False,
    limit: int | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    progress_stream: TextIO | None = None,
) -> BenchRunSummary:
    """Plan every episode not yet in ``out_path`` and append one JSON line per episode as it finishes.

    ``planner`` is anything with ``plan(image_rgb, instruction) -> GroundedPlan`` (the vlm layer's
    ``Planner``); it is shared by ``concurrency`` worker threads. Each line is flushed when written, so
    an interrupted run resumes where it stopped. Ctrl-C stops submitting, keeps what is written.
    """
    if concurrency < 1:
        raise InputError(f"concurrency must be >= 1, got {concurrency}")
    if limit is not None and limit < 0:
        raise InputError(f"limit must be >= 0, got {limit}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done_ids = read_done(out_path, retry_errors)
    todo = [ep for ep in episodes if ep.id not in done_ids]
    if limit is not None:
        todo = todo[:limit]
    progress = Progress(len(todo), progress_stream)
    written = failed = 0
    with (
        out_path.open("a", encoding="utf-8") as out,
        ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench") as pool,
    ):
        pending: set[Future] = set()
        queue = iter(todo)
        try:
            while True:
                while len(pending) < 2 * concurrency:  # bounded look-ahead: Ctrl-C leaves little in flight
                    episode = next(queue, None)
                    if episode is None:
                        break
                    pending.add(pool.submit(plan_episode, planner, episode))
                if not pending:
                    break
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    record = future.result()
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")  # only this thread writes
                    out.flush()
                    written += 1
                    failed += int(record["plan"] is None)
                    progress.update(record["plan"] is None)
                    if on_record is not None:
                        on_record(record)
        except KeyboardInterrupt:
            for future in pending:
                future.cancel()
            raise
    skipped = sum(1 for ep in episodes if ep.id in done_ids)
    return BenchRunSummary(
        total=len(episodes), skipped=skipped, done=written - failed, failed=failed, elapsed_s=time.monotonic() - start
    )
