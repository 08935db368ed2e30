"""Recording sessions: one MCAP file across many episodes, for hours, in constant memory.

Layout of a session folder::

    SESSION/session.mcap        every episode's messages, one chunked, indexed file
    SESSION/session.json        the index: episodes with their folders, log-time windows, status, message counts
    SESSION/<episode>/rollout.json  each episode's record; its ``bag`` names ``../session.mcap`` and the window

Each episode starts and ends with a marker message (std_msgs/String JSON ``{"event": "start"|"end",
"episode_id": ..., ...}`` on ``/grounded_planner/rollout/episode``), inside its window [start_ns, end_ns).
Every ``rollouts`` command works per episode (they find the episode folders); readers read only the
episode's window through the file's chunk index. A killed session is finished by ``rollouts recover
SESSION``: the file keeps every complete chunk, the open episode becomes ``cut_short`` and session.json
says so. What stays in memory while recording: the open chunk, one chunk-index entry per closed chunk
(about 100 bytes each: 7,200 an hour at 0.5 s) and the index of episodes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any, Callable

from grounded_planner.rollout.bag import string_msg
from grounded_planner.rollout.bag_recover import recover_mcap
from grounded_planner.rollout.bag_write import McapBagWriter
from grounded_planner.rollout.info import (
    ABORTED,
    COMPLETE,
    CUT_SHORT,
    IN_PROGRESS,
    JSON_NAME,
    BagRef,
    RolloutError,
    now_iso,
    write_json_atomic,
    writer_alive,
)
from grounded_planner.rollout.record import (
    RecordingOptions,
    RolloutRecorder,
    RolloutTopics,
    find_unfinished,
    load_rollout,
    recover_rollout,
)

SESSION_JSON = "session.json"
SESSION_BAG = "session.mcap"
SESSION_FORMAT = "grounded_planner.session/1"


class SessionEpisode(RolloutRecorder):
    """One episode of a session: a RolloutRecorder writing into the session's file between two markers."""

    def __init__(self, session: "SessionRecorder", directory: Path, bag_ref: BagRef, **kwargs):
        self._session = session
        super().__init__(directory, bag=session.writer, bag_ref=bag_ref, **kwargs)

    def close(self, status: str = COMPLETE, error: str = "", end_ns: int | None = None) -> dict[str, Any]:
        with self._lock:
            if self.closed:
                return self.data
            marker = {"event": "end", "episode_id": self._info.episode_id, "status": status}
            t = self._write(self.topics.episodes, string_msg(marker))
            data = super().close(status, error, end_ns=t + 1)
        self._session._episode_closed(self)
        return data


