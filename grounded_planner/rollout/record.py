"""One folder per episode: rollout.json (what happened, rewritten atomically) + rollout.mcap (the sensor log).

The recorder is crash-safe: rollout.json is written at the start with ``"status": "in_progress"`` and
replaced atomically (temp file + rename) on every state change, and every bag message is in the kernel
the moment its ``log_*`` call returns. A process killed with SIGKILL therefore leaves a bag readable up to
its last message and a rollout.json whose status is still ``in_progress`` — :func:`load_rollout` reports
such a record as cut short; ``grounded-planner rollouts recover`` finalises the bag and sets the status
to ``cut_short``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from grounded_planner.msgs.execution import attempt_outcome_msg, execution_event_msg, execution_result_msg
from grounded_planner.plan import GroundedAction, GroundedPlan, TargetSet
from grounded_planner.rollout.bag import (
    BagError, McapBagWriter, camera_info_msg, depth_msg, image_msg, joint_state_msg, plan_msg, recover_mcap,
    string_msg, typestore, write_empty_mcap,
)
from grounded_planner import fileio
from grounded_planner.rollout.taxonomy import auto_failure_mode, check_failure_mode

FORMAT = "grounded_planner.rollout/1"
JSON_NAME = "rollout.json"
BAG_NAME = "rollout.mcap"
# Status values in rollout.json.
IN_PROGRESS, COMPLETE, ABORTED, CUT_SHORT = "in_progress", "complete", "aborted", "cut_short"
STATUSES = (IN_PROGRESS, COMPLETE, ABORTED, CUT_SHORT)


class RolloutError(ValueError):
    """A rollout folder or record that is missing, malformed or used out of order (names the path)."""


@dataclass(frozen=True)
class RolloutTopics:
    """Bag topics of a rollout (realsense-ros names for the camera)."""

    color: str = "/camera/camera/color/image_raw"                       # sensor_msgs/Image rgb8
    depth: str = "/camera/camera/aligned_depth_to_color/image_raw"      # sensor_msgs/Image 16UC1, 1 mm
    camera_info: str = "/camera/camera/color/camera_info"               # sensor_msgs/CameraInfo
    instruction: str = "/grounded_planner/instruction"                  # std_msgs/String (plain text)
    plan: str = "/grounded_planner/plan"                                # grounded_planner_interfaces/GroundedPlan
    targets: str = "/grounded_planner/targets"                          # grounded_planner_interfaces/GroundedPlan,
    #                                                                     the plan with its 3D targets inside
    feedback: str = "/grounded_planner/execution/feedback"              # grounded_planner_interfaces/ExecutionEvent
    result: str = "/grounded_planner/execution/result"                  # grounded_planner_interfaces/ExecutionResult
    joint_states: str = "/joint_states"                                 # sensor_msgs/JointState
    events: str = "/grounded_planner/rollout/events"                    # std_msgs/String JSON (labels, notes)
    attempts: str = "/grounded_planner/execution/attempts"              # grounded_planner_interfaces/StepOutcome,
    #                                                                     closed loop: every try of every step


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def config_hash(config: Any) -> str:
    """First 16 hex digits of the SHA-256 of the config as canonical JSON (dataclasses and dicts)."""
    if config is None:
        return ""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _to_plain(value: Any) -> Any:
    """Objects with ``to_dict`` (plans, target sets, results), dataclasses and numpy values -> JSON values."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "to_dict"):
        return _to_plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise RolloutError(f"cannot store a {type(value).__name__} in rollout.json (expected JSON-like data)")


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that a crash leaves either the old or the new file, never half of one."""
    fileio.write_json_atomic(path, data, fsync=True)  # fsynced: rollout.json outlives a power loss too


class RolloutRecorder:
    """Record one episode into ``directory`` (created; must not hold a rollout already).

    Thread-safe: ROS callbacks may log from several threads. Use as a context manager, or call
    :meth:`close`; an exception inside the ``with`` block closes the record as ``aborted`` with the error.

    Parameters
    ----------
    directory : path
        The episode folder; rollout.json and rollout.mcap go inside.
    instruction, task, condition, scene_id : str
        What was asked, the task family, the evaluation condition (e.g. ``original`` / ``paraphrased``)
        and the physical scene setup; ``scene_id`` pairs rollouts across conditions in the summary.
    trial : int
        Repeat index of this scene under this condition (pairs the k-th repeat with the k-th).
    expects_action : bool
        False for no-intervention trials, where success means the robot does not move.
    model : str
        The planner model name.
    config : dict or dataclass, optional
        Stored in rollout.json with its hash, to tell apart runs with different settings.
    episode_id : str, optional
        Defaults to the folder name.
    fsync_every_s : float or None
        Also fsync the bag at most this often (power-loss safety; SIGKILL safety needs no fsync).
    clock_ns : callable, optional
        Log-time source in ns (bag order); default the wall clock, kept non-decreasing. Must not go back.
    """

    def __init__(self, directory: str | Path, *, instruction: str = "", task: str = "", condition: str = "",
                 scene_id: str = "", trial: int = 0, expects_action: bool = True, model: str = "",
                 config: Any = None, episode_id: str | None = None, notes: str = "",
                 topics: RolloutTopics | None = None, fsync_every_s: float | None = 1.0,
                 extra: Mapping[str, Any] | None = None, clock_ns: Callable[[], int] | None = None):
        self.directory = Path(directory)
        if (self.directory / JSON_NAME).exists() or (self.directory / BAG_NAME).exists():
            raise RolloutError(f"{self.directory} already holds a rollout; use a new folder per episode")
        if not isinstance(trial, int) or trial < 0:
            raise RolloutError(f"trial must be a non-negative integer, got {trial!r}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.topics = topics or RolloutTopics()
        self._clock_ns = clock_ns
        self._lock = threading.RLock()
        self._t0 = time.monotonic()
        self._data: dict[str, Any] = {
            "format": FORMAT,
            "episode_id": episode_id or self.directory.name,
            "status": IN_PROGRESS,
            "started_at": _now_iso(),
            "updated_at": _now_iso(),
            "ended_at": None,
            "writer": {"pid": os.getpid(), "host": socket.gethostname()},
            "instruction": instruction,
            "task": task,
            "condition": condition,
            "scene_id": scene_id,
            "trial": trial,
            "expects_action": bool(expects_action),
            "model": model,
            "config_hash": config_hash(config),
            "config": _to_plain(config) if config is not None else None,
            "plan": None,
            "targets": None,
            "steps": [],
            "attempts": [],
            "plans": [],
            "execution": None,
            "planner_error": "",
            "timings_s": {},
            "success": None,
            "failure_mode": None,
            "label_source": None,
            "notes": notes,
            "error": "",
            "bag": {"file": BAG_NAME, "messages": 0},
            "extra": _to_plain(dict(extra or {})),
        }
        self._bag = McapBagWriter(self.directory / BAG_NAME, fsync_every_s=fsync_every_s)
        self._flush_json()
        if instruction:
            self.log_instruction(instruction)

    # -- state -----------------------------------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        """A copy of what rollout.json holds now."""
        with self._lock:
            return json.loads(json.dumps(self._data))

    @property
    def closed(self) -> bool:
        return self._data["status"] != IN_PROGRESS

    def _flush_json(self) -> None:
        self._data["updated_at"] = _now_iso()
        self._data["bag"]["messages"] = self._bag.message_count
        write_json_atomic(self.directory / JSON_NAME, self._data)

    def _check_open(self) -> None:
        if self.closed:
            raise RolloutError(f"rollout {self.directory} is closed ({self._data['status']})")

    def _write(self, topic: str, msg: Any) -> int:
        with self._lock:
            self._check_open()
            return self._bag.write(topic, msg, log_time_ns=self._clock_ns() if self._clock_ns else None)

    def _stamp(self, stamp_ns: int | None) -> int:
        if stamp_ns is not None:
            return int(stamp_ns)
        return self._clock_ns() if self._clock_ns else time.time_ns()

    # -- sensors -----------------------------------------------------------------------------------
    def log_color(self, rgb: np.ndarray, stamp_ns: int | None = None,
                  frame_id: str = "camera_color_optical_frame") -> None:
        """(H, W, 3) uint8 RGB image -> sensor_msgs/Image rgb8 on ``topics.color``."""

        self._write(self.topics.color, image_msg(rgb, self._stamp(stamp_ns), frame_id))

    def log_depth(self, depth: np.ndarray, stamp_ns: int | None = None,
                  frame_id: str = "camera_color_optical_frame", depth_unit_m: float = 0.001) -> None:
        """(H, W) depth (float metres or uint16 counts of ``depth_unit_m``) -> 16UC1 image on ``topics.depth``."""

        self._write(self.topics.depth, depth_msg(depth, self._stamp(stamp_ns), frame_id, depth_unit_m))

    def log_camera_info(self, K: Sequence[float] | np.ndarray, width: int, height: int, D: Sequence[float] = (),
                        distortion_model: str = "plumb_bob", stamp_ns: int | None = None,
                        frame_id: str = "camera_color_optical_frame") -> None:
        """Intrinsics (3x3 ``K`` in pixels, distortion ``D``) -> sensor_msgs/CameraInfo on ``topics.camera_info``."""

        self._write(self.topics.camera_info, camera_info_msg(K, width, height, self._stamp(stamp_ns), D,
                                                             distortion_model, frame_id))

    def log_camera(self, camera: Any, stamp_ns: int | None = None) -> None:
        """A geometry ``CameraModel`` (fields K, D, width, height, distortion_model, frame_id) as CameraInfo."""
        self.log_camera_info(np.asarray(camera.K), camera.width, camera.height, list(np.ravel(camera.D)),
                             camera.distortion_model, stamp_ns,
                             getattr(camera, "frame_id", "") or "camera_color_optical_frame")

    def log_frame(self, rgb: np.ndarray, depth: np.ndarray | None = None, camera: Any = None,
                  stamp_ns: int | None = None) -> None:
        """Color, aligned depth and camera info of one instant, all with the same header stamp."""
        stamp = self._stamp(stamp_ns)
        self.log_color(rgb, stamp)
        if depth is not None:
            self.log_depth(depth, stamp)
        if camera is not None:
            self.log_camera(camera, stamp)

    def log_joint_state(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float] = (),
                        effort: Sequence[float] = (), stamp_ns: int | None = None) -> None:
        self._write(self.topics.joint_states, joint_state_msg(names, position, self._stamp(stamp_ns), velocity, effort))

    def log_message(self, topic: str, msg: Any) -> None:
        """Any rosbags message object (built from ``grounded_planner.rollout.bag.typestore()``)."""
        self._write(topic, msg)

    # -- planning and execution -------------------------------------------------------------------
    def log_instruction(self, instruction: str) -> None:
        with self._lock:
            self._write(self.topics.instruction, string_msg(instruction))
            if instruction != self._data["instruction"]:
                self._data["instruction"] = instruction
                self._flush_json()

    def log_plan(self, plan: Any, stamp_ns: int | None = None, planning_time_s: float | None = None) -> None:
        """The planner's GroundedPlan (plan model) -> rollout.json ``plan`` and a GroundedPlan message."""

        with self._lock:
            self._write(self.topics.plan, plan_msg(plan, self._stamp(stamp_ns)))
            self._data["plan"] = _to_plain(plan)
            if not self._data["model"] and getattr(plan, "model", ""):
                self._data["model"] = plan.model
            if planning_time_s is not None:
                self._data["timings_s"]["plan"] = float(planning_time_s)
            self._flush_json()

    def log_warning(self, message: str) -> None:
        """Something the episode's data could not be used for (a camera_info with an unknown distortion model,
        an undecodable frame): kept once in rollout.json ``warnings`` so that an analysis sees why."""
        with self._lock:
            self._check_open()
            warnings = self._data.setdefault("warnings", [])
            if str(message) not in warnings:
                warnings.append(str(message))
                self._flush_json()

    def log_planner_error(self, message: str) -> None:
        """The planner failed (unreachable server, invalid answer): the episode fails as ``planner_error``."""
        with self._lock:
            self._check_open()
            self._data["planner_error"] = str(message) or "planner error"
            self._flush_json()

    def log_targets(self, targets: Any) -> None:
        """3D targets (a ``TargetSet`` or its ``to_dict()``) -> rollout.json, and the logged plan with its targets
        inside as a GroundedPlan message on ``topics.targets``."""
        with self._lock:
            payload = _to_plain(targets)
            self._write(self.topics.targets, plan_msg(self._plan_with_targets(payload), self._stamp(None)))
            self._data["targets"] = payload
            self._flush_json()

    def _plan_with_targets(self, targets: Mapping[str, Any]) -> GroundedPlan:
        """The logged plan with the targets it has (by action index); an empty plan when none was logged."""
        data = self._data.get("plan")
        plan = GroundedPlan.from_dict(data, validate=False) if isinstance(data, dict) else \
            GroundedPlan(str(self._data.get("instruction", "")), (1, 1), [], reason="no plan logged")
        target_set = TargetSet.from_dict(targets)
        by_index = {int(t.index): t for t in target_set.targets}
        for i, action in enumerate(plan.actions):
            target = by_index.get(i)
            action.target_3d = target if target is not None and target.type == action.type else None
        return plan

    def log_feedback(self, step_index: int, state: str, action: Any = None, message: str = "") -> None:
        """One executor feedback event as an ExecutionEvent message (bag only; rollout.json keeps the outcomes)."""
        if isinstance(action, Mapping):
            action = GroundedAction.from_dict(dict(action))
        self._write(self.topics.feedback, execution_event_msg(typestore().types, step_index, state, action, message,
                                                              stamp_ns=self._stamp(None)))

    def log_step(self, index: int, type: str, outcome: str, message: str = "") -> None:
        """A finished step's outcome (``ok``, ``grasp_failed``, ...) as it happens, before the final result."""
        with self._lock:
            self._check_open()
            self._data["steps"] = [s for s in self._data["steps"] if s.get("index") != index]
            self._data["steps"].append({"index": int(index), "type": type, "outcome": outcome, "message": message,
                                        "t_s": round(time.monotonic() - self._t0, 6)})
            self._data["steps"].sort(key=lambda s: s["index"])
            self._flush_json()

    def log_attempt(self, attempt: Any) -> None:
        """One closed-loop try of a step (an ``Attempt`` or its dict: step, attempt, type, outcome, check, message,
        duration_s, ...) -> rollout.json ``attempts`` and a StepOutcome message on ``topics.attempts``."""

        with self._lock:
            payload = _to_plain(attempt)
            self._write(self.topics.attempts, attempt_outcome_msg(typestore().types, payload))
            self._data["attempts"].append({**payload, "t_s": round(time.monotonic() - self._t0, 6)})
            self._flush_json()

    def log_replan(self, plan: Any, reason: str = "", stamp_ns: int | None = None) -> None:
        """A new plan made during the episode (closed loop): appended to rollout.json ``plans`` and written as a
        GroundedPlan message on ``topics.plan``; the first plan stays in ``plan``."""

        with self._lock:
            self._write(self.topics.plan, plan_msg(plan, self._stamp(stamp_ns)))
            self._data["plans"].append({"reason": reason, "plan": _to_plain(plan),
                                        "t_s": round(time.monotonic() - self._t0, 6)})
            self._flush_json()

    def log_result(self, result: Any, execution_time_s: float | None = None) -> None:
        """The executor's ExecutionResult (or its ``to_dict()``): stored, its steps become the step list, and an
        ExecutionResult message goes into the bag."""
        with self._lock:
            payload = _to_plain(result)
            if not isinstance(payload, dict):
                raise RolloutError(f"execution result must be a dict or have to_dict(), got {type(result).__name__}")
            outcome = SimpleNamespace(success=bool(payload.get("success")), message=str(payload.get("message", "")),
                                      steps=[s for s in payload.get("steps") or [] if isinstance(s, Mapping)])
            scene = payload.get("scene_success")
            self._write(self.topics.result, execution_result_msg(
                typestore().types, outcome, self._data.get("instruction", ""), bool(payload.get("dry_run", False)),
                scene if isinstance(scene, bool) else None, str(payload.get("condition") or "open_loop"),
                int(payload.get("replans") or 0), stamp_ns=self._stamp(None)))
            self._data["execution"] = payload
            if isinstance(payload.get("steps"), list):
                self._data["steps"] = payload["steps"]
            if execution_time_s is not None:
                self._data["timings_s"]["execute"] = float(execution_time_s)
            self._flush_json()

    def set_timing(self, name: str, seconds: float) -> None:
        with self._lock:
            self._check_open()
            self._data["timings_s"][str(name)] = float(seconds)
            self._flush_json()

    def set_label(self, success: bool | None, failure_mode: str | None = None, notes: str | None = None,
                  source: str = "human") -> None:
        """Success and failure mode, if known while recording (e.g. an automatic success check in sim)."""
        check_failure_mode(failure_mode)
        if success and failure_mode:
            raise RolloutError(f"a successful rollout has no failure mode (got {failure_mode!r})")
        with self._lock:
            self._data["success"] = success
            self._data["failure_mode"] = failure_mode
            self._data["label_source"] = source if success is not None else None
            if notes is not None:
                self._data["notes"] = notes
            self._flush_json()

    # -- closing ---------------------------------------------------------------------------------
    def close(self, status: str = COMPLETE, error: str = "") -> dict[str, Any]:
        """Finalise the bag and rollout.json; fills success/failure mode where the stack knows them.

        Returns the final rollout.json content. Calling it twice is harmless.
        """
        if status not in (COMPLETE, ABORTED):
            raise RolloutError(f"close status must be {COMPLETE!r} or {ABORTED!r}, got {status!r}")
        with self._lock:
            if self.closed:
                return self.data
            self._bag.close()
            self._data["status"] = status
            self._data["error"] = error
            self._data["ended_at"] = _now_iso()
            self._data["timings_s"]["total"] = round(time.monotonic() - self._t0, 6)
            success, mode = auto_failure_mode(self._data["execution"], self._data["plan"],
                                              self._data["planner_error"], self._data["expects_action"])
            if self._data["success"] is None and success is not None:
                self._data["success"], self._data["failure_mode"] = success, mode
                self._data["label_source"] = "auto"
            elif self._data["success"] is False and not self._data["failure_mode"] and mode:
                # e.g. a simulator said "failed" and the executor knows why
                self._data["failure_mode"] = mode
            self._flush_json()
            return self.data

    def __enter__(self) -> "RolloutRecorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close(COMPLETE)
        else:
            self.close(ABORTED, error=f"{exc_type.__name__}: {exc}")


