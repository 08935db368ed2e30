"""The rollouts folder as the console serves it: listing with filters, one rollout's record and frames, labels,
the running tally. Every path a browser names is resolved inside the folder, and one that leaves it is refused."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable


from grounded_planner.console.jpeg import encode_jpeg, scale_to_width
from grounded_planner.console.state import how_it_ended
from grounded_planner.errors import GroundedPlannerError, InputError
from grounded_planner.rollout.bag import BagError, has_footer, image_to_rgb, iter_mcap, read_bag
from grounded_planner.rollout.record import JSON_NAME, RolloutError, RolloutRecord, RolloutTopics, load_rollout
from grounded_planner.rollout.stats import group_stats
from grounded_planner.rollout.taxonomy import FAILURE_MODES

log = logging.getLogger(__name__)

OUTCOMES = ("success", "failure", "unlabelled")


class OutsideFolderError(GroundedPlannerError, LookupError):
    """A path that leaves the folder it must stay in (served as 404, and logged)."""


class NotARolloutError(GroundedPlannerError, LookupError):
    """A path inside the rollouts folder that holds no rollout (404)."""


def inside(root: Path, relative: str) -> Path:
    """``root / relative`` resolved (symlinks followed); OutsideFolderError when it is not at or below ``root``."""
    if not relative or "\x00" in relative or Path(relative).is_absolute():
        raise OutsideFolderError(f"{relative!r} is not a path relative to {root}")
    root = root.resolve()
    path = (root / relative).resolve()
    if path != root and root not in path.parents:
        raise OutsideFolderError(f"{relative!r} leaves {root}")
    return path


def text_of(data: dict[str, Any], key: str) -> str:
    """A text field of rollout.json as the listing shows it and its filters match it: absent or null is ''."""
    return data.get(key) or ""


def outcome_of(data: dict[str, Any]) -> str:
    """success | failure | unlabelled (a failure without its failure mode is not labelled yet)."""
    if data.get("success") is True:
        return "success"
    if data.get("success") is False and data.get("failure_mode"):
        return "failure"
    return "unlabelled"


class RolloutStore:
    """The rollouts folder ``root`` (which need not exist yet: the logger creates it with the first rollout)."""

    def __init__(self, root: str | Path, topics: RolloutTopics | None = None):
        self.root = Path(root).expanduser()
        self.topics = topics or RolloutTopics()
        self._frame_cache: dict[tuple[str, float], list[int]] = {}
        # rollout.json -> (mtime, size), the record, its content as a dict (the tally's input, made once per change)
        self._cache: dict[Path, tuple[tuple[int, int], RolloutRecord, dict[str, Any]]] = {}

    def _entries(self, paths: list[Path] | None = None) -> list[tuple[tuple[int, int], RolloutRecord, dict[str, Any]]]:
        """Every rollout under the folder sorted by path (or those of the rollout.json ``paths``, in their order,
        without walking the folder): (rollout.json's (mtime, size), the record, its dict). A rollout.json is read
        again only when it changed: an evaluation of thousands of trials recomputes the tally after each episode. An
        unreadable one is skipped with a warning (it must not hide the others)."""
        if not self.root.exists():
            return []
        out, seen = [], set()
        for path in sorted(self.root.rglob(JSON_NAME)) if paths is None else paths:  # given: any order
            try:
                stat = path.stat()
            except OSError:
                continue
            key = (stat.st_mtime_ns, stat.st_size)
            seen.add(path)
            cached = self._cache.get(path)
            if cached is None or cached[0] != key:
                try:
                    record = load_rollout(path.parent)
                except RolloutError as exc:
                    log.warning("rollouts folder %s: skipping %s", self.root, exc)
                    self._cache.pop(path, None)
                    continue
                cached = self._cache[path] = (key, record, record.data)
            out.append(cached)
        for gone in (set(self._cache) if paths is None else set(paths)) - seen:
            self._cache.pop(gone, None)
        return out

    def rel(self, record: RolloutRecord) -> str:
        return record.directory.resolve().relative_to(self.root.resolve()).as_posix()

    def summary(self, record: RolloutRecord, data: dict[str, Any] | None = None) -> dict[str, Any]:
        d = record.data if data is None else data  # data: record.data as the cache keeps it
        return {
            "id": self.rel(record),
            "episode_id": record.episode_id,
            "task": text_of(d, "task"),
            "condition": text_of(d, "condition"),
            "instruction": text_of(d, "instruction"),
            "status": record.status,
            "started_at": d.get("started_at"),
            "outcome": outcome_of(d),
            "success": d.get("success"),
            "failure_mode": d.get("failure_mode"),
            "label_source": d.get("label_source"),
            "steps": len(d.get("steps") or []),
        }

    def list(
        self, task: str = "", condition: str = "", outcome: str = "", offset: int = 0, limit: int | None = None
    ) -> dict[str, Any]:
        """Rollouts (newest first) matching the filters, from the ``offset``-th on, at most ``limit`` of them (None:
        all), with how many match (``total``) and the values each filter can take. A page's rows only are summarised:
        a campaign's listing is thousands of rows, of which a page shows one screen."""
        if outcome and outcome not in OUTCOMES:
            raise InputError(f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
        if offset < 0 or (limit is not None and limit < 1):
            raise InputError(f"offset must be 0 or more and limit 1 or more, got offset {offset}, limit {limit}")
        entries = [(record, data) for _, record, data in self._entries()]
        tasks = sorted({text_of(data, "task") for _, data in entries})
        conditions = sorted({text_of(data, "condition") for _, data in entries})
        matched = [  # on the fields as summary() shows them, without summarising the rows no page shows
            (record, data)
            for record, data in entries
            if (not task or text_of(data, "task") == task)
            and (not condition or text_of(data, "condition") == condition)
            and (not outcome or outcome_of(data) == outcome)
        ]
        # newest first; rollouts started at the same time in the order of their folders' names, newest name first
        matched.sort(key=lambda e: (e[1].get("started_at") or "", e[0].directory.as_posix()), reverse=True)
        shown = matched[offset:] if limit is None else matched[offset : offset + limit]
        return {
            "rollouts": [self.summary(record, data) for record, data in shown],
            "total": len(matched),
            "offset": offset,
            "limit": limit,
            "tasks": tasks,
            "conditions": conditions,
            "outcomes": list(OUTCOMES),
        }

    def record(self, relative: str) -> RolloutRecord:
        path = inside(self.root, relative)
        try:
            return load_rollout(path)
        except RolloutError as exc:
            raise NotARolloutError(str(exc)) from exc

    def detail(self, relative: str) -> dict[str, Any]:
        record = self.record(relative)
        return {
            **self.summary(record),
            "record": record.data,
            "frames": len(self.frame_stamps(record)),
            "failure_modes": FAILURE_MODES,
        }

    # -- frames ----------------------------------------------------------------------------------------
    def frame_stamps(self, record: RolloutRecord) -> list[int]:
        """Log times (ns) of the rollout's colour frames (cached while the bag is unchanged)."""
        bag = record.bag_path
        if not bag.exists():
            return []
        key = (str(bag), bag.stat().st_mtime)
        if key not in self._frame_cache:
            try:
                self._frame_cache[key] = [m.log_time_ns for m in self._colour_messages(record, decode=False)]
            except BagError as exc:
                log.warning("rollout %s: bag unreadable: %s", record.directory, exc)
                self._frame_cache[key] = []
        return self._frame_cache[key]

    def frame_jpeg(self, relative: str, k: int, width: int | None = None) -> bytes:
        """The rollout's ``k``-th colour frame as JPEG, scaled down to ``width`` pixels where given (a thumbnail).

        Found by its log time (``frame_stamps``, read once per bag): a closed bag is read through its chunk index,
        only the chunk that holds the frame; one still being written (or whose index does not read) is scanned, and
        only that frame decoded. Reading every frame up to the ``k``-th took 107 ms for the last of 600 frames, and a
        rollout page asks for each."""
        record = self.record(relative)
        stamps = self.frame_stamps(record)
        if not 0 <= k < len(stamps):
            raise NotARolloutError(f"rollout {relative} has {len(stamps)} frames, no frame {k}")
        stamp = stamps[k]
        bag, topics = record.bag_path, list(self.topics.color_topics)

        def logged_at(found) -> list[Any]:
            return [m.msg for m in found if m.topic in topics and m.msg is not None]

        try:
            try:
                if not has_footer(bag):
                    raise BagError(f"{bag} has no footer")
                at_stamp = logged_at(read_bag(bag, topics, start_ns=stamp, end_ns=stamp + 1))
            except BagError:  # no footer (its writer died), or a summary that does not read: its records, scanned
                at_stamp = logged_at(iter_mcap(bag, topics=topics, start_ns=stamp, end_ns=stamp + 1))
        except (BagError, OSError) as exc:
            raise NotARolloutError(f"rollout {relative}: frame {k} cannot be read: {exc}") from exc
        nth = stamps[:k].count(stamp)  # frames logged at the same time: in file order, as frame_stamps lists them
        if nth >= len(at_stamp):
            raise NotARolloutError(f"rollout {relative}: frame {k} is gone from its bag")
        rgb = image_to_rgb(at_stamp[nth])
        if width is not None and width < rgb.shape[1]:
            rgb = scale_to_width(rgb, width)
        return encode_jpeg(rgb)

    def _colour_messages(self, record: RolloutRecord, decode: bool = True):
        """The rollout's colour frames, raw or compressed (the recorder's default), in its window of a session
        file; read record by record, so a rollout still being recorded shows its frames so far."""
        start_ns, end_ns = record.bag_window
        topics = self.topics.color_topics
        return (
            m
            for m in iter_mcap(record.bag_path, decode=decode, topics=list(topics), start_ns=start_ns, end_ns=end_ns)
            if m.topic in topics
        )

    # -- labels and the tally ----------------------------------------------------------------------------
    def save_label(self, relative: str, success: bool, failure_mode: str | None, notes: str | None) -> RolloutRecord:
        """As `grounded-planner rollouts label` writes it (RolloutError for a label the record refuses)."""
        record = self.record(relative)
        record.save_label(bool(success), failure_mode or None, notes=notes, source="human")
        return record

    def tally(self, by: Iterable[str] = ("task", "condition")) -> list[dict[str, Any]]:
        """Success rate per task and condition with its Wilson 95% interval (labelled rollouts count)."""
        return [g.to_dict() for g in group_stats([entry[2] for entry in self._entries()], tuple(by))]

    def _json_path(self, directory: str | Path) -> Path:
        """The rollout.json of the rollout folder ``directory`` as the folder's walk names it (one rollout, one cache
        entry, whichever path to the folder the logger used); ValueError where it lies outside the folder."""
        return self.root / Path(directory).resolve().relative_to(self.root.resolve()) / JSON_NAME

    def tally_after_close(self, *paths: str | Path, by: Iterable[str] = ("task", "condition")) -> list[dict[str, Any]]:
        """The tally once the logger closed the rollouts at ``paths``: the rollouts known from the last walk of the
        folder (each read again if its rollout.json changed, as a label from `rollouts label` changes it) and these,
        without walking the folder again. The walk reads every file name of every rollout; in a campaign of
        thousands of trials it would run after each episode. A rollout another logger adds shows in the tally at the
        next walk (the rollouts page, a label, the console's start)."""
        known = set(self._cache)
        for path in paths:
            try:
                known.add(self._json_path(path))
            except ValueError:
                log.warning("closed rollout %s is outside %s: not counted", path, self.root)
        return [g.to_dict() for g in group_stats([entry[2] for entry in self._entries(list(known))], tuple(by))]

    def episode(self, path: str | Path) -> dict[str, Any] | None:
        """A closed rollout as the label panel shows it (None when it lies outside the folder or is unreadable)."""
        try:
            json_path = self._json_path(path)
        except ValueError as exc:
            log.warning("closed rollout %s not shown: %s", path, exc)
            return None
        entries = self._entries([json_path])  # read once, for the tally after it too
        if not entries:
            log.warning("closed rollout %s not shown: no readable %s", path, JSON_NAME)
            return None
        _, record, d = entries[0]
        return {
            **self.summary(record, d),
            "ended": _ended(d),
            "auto": {
                "success": d.get("success"),
                "failure_mode": d.get("failure_mode"),
                "source": d.get("label_source"),
            },
            "labelled_by_person": d.get("label_source") == "human",
        }


def _ended(d: dict[str, Any]) -> str:
    """How a rollout's episode ended, as the label panel says it above the label: the execution's outcome and message
    as the live view showed them (steps counted from 1), or why no plan ran."""
    execution = d.get("execution")
    if isinstance(execution, dict) and (execution.get("steps") or execution.get("message")):
        steps = execution.get("steps") or []
        if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("index"), int) and {"type", "outcome"} <= s.keys() for s in steps
        ):  # a rollout.json edited by hand, or by another tool: the panel says so, the label can still be given
            return "how it ended cannot be read: its execution's steps are not steps (index, type, outcome)"
        outcome, message = how_it_ended(execution)
        return f"{outcome}: {message}"  # a dry run's message says so ("dry run: every step passes the checks")
    planner_error = text_of(d, "planner_error")
    return f"no plan ran: planner error: {planner_error}" if planner_error else "no plan ran"
