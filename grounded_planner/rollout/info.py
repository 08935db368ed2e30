"""rollout.json as one typed record: :class:`RolloutInfo`, read back typed and written in one place (:func:`write_info`).

Format history: ``grounded_planner.rollout/1`` (until the `mcap` library wrote the bags) and hand-written records
without ``format`` read as they are; :data:`FORMAT` is what is written now. Keys a version does not know are
kept in ``other`` and written back unchanged, so an older reader's record survives a newer tool's label.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from grounded_planner import fileio
from grounded_planner.errors import InputError
from grounded_planner.rollout.taxonomy import check_failure_mode

FORMAT_VERSION = 2
FORMAT = f"grounded_planner.rollout/{FORMAT_VERSION}"
FORMATS_READ = ("grounded_planner.rollout/1", FORMAT)
JSON_NAME = "rollout.json"
BAG_NAME = "rollout.mcap"
# Status values in rollout.json.
IN_PROGRESS, COMPLETE, ABORTED, CUT_SHORT = "in_progress", "complete", "aborted", "cut_short"
STATUSES = (IN_PROGRESS, COMPLETE, ABORTED, CUT_SHORT)


class RolloutError(InputError):
    """A rollout folder or record that is missing, malformed or used out of order (names the path)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def config_hash(config: Any) -> str:
    """First 16 hex digits of the SHA-256 of the config as canonical JSON (dataclasses and dicts)."""
    if config is None:
        return ""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def to_plain(value: Any) -> Any:
    """Objects with ``to_dict`` (plans, target sets, results), dataclasses and numpy values -> JSON values."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "to_dict"):
        return to_plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise RolloutError(f"cannot store a {type(value).__name__} in rollout.json (expected JSON-like data)")


@dataclass
class BagRef:
    """Where an episode's messages are: its own bag, or a window of a session's bag shared by many episodes."""

    file: str = BAG_NAME  # relative to the episode folder (a session's: ``../session.mcap``)
    messages: int = 0  # messages of this episode in it
    start_ns: int | None = None  # session only: the episode's log-time window [start_ns, end_ns)
    end_ns: int | None = None
    session: str | None = None  # session only: the session id (its folder name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "messages": self.messages}
        if self.session is not None:
            out.update(start_ns=self.start_ns, end_ns=self.end_ns, session=self.session)
        return out

    @classmethod
    def from_json(cls, data: Any) -> "BagRef":
        data = data if isinstance(data, Mapping) else {}
        return cls(
            str(data.get("file") or BAG_NAME),
            int(data.get("messages") or 0),
            _opt_int(data.get("start_ns")),
            _opt_int(data.get("end_ns")),
            None if data.get("session") is None else str(data["session"]),
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass
class RolloutInfo:
    """Everything rollout.json says about one episode (field order = key order in the file)."""

    format: str = FORMAT
    episode_id: str = ""
    status: str = IN_PROGRESS  # in_progress, complete, aborted, cut_short
    started_at: str | None = None  # ISO 8601 UTC
    updated_at: str | None = None
    ended_at: str | None = None
    writer: dict[str, Any] = field(default_factory=dict)  # {"pid", "host"} of the recording process
    instruction: str = ""
    task: str = ""
    condition: str = ""
    scene_id: str = ""  # pairs rollouts of one scene across conditions
    trial: int = 0  # repeat index of the scene under the condition
    expects_action: bool = True  # False: a no-intervention trial
    model: str = ""
    config_hash: str = ""
    config: Any = None
    plan: dict[str, Any] | None = None  # the first plan (GroundedPlan.to_dict())
    targets: dict[str, Any] | None = None  # TargetSet.to_dict()
    steps: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # closed loop: every try of every step
    plans: list[dict[str, Any]] = field(default_factory=list)  # closed loop: replans
    execution: dict[str, Any] | None = None  # ExecutionResult.to_dict()
    planner_error: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)
    success: bool | None = None
    failure_mode: str | None = None
    label_source: str | None = None  # auto, simulator, human, ...
    labelled_at: str | None = None
    notes: str = ""
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    bag: BagRef = field(default_factory=BagRef)
    recording: dict[str, Any] = field(default_factory=dict)  # image transport, compression, chunking used
    extra: dict[str, Any] = field(default_factory=dict)
    recovered_at: str | None = None
    recovery: dict[str, Any] | None = None  # {"reason", "bag_messages", "dropped_bytes"} after `rollouts recover`
    other: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "other":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.to_json() if isinstance(value, BagRef) else value
        for key in ("labelled_at", "recovered_at", "recovery"):  # only once they happened
            if out[key] is None:
                del out[key]
        out.update(self.other)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str | Path = "rollout.json") -> "RolloutInfo":
        """A record from rollout.json's content; raises RolloutError naming ``where`` and the bad field."""
        if not isinstance(data, Mapping) or data.get("format", FORMAT) not in FORMATS_READ:
            raise RolloutError(f'{where} is not a rollout record (expected a JSON object with "format": "{FORMAT}")')
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {"other": {k: v for k, v in data.items() if k not in known or k == "other"}}
        kwargs["format"] = str(data.get("format") or FORMAT)
        kwargs["status"] = data.get("status", COMPLETE)  # hand-written records (no status) are finished episodes
        for name in known:
            if name in data and name not in ("other", "format", "status"):
                kwargs[name] = data[name]
        info = cls(**kwargs)
        info.bag = BagRef.from_json(data.get("bag"))
        info._check(where)
        return info

    def _check(self, where: str | Path) -> None:
        if self.status not in STATUSES:
            raise RolloutError(f"{where}: unknown status {self.status!r} (expected one of {', '.join(STATUSES)})")
        if self.success not in (None, True, False):
            raise RolloutError(f"{where}: 'success' must be true, false or null, got {self.success!r}")
        try:
            check_failure_mode(self.failure_mode)
        except ValueError as exc:
            raise RolloutError(f"{where}: {exc}") from exc
        if self.success is True and self.failure_mode:
            raise RolloutError(f"{where}: a successful rollout has no failure mode (got {self.failure_mode!r})")
        if not isinstance(self.trial, int) or isinstance(self.trial, bool) or self.trial < 0:
            raise RolloutError(f"{where}: 'trial' must be a non-negative integer, got {self.trial!r}")
        for name in ("steps", "attempts", "plans", "warnings"):
            if not isinstance(getattr(self, name), list):
                raise RolloutError(f"{where}: {name!r} must be a list, got {type(getattr(self, name)).__name__}")
        for name in ("timings_s", "extra", "writer", "recording"):
            if not isinstance(getattr(self, name), dict):
                raise RolloutError(f"{where}: {name!r} must be an object, got {type(getattr(self, name)).__name__}")