# -- reading records ---------------------------------------------------------------------------------
@dataclass
class RolloutRecord:
    """A rollout folder read back: its rollout.json content and where it lives."""

    directory: Path
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def json_path(self) -> Path:
        return self.directory / JSON_NAME

    @property
    def bag_path(self) -> Path:
        return self.directory / str(self.data.get("bag", {}).get("file") or BAG_NAME)

    @property
    def episode_id(self) -> str:
        return str(self.data.get("episode_id") or self.directory.name)

    @property
    def status(self) -> str:
        return str(self.data.get("status"))

    @property
    def cut_short(self) -> bool:
        """True when the writer never closed the episode (killed, crashed, or still recording)."""
        return self.status in (IN_PROGRESS, CUT_SHORT)

    @property
    def success(self) -> bool | None:
        return self.data.get("success")

    @property
    def failure_mode(self) -> str | None:
        return self.data.get("failure_mode")

    @property
    def labelled(self) -> bool:
        """Success known, and for a failure its failure mode too."""
        return self.success is True or (self.success is False and bool(self.failure_mode))

    def writer_alive(self) -> bool:
        """Is the process that wrote this record still running (same host only; False elsewhere)?"""
        writer = self.data.get("writer") or {}
        if self.status != IN_PROGRESS or writer.get("host") != socket.gethostname():
            return False
        try:
            os.kill(int(writer.get("pid", -1)), 0)
        except (OSError, ValueError):
            return False
        return True

    def save_label(self, success: bool, failure_mode: str | None, notes: str | None = None,
                   source: str = "human") -> None:
        """Write a label into rollout.json (atomically)."""
        check_failure_mode(failure_mode)
        if success and failure_mode:
            raise RolloutError(f"{self.directory}: a successful rollout has no failure mode (got {failure_mode!r})")
        if not success and not failure_mode:
            raise RolloutError(f"{self.directory}: a failed rollout needs a failure mode")
        self.data["success"] = bool(success)
        self.data["failure_mode"] = failure_mode
        self.data["label_source"] = source
        self.data["labelled_at"] = _now_iso()
        if notes is not None:
            self.data["notes"] = notes
        write_json_atomic(self.json_path, self.data)