class SessionRecorder:
    """Record many episodes into one session folder (see the module docstring).

    Parameters
    ----------
    directory : path
        The session folder (created; must not hold a session already).
    options : RecordingOptions, optional
        Image transport, compression, chunking (shared by every episode).
    topics : RolloutTopics, optional
    clock_ns : callable, optional
        Log-time source in ns for every episode; default the wall clock.
    """

    def __init__(
        self,
        directory: str | Path,
        options: RecordingOptions | None = None,
        topics: RolloutTopics | None = None,
        clock_ns: Callable[[], int] | None = None,
    ):
        self.directory = Path(directory)
        if (self.directory / SESSION_JSON).exists() or (self.directory / SESSION_BAG).exists():
            raise RolloutError(f"{self.directory} already holds a session; use a new folder")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.options = options or RecordingOptions()
        self.topics = topics or RolloutTopics()
        self._clock_ns = clock_ns
        self._lock = threading.RLock()
        self.writer = McapBagWriter(self.directory / SESSION_BAG, self.options.bag_options())
        self._open: SessionEpisode | None = None
        self._index: dict[str, Any] = {
            "format": SESSION_FORMAT,
            "session_id": self.directory.name,
            "bag": SESSION_BAG,
            "status": IN_PROGRESS,
            "started_at": now_iso(),
            "ended_at": None,
            "writer": {"pid": os.getpid(), "host": socket.gethostname()},
            "recording": self.options.to_json(),
            "episodes": [],
        }
        self._save()

    def _save(self) -> None:
        write_json_atomic(self.directory / SESSION_JSON, self._index)

    @property
    def episodes(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._index["episodes"]]

    def episode(self, name: str | None = None, **kwargs) -> SessionEpisode:
        """Open the next episode (folder ``name``, default ``episode_NNNN``); RolloutRecorder's keyword arguments.

        Only one episode is open at a time: opening another while one is open is refused.
        """
        with self._lock:
            if self._open is not None:
                raise RolloutError(f"episode {self._open.directory.name} of session {self.directory} is still open")
            name = name or f"episode_{len(self._index['episodes']):04d}"
            folder = self.directory / name
            if Path(name).is_absolute() or folder.resolve().parent != self.directory.resolve():
                raise RolloutError(f"episode name {name!r} must be one folder name inside the session")
            episode_id = kwargs.pop("episode_id", None) or name
            start = self.writer.write(
                self.topics.episodes,
                string_msg({"event": "start", "episode_id": episode_id, "folder": name}),
                log_time_ns=self._clock_ns() if self._clock_ns else None,
            )
            ref = BagRef(file=os.path.join("..", SESSION_BAG), messages=1, start_ns=start, session=self.directory.name)
            self._open = SessionEpisode(
                self,
                folder,
                ref,
                episode_id=episode_id,
                options=self.options,
                topics=self.topics,
                clock_ns=self._clock_ns,
                **kwargs,
            )
            self._index["episodes"].append(
                {
                    "episode_id": episode_id,
                    "folder": name,
                    "start_ns": start,
                    "end_ns": None,
                    "status": IN_PROGRESS,
                    "messages": 1,
                }
            )
            self._save()
            return self._open

    def _episode_closed(self, episode: SessionEpisode) -> None:
        with self._lock:
            info = episode.info
            for entry in self._index["episodes"]:
                if entry["folder"] == episode.directory.name:
                    entry.update(end_ns=info.bag.end_ns, status=info.status, messages=info.bag.messages)
            if self._open is episode:
                self._open = None
            self._save()

    def close(self) -> None:
        """Close the open episode (``aborted``), then the file (summary, indexes) and session.json."""
        with self._lock:
            if self._index["status"] != IN_PROGRESS:
                return
            if self._open is not None:
                self._open.close(ABORTED, "the session was closed before the episode ended")
            try:
                self.writer.close()
            finally:
                self._index["status"] = COMPLETE
                self._index["ended_at"] = now_iso()
                self._save()

    def __enter__(self) -> "SessionRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def find_sessions(paths) -> list[Path]:
    """Session folders (holding session.json) at or below ``paths``."""
    out: set[Path] = set()
    for root in paths:
        root = Path(root)
        hits = [root / SESSION_JSON] if (root / SESSION_JSON).is_file() else sorted(root.rglob(SESSION_JSON))
        out.update(p.parent for p in hits)
    return sorted(out)


def session_status(directory: str | Path) -> str:
    """session.json's status (``in_progress`` until the session is closed or recovered)."""
    path = Path(directory) / SESSION_JSON
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("status"))
    except (OSError, json.JSONDecodeError, AttributeError) as exc:
        raise RolloutError(f"cannot read {path}: {exc}") from exc


def recover_session(directory: str | Path) -> dict[str, Any]:
    """Finish a session whose recorder died: rebuild session.mcap's summary and indexes (every complete chunk
    kept), finish its open episode (``cut_short``), bring session.json up to date and mark it ``cut_short``.

    A no-op on a closed session; RolloutError while its recorder still runs or for an unreadable session.json.
    """
    directory = Path(directory)
    path = directory / SESSION_JSON
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RolloutError(f"cannot read {path}: {exc}") from exc
    if not isinstance(index, dict) or index.get("format") != SESSION_FORMAT:
        raise RolloutError(f'{path} is not a session index (expected "format": "{SESSION_FORMAT}")')
    if index.get("status") != IN_PROGRESS:
        return index
    if writer_alive(index.get("writer")):
        raise RolloutError(f"session {directory} is still being recorded by pid {index['writer']['pid']}")
    bag = directory / str(index.get("bag") or SESSION_BAG)
    if bag.exists():
        recover_mcap(bag)
    for folder in find_unfinished([directory]):
        recover_rollout(folder)
    for entry in index.get("episodes", []):
        folder = directory / str(entry.get("folder", ""))
        if (folder / JSON_NAME).is_file():
            record = load_rollout(folder)
            entry.update(end_ns=record.info.bag.end_ns, status=record.status, messages=record.info.bag.messages)
    index["status"] = CUT_SHORT
    index["recovered_at"] = now_iso()
    write_json_atomic(path, index)
    return index