def writer_alive(writer: Mapping[str, Any] | None) -> bool:
    """Is the recording process ``{"pid", "host"}`` still running (same host only; False elsewhere)?"""
    writer = writer or {}
    if writer.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(writer.get("pid", -1)), 0)
    except (OSError, ValueError):
        return False
    return True


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that a crash leaves either the old or the new file, never half of one."""
    fileio.write_json_atomic(path, data, fsync=True)  # fsynced: rollout.json outlives a power loss too


def write_info(directory: str | Path, info: RolloutInfo) -> None:
    """THE place rollout.json is written (recorder, recovery, labels, sim and CLI all come here): atomically,
    with ``updated_at`` and the current format."""
    info.updated_at = now_iso()
    info.format = FORMAT
    write_json_atomic(Path(directory) / JSON_NAME, info.to_json())


def read_info(directory: str | Path) -> RolloutInfo:
    """``directory/rollout.json`` as a :class:`RolloutInfo`; RolloutError naming the file when it is unusable."""
    directory = Path(directory)
    path = directory / JSON_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RolloutError(f"{directory} is not a rollout folder (no {JSON_NAME})") from exc
    except UnicodeDecodeError as exc:
        raise RolloutError(f"cannot read {path}: not UTF-8 text (byte offset {exc.start})") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise RolloutError(f"cannot read {path}: {exc}") from exc
    return RolloutInfo.from_json(data, path)