def load_rollout(directory: str | Path) -> RolloutRecord:
    """Read ``directory/rollout.json``; raises :class:`RolloutError` naming the file when it is unusable."""
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
    if not isinstance(data, dict) or data.get("format", FORMAT) != FORMAT:
        raise RolloutError(f"{path} is not a rollout record (expected a JSON object with \"format\": \"{FORMAT}\")")
    # Hand-written records (no format/status) are read as finished episodes; what they do say is checked.
    data.setdefault("status", COMPLETE)
    if data["status"] not in STATUSES:
        raise RolloutError(f"{path}: unknown status {data['status']!r} (expected one of {', '.join(STATUSES)})")
    if data.get("success") not in (None, True, False):
        raise RolloutError(f"{path}: 'success' must be true, false or null, got {data['success']!r}")
    try:
        check_failure_mode(data.get("failure_mode"))
    except ValueError as exc:
        raise RolloutError(f"{path}: {exc}") from exc
    if data.get("success") is True and data.get("failure_mode"):
        raise RolloutError(f"{path}: a successful rollout has no failure mode (got {data['failure_mode']!r})")
    return RolloutRecord(directory, data)


def find_rollouts(paths: Iterable[str | Path]) -> list[RolloutRecord]:
    """Every rollout folder at or below ``paths`` (a folder holding rollout.json), sorted by path."""
    found: dict[Path, RolloutRecord] = {}
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise RolloutError(f"{root} does not exist")
        jsons = [root / JSON_NAME] if (root / JSON_NAME).is_file() else sorted(root.rglob(JSON_NAME))
        for path in jsons:
            found.setdefault(path.parent.resolve(), load_rollout(path.parent))
    return [found[k] for k in sorted(found)]


def _orphan_record(directory: Path) -> RolloutRecord:
    """The record of a folder whose recorder died before rollout.json was first written (the bag comes first)."""
    data = {"format": FORMAT, "episode_id": directory.name, "status": IN_PROGRESS, "started_at": None,
            "ended_at": None, "writer": {}, "instruction": "", "task": "", "condition": "", "scene_id": "",
            "trial": 0, "expects_action": True, "model": "", "plan": None, "targets": None, "steps": [],
            "execution": None, "planner_error": "", "timings_s": {}, "success": None, "failure_mode": None,
            "label_source": None, "notes": "", "error": "", "bag": {"file": BAG_NAME, "messages": 0}, "extra": {}}
    return RolloutRecord(directory, data)


def recover_rollout(directory: str | Path) -> RolloutRecord:
    """Finalise a cut-short rollout: close its bag (summary + footer), count its messages again and set status
    ``cut_short`` with the reason in ``recovery.reason`` (and ``error`` when empty).

    Every folder ends finished: one whose recorder died before its first complete message gets an empty but
    valid bag, one whose rollout.json was never written gets one, and an unreadable bag is kept aside as
    ``rollout.mcap.corrupt`` next to an empty one. Raises RolloutError only while the writer is still alive.
    """

    directory = Path(directory)
    reasons = []
    if not (directory / JSON_NAME).exists() and (directory / BAG_NAME).exists():
        record = _orphan_record(directory)
        reasons.append(f"{JSON_NAME} was never written (the recorder stopped while starting)")
    else:
        record = load_rollout(directory)
    if record.status != IN_PROGRESS:
        return record
    if record.writer_alive():
        raise RolloutError(f"{record.directory} is still being recorded by pid {record.data['writer']['pid']}")
    bag = record.bag_path
    try:
        scan = recover_mcap(bag) if bag.exists() else None
    except BagError as exc:
        corrupt = bag.with_name(bag.name + ".corrupt")
        os.replace(bag, corrupt)
        scan = None
        reasons.append(f"the bag was unreadable ({exc}); kept as {corrupt.name}")
    if scan is None:
        if not reasons:
            reasons.append("no bag was written")
        scan = write_empty_mcap(bag)
    if scan.message_count == 0:
        reasons.append("the recorder stopped before its first complete message")
    elif scan.dropped_bytes:
        reasons.append(f"the last message was cut ({scan.dropped_bytes} bytes dropped)")
    reason = "; ".join(["the recorder stopped without closing the rollout (killed or crashed)"] + reasons)
    record.data["status"] = CUT_SHORT
    record.data["ended_at"] = None
    record.data["recovered_at"] = _now_iso()
    record.data["bag"] = {**(record.data.get("bag") or {}), "file": bag.name, "messages": scan.message_count}
    record.data["recovery"] = {"reason": reason, "bag_messages": scan.message_count, "dropped_bytes": scan.dropped_bytes}
    record.data["error"] = record.data.get("error") or reason
    write_json_atomic(record.json_path, record.data)
    return record


def find_unfinished(paths: Iterable[str | Path]) -> list[Path]:
    """Folders at or below ``paths`` that ``recover`` should finish: rollout.json says ``in_progress``, or a
    bag lies there without rollout.json (unreadable rollout.json files raise RolloutError naming them)."""
    found: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise RolloutError(f"{root} does not exist")
        for name in (JSON_NAME, BAG_NAME):
            hits = [root / name] if (root / name).is_file() else sorted(root.rglob(name))
            found.update(path.parent for path in hits)
    out = []
    for directory in sorted(found):
        if not (directory / JSON_NAME).exists() or load_rollout(directory).status == IN_PROGRESS:
            out.append(directory)
    return out
