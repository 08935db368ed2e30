"""One folder per episode: rollout.json (what happened, rewritten atomically) + rollout.mcap (the sensor log).

The recorder is crash-safe with bounded loss: rollout.json is written at the start with ``"status":
"in_progress"`` and replaced atomically on every state change, and the bag's chunks reach the kernel at
least every ``chunk_interval_s`` (0.5 s by default; see :mod:`grounded_planner.rollout.bag_write`). A process
killed with SIGKILL therefore leaves a bag readable up to its last complete chunk and a rollout.json whose
status is still ``in_progress`` — :func:`load_rollout` reports such a record as cut short; ``grounded-planner
rollouts recover`` rebuilds the bag's summary and indexes and sets the status to ``cut_short``.

Inside a recording session (:mod:`grounded_planner.rollout.session`) the episode folder holds rollout.json
only, and its ``bag`` names the session's file and the episode's log-time window in it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from grounded_planner.msgs import images
from grounded_planner.msgs.execution import attempt_outcome_msg, execution_event_msg, execution_result_msg
from grounded_planner.plan import GroundedAction, GroundedPlan, TargetSet
from grounded_planner.rollout.bag import (
    BagError,
    BagMessage,
    BagWriteError,
    camera_info_msg,
    compressed_depth_msg,
    compressed_image_msg,
    depth_msg,
    header_msg,
    image_msg,
    joint_state_msg,
    plan_msg,
    read_bag,
    string_msg,
    typestore,
)
from grounded_planner.rollout.bag_read import bag_info, has_footer
from grounded_planner.rollout.bag_recover import recover_mcap, write_empty_mcap
from grounded_planner.rollout.bag_write import BagOptions, McapBagWriter
from grounded_planner.rollout.info import (  # noqa: F401 (the record's names, re-exported for callers)
    ABORTED,
    BAG_NAME,
    COMPLETE,
    CUT_SHORT,
    FORMAT,
    FORMAT_VERSION,
    IN_PROGRESS,
    JSON_NAME,
    STATUSES,
    BagRef,
    RolloutError,
    RolloutInfo,
    config_hash,
    now_iso,
    read_info,
    to_plain,
    write_info,
    write_json_atomic,
    writer_alive,
)
from grounded_planner.rollout.taxonomy import auto_failure_mode, check_failure_mode

IMAGE_TRANSPORTS = ("compressed", "raw")


@dataclass(frozen=True)
class RolloutTopics:
    """Bag topics of a rollout (realsense-ros names for the camera; image_transport's suffixes when compressed)."""

    color: str = "/camera/camera/color/image_raw"  # sensor_msgs/Image rgb8 (raw)
    depth: str = "/camera/camera/aligned_depth_to_color/image_raw"  # sensor_msgs/Image 16UC1, 1 mm (raw)
    camera_info: str = "/camera/camera/color/camera_info"  # sensor_msgs/CameraInfo
    instruction: str = "/grounded_planner/instruction"  # std_msgs/String (plain text)
    plan: str = "/grounded_planner/plan"  # grounded_planner_interfaces/GroundedPlan
    targets: str = "/grounded_planner/targets"  # grounded_planner_interfaces/GroundedPlan,
    #                                                                     the plan with its 3D targets inside
    feedback: str = "/grounded_planner/execution/feedback"  # grounded_planner_interfaces/ExecutionEvent
    result: str = "/grounded_planner/execution/result"  # grounded_planner_interfaces/ExecutionResult
    joint_states: str = "/joint_states"  # sensor_msgs/JointState
    events: str = "/grounded_planner/rollout/events"  # std_msgs/String JSON (labels, notes)
    attempts: str = "/grounded_planner/execution/attempts"  # grounded_planner_interfaces/StepOutcome,
    #                                                                     closed loop: every try of every step
    episodes: str = "/grounded_planner/rollout/episode"  # std_msgs/String JSON: session markers

    @property
    def color_compressed(self) -> str:
        """sensor_msgs/CompressedImage, ``"rgb8; jpeg compressed bgr8"`` (image_transport ``compressed``)."""
        return f"{self.color}/compressed"

    @property
    def depth_compressed(self) -> str:
        """sensor_msgs/CompressedImage, ``"16UC1; compressedDepth png"`` (image_transport ``compressedDepth``)."""
        return f"{self.depth}/compressedDepth"

    @property
    def color_topics(self) -> tuple[str, str]:
        """Where a reader finds colour frames: raw or compressed (one of them holds them)."""
        return (self.color, self.color_compressed)

    @property
    def depth_topics(self) -> tuple[str, str]:
        return (self.depth, self.depth_compressed)


@dataclass(frozen=True)
class RecordingOptions:
    """How episodes are recorded: the rollout logger's recording parameters, and the recorder's."""

    images: str = "compressed"  # compressed: colour JPEG + depth compressedDepth PNG (lossless), as image_transport
    #                                publishes them; raw: sensor_msgs/Image rgb8 + 16UC1 (5-20x larger)
    jpeg_quality: int = 90  # 1-100: colour JPEG quality (image_transport's default is 95)
    png_level: int = 1  # 0-9: depth PNG compression level (zlib; 1 = fast, 9 = image_transport's default)
    compression: str = "auto"  # bag chunk compression: auto (zstd, none for chunks mostly of JPEG/PNG), zstd, lz4,
    #                            none (bag_write.BagOptions)
    chunk_size: int = 1024 * 1024  # bytes: a chunk closes once this full ...
    chunk_interval_s: float = 0.5  # s: ... or this old; a SIGKILL loses at most the open chunk
    fsync_every_s: float | None = 1.0  # s: force the bag to disk at most this often (power loss); None = never

    def __post_init__(self):
        if self.images not in IMAGE_TRANSPORTS:
            raise RolloutError(f"images must be one of {', '.join(IMAGE_TRANSPORTS)}, got {self.images!r}")
        if not (isinstance(self.jpeg_quality, int) and 1 <= self.jpeg_quality <= 100):
            raise RolloutError(f"jpeg_quality must be an integer 1-100, got {self.jpeg_quality!r}")
        if not (isinstance(self.png_level, int) and 0 <= self.png_level <= 9):
            raise RolloutError(f"png_level must be an integer 0-9, got {self.png_level!r}")
        self.bag_options()  # BagError names a bad compression / chunk setting

    def bag_options(self) -> BagOptions:
        return BagOptions(self.compression, self.chunk_size, self.chunk_interval_s, self.fsync_every_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "jpeg_quality": self.jpeg_quality,
            "png_level": self.png_level,
            "compression": self.compression,
            "chunk_size": self.chunk_size,
            "chunk_interval_s": self.chunk_interval_s,
        }


class RolloutRecorder:
    """Record one episode into ``directory`` (created; must not hold a rollout already).

    Thread-safe: ROS callbacks may log from several threads. Use as a context manager, or call
    :meth:`close`; an exception inside the ``with`` block closes the record as ``aborted`` with the error.

    Parameters
    ----------
    directory : path
        The episode folder; rollout.json and (outside a session) rollout.mcap go inside.
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
    fsync_every_s : float or None, optional
        Overrides ``options.fsync_every_s`` (power-loss safety; SIGKILL safety needs no fsync).
    clock_ns : callable, optional
        Log-time source in ns; default the wall clock, kept non-decreasing.
    options : RecordingOptions, optional
        Image transport (compressed by default), JPEG quality, PNG level, bag compression and chunking.
    bag : McapBagWriter, optional
        A session's shared writer (see :mod:`grounded_planner.rollout.session`); with ``bag_ref`` naming it.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        instruction: str = "",
        task: str = "",
        condition: str = "",
        scene_id: str = "",
        trial: int = 0,
        expects_action: bool = True,
        model: str = "",
        config: Any = None,
        episode_id: str | None = None,
        notes: str = "",
        topics: RolloutTopics | None = None,
        fsync_every_s: float | None | str = "",
        extra: Mapping[str, Any] | None = None,
        clock_ns: Callable[[], int] | None = None,
        options: RecordingOptions | None = None,
        bag: McapBagWriter | None = None,
        bag_ref: BagRef | None = None,
    ):
        self.directory = Path(directory)
        if (self.directory / JSON_NAME).exists() or (self.directory / BAG_NAME).exists():
            raise RolloutError(f"{self.directory} already holds a rollout; use a new folder per episode")
        if not isinstance(trial, int) or trial < 0:
            raise RolloutError(f"trial must be a non-negative integer, got {trial!r}")
        options = options or RecordingOptions()
        if fsync_every_s != "":
            options = RecordingOptions(**{**options.__dict__, "fsync_every_s": fsync_every_s})
        self.options = options
        self.directory.mkdir(parents=True, exist_ok=True)
        self.topics = topics or RolloutTopics()
        self._clock_ns = clock_ns
        self._lock = threading.RLock()
        self._t0 = time.monotonic()
        self._messages = bag_ref.messages if bag_ref is not None else 0  # a session's start marker counts
        self._owns_bag = bag is None
        self._info = RolloutInfo(
            episode_id=episode_id or self.directory.name,
            started_at=now_iso(),
            updated_at=now_iso(),
            writer={"pid": os.getpid(), "host": socket.gethostname()},
            instruction=instruction,
            task=task,
            condition=condition,
            scene_id=scene_id,
            trial=trial,
            expects_action=bool(expects_action),
            model=model,
            config_hash=config_hash(config),
            config=to_plain(config) if config is not None else None,
            notes=notes,
            bag=bag_ref or BagRef(),
            recording=options.to_json(),
            extra=to_plain(dict(extra or {})),
        )
        self._bag = bag if bag is not None else McapBagWriter(self.directory / BAG_NAME, options.bag_options())
        try:
            self._flush_json()
        except BaseException:
            if self._owns_bag:
                self._bag.close()
            raise
        if instruction:
            self.log_instruction(instruction)

    # -- state -----------------------------------------------------------------------------------
    @property
    def info(self) -> RolloutInfo:
        """A copy of the record as it stands."""
        with self._lock:
            return RolloutInfo.from_json(self._info.to_json(), self.directory / JSON_NAME)

    @property
    def data(self) -> dict[str, Any]:
        """A copy of what rollout.json holds now."""
        with self._lock:
            return self._info.to_json()

    @property
    def closed(self) -> bool:
        return self._info.status != IN_PROGRESS

    @property
    def message_count(self) -> int:
        return self._messages

    def _flush_json(self) -> None:
        self._info.bag.messages = self._messages
        write_info(self.directory, self._info)

    def _check_open(self) -> None:
        if self.closed:
            raise RolloutError(f"rollout {self.directory} is closed ({self._info.status})")

    def _write(self, topic: str, msg: Any) -> int:
        with self._lock:
            self._check_open()
            t = self._bag.write(topic, msg, log_time_ns=self._clock_ns() if self._clock_ns else None)
            self._messages += 1
            return t

    def _stamp(self, stamp_ns: int | None) -> int:
        if stamp_ns is not None:
            return int(stamp_ns)
        return self._clock_ns() if self._clock_ns else time.time_ns()

    # -- sensors -----------------------------------------------------------------------------------
    def log_color(
        self, rgb: np.ndarray, stamp_ns: int | None = None, frame_id: str = "camera_color_optical_frame"
    ) -> None:
        """(H, W, 3) uint8 RGB image -> JPEG CompressedImage on ``topics.color_compressed`` (``raw``: rgb8 Image on
        ``topics.color``)."""
        stamp = self._stamp(stamp_ns)
        if self.options.images == "raw":
            self._write(self.topics.color, image_msg(rgb, stamp, frame_id))
        else:
            self._write(
                self.topics.color_compressed, compressed_image_msg(rgb, stamp, frame_id, self.options.jpeg_quality)
            )

    def log_depth(
        self,
        depth: np.ndarray,
        stamp_ns: int | None = None,
        frame_id: str = "camera_color_optical_frame",
        depth_unit_m: float = 0.001,
    ) -> None:
        """(H, W) depth (float metres or uint16 counts of ``depth_unit_m``) -> compressedDepth PNG of 16UC1 counts on
        ``topics.depth_compressed``, lossless (``raw``: 16UC1 Image on ``topics.depth``)."""
        stamp = self._stamp(stamp_ns)
        if self.options.images == "raw":
            self._write(self.topics.depth, depth_msg(depth, stamp, frame_id, depth_unit_m))
        else:
            self._write(
                self.topics.depth_compressed,
                compressed_depth_msg(depth, stamp, frame_id, depth_unit_m, self.options.png_level),
            )

    def log_camera_info(
        self,
        K: Sequence[float] | np.ndarray,
        width: int,
        height: int,
        D: Sequence[float] = (),
        distortion_model: str = "plumb_bob",
        stamp_ns: int | None = None,
        frame_id: str = "camera_color_optical_frame",
    ) -> None:
        """Intrinsics (3x3 ``K`` in pixels, distortion ``D``) -> sensor_msgs/CameraInfo on ``topics.camera_info``."""

        self._write(
            self.topics.camera_info,
            camera_info_msg(K, width, height, self._stamp(stamp_ns), D, distortion_model, frame_id),
        )

    def log_camera(self, camera: Any, stamp_ns: int | None = None) -> None:
        """A geometry ``CameraModel`` (fields K, D, width, height, distortion_model, frame_id) as CameraInfo."""
        self.log_camera_info(
            np.asarray(camera.K),
            camera.width,
            camera.height,
            list(np.ravel(camera.D)),
            camera.distortion_model,
            stamp_ns,
            getattr(camera, "frame_id", "") or "camera_color_optical_frame",
        )

    def log_frame(
        self,
        rgb: np.ndarray,
        depth: np.ndarray | None = None,
        camera: Any = None,
        stamp_ns: int | None = None,
        color_msg: Any = None,
    ) -> None:
        """Color, aligned depth and camera info of one instant, all with the same header stamp.

        ``color_msg``: the message ``rgb`` was decoded from. A JPEG/PNG CompressedImage (image_transport's
        ``compressed``) is stored byte for byte when recording compressed, as ``ros2 bag`` records such a
        stream: no second JPEG generation, no encoding time.
        """
        stamp = self._stamp(stamp_ns)
        if (
            color_msg is not None
            and self.options.images == "compressed"
            and images.is_compressed(color_msg)
            and not images.is_compressed_depth(color_msg)
        ):
            CompressedImage = typestore().types["sensor_msgs/msg/CompressedImage"]
            self._write(
                self.topics.color_compressed,
                CompressedImage(
                    header=header_msg(stamp, color_msg.header.frame_id or "camera_color_optical_frame"),
                    format=str(color_msg.format),
                    data=np.frombuffer(bytes(color_msg.data), dtype=np.uint8).copy(),
                ),
            )
        else:
            self.log_color(rgb, stamp)
        if depth is not None:
            self.log_depth(depth, stamp)
        if camera is not None:
            self.log_camera(camera, stamp)

    def log_joint_state(
        self,
        names: Sequence[str],
        position: Sequence[float],
        velocity: Sequence[float] = (),
        effort: Sequence[float] = (),
        stamp_ns: int | None = None,
    ) -> None:
        self._write(self.topics.joint_states, joint_state_msg(names, position, self._stamp(stamp_ns), velocity, effort))

    def log_message(self, topic: str, msg: Any) -> None:
        """Any rosbags message object (built from ``grounded_planner.rollout.bag.typestore()``)."""
        self._write(topic, msg)

    # -- planning and execution -------------------------------------------------------------------
    def log_instruction(self, instruction: str) -> None:
        with self._lock:
            self._write(self.topics.instruction, string_msg(instruction))
            if instruction != self._info.instruction:
                self._info.instruction = instruction
                self._flush_json()

    def log_plan(self, plan: Any, stamp_ns: int | None = None, planning_time_s: float | None = None) -> None:
        """The planner's GroundedPlan (plan model) -> rollout.json ``plan`` and a GroundedPlan message."""

        with self._lock:
            self._write(self.topics.plan, plan_msg(plan, self._stamp(stamp_ns)))
            self._info.plan = to_plain(plan)
            if not self._info.model and getattr(plan, "model", ""):
                self._info.model = plan.model
            if planning_time_s is not None:
                self._info.timings_s["plan"] = float(planning_time_s)
            self._flush_json()

    def log_warning(self, message: str) -> None:
        """Something the episode's data could not be used for (a camera_info with an unknown distortion model,
        an undecodable frame): kept once in rollout.json ``warnings`` so that an analysis sees why."""
        with self._lock:
            self._check_open()
            if str(message) not in self._info.warnings:
                self._info.warnings.append(str(message))
                self._flush_json()

    def log_planner_error(self, message: str) -> None:
        """The planner failed (unreachable server, invalid answer): the episode fails as ``planner_error``."""
        with self._lock:
            self._check_open()
            self._info.planner_error = str(message) or "planner error"
            self._flush_json()

    def log_targets(self, targets: Any) -> None:
        """3D targets (a ``TargetSet`` or its ``to_dict()``) -> rollout.json, and the logged plan with its targets
        inside as a GroundedPlan message on ``topics.targets``."""
        with self._lock:
            payload = to_plain(targets)
            self._write(self.topics.targets, plan_msg(self._plan_with_targets(payload), self._stamp(None)))
            self._info.targets = payload
            self._flush_json()

    def _plan_with_targets(self, targets: Mapping[str, Any]) -> GroundedPlan:
        """The logged plan with the targets it has (by action index); an empty plan when none was logged."""
        data = self._info.plan
        plan = (
            GroundedPlan.from_dict(data, validate=False)
            if isinstance(data, dict)
            else GroundedPlan(str(self._info.instruction), (1, 1), [], reason="no plan logged")
        )
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
        self._write(
            self.topics.feedback,
            execution_event_msg(typestore().types, step_index, state, action, message, stamp_ns=self._stamp(None)),
        )

    def log_step(self, index: int, type: str, outcome: str, message: str = "") -> None:
        """A finished step's outcome (``ok``, ``grasp_failed``, ...) as it happens, before the final result."""
        with self._lock:
            self._check_open()
            steps = [s for s in self._info.steps if s.get("index") != index]
            steps.append(
                {
                    "index": int(index),
                    "type": type,
                    "outcome": outcome,
                    "message": message,
                    "t_s": round(time.monotonic() - self._t0, 6),
                }
            )
            self._info.steps = sorted(steps, key=lambda s: s["index"])
            self._flush_json()

    def log_attempt(self, attempt: Any) -> None:
        """One closed-loop try of a step (an ``Attempt`` or its dict: step, attempt, type, outcome, check, message,
        duration_s, ...) -> rollout.json ``attempts`` and a StepOutcome message on ``topics.attempts``."""

        with self._lock:
            payload = to_plain(attempt)
            self._write(self.topics.attempts, attempt_outcome_msg(typestore().types, payload))
            self._info.attempts.append({**payload, "t_s": round(time.monotonic() - self._t0, 6)})
            self._flush_json()

    def log_replan(self, plan: Any, reason: str = "", stamp_ns: int | None = None) -> None:
        """A new plan made during the episode (closed loop): appended to rollout.json ``plans`` and written as a
        GroundedPlan message on ``topics.plan``; the first plan stays in ``plan``."""

        with self._lock:
            self._write(self.topics.plan, plan_msg(plan, self._stamp(stamp_ns)))
            self._info.plans.append(
                {"reason": reason, "plan": to_plain(plan), "t_s": round(time.monotonic() - self._t0, 6)}
            )
            self._flush_json()

    def log_result(self, result: Any, execution_time_s: float | None = None) -> None:
        """The executor's ExecutionResult (or its ``to_dict()``): stored, its steps become the step list, and an
        ExecutionResult message goes into the bag."""
        with self._lock:
            payload = to_plain(result)
            if not isinstance(payload, dict):
                raise RolloutError(f"execution result must be a dict or have to_dict(), got {type(result).__name__}")
            listed = payload.get("steps")
            # the steps every reader of rollout.json takes as (index, type, outcome); anything else stays only in
            # ``execution``, as it came, and a warning names it
            steps = [s for s in listed if isinstance(s, Mapping)] if isinstance(listed, list) else []
            outcome = SimpleNamespace(
                success=bool(payload.get("success")), message=str(payload.get("message", "")), steps=steps
            )
            scene = payload.get("scene_success")
            self._write(
                self.topics.result,
                execution_result_msg(
                    typestore().types,
                    outcome,
                    self._info.instruction,
                    bool(payload.get("dry_run", False)),
                    scene if isinstance(scene, bool) else None,
                    str(payload.get("condition") or "open_loop"),
                    int(payload.get("replans") or 0),
                    stamp_ns=self._stamp(None),
                ),
            )
            self._info.execution = payload
            if isinstance(listed, list):
                self._info.steps = steps
                others = [s for s in listed if not isinstance(s, Mapping)]
                if others:
                    self._info.warnings.append(
                        f"execution result: {len(others)} of its {len(listed)} steps are not steps "
                        f"(index, type, outcome), kept as they came in execution only, left out of the step list, "
                        f"the bag and the auto label: {others[:3]!r}"
                    )
            if execution_time_s is not None:
                self._info.timings_s["execute"] = float(execution_time_s)
            self._flush_json()

    def set_timing(self, name: str, seconds: float) -> None:
        with self._lock:
            self._check_open()
            self._info.timings_s[str(name)] = float(seconds)
            self._flush_json()

    def set_label(
        self, success: bool | None, failure_mode: str | None = None, notes: str | None = None, source: str = "human"
    ) -> None:
        """Success and failure mode, if known while recording (e.g. an automatic success check in sim)."""
        check_failure_mode(failure_mode)
        if success and failure_mode:
            raise RolloutError(f"a successful rollout has no failure mode (got {failure_mode!r})")
        with self._lock:
            self._info.success = success
            self._info.failure_mode = failure_mode
            self._info.label_source = source if success is not None else None
            if notes is not None:
                self._info.notes = notes
            self._flush_json()

    # -- closing ---------------------------------------------------------------------------------
    def close(self, status: str = COMPLETE, error: str = "", end_ns: int | None = None) -> dict[str, Any]:
        """Finalise the bag (unless a session shares it) and rollout.json; fills success/failure mode where the
        stack knows them. Returns the final rollout.json content. Calling it twice is harmless.

        A bag the disk refused to finish (BagWriteError: a full disk) still ends the episode: the record says
        so in ``error`` and ``warnings``, and ``rollouts recover`` adds the bag's summary later. ``cut_short``: the
        recorder could not go on (a full disk, an executor that vanished; ``error`` says why). When rollout.json
        itself cannot be written (OSError), the record stays open: call ``close`` again once there is space.
        """
        if status not in (COMPLETE, ABORTED, CUT_SHORT):
            raise RolloutError(f"close status must be {COMPLETE!r}, {ABORTED!r} or {CUT_SHORT!r}, got {status!r}")
        with self._lock:
            if self.closed:
                return self.data
            info = self._info
            if self._owns_bag:
                try:
                    self._bag.close()
                except BagWriteError as exc:  # a full disk: the episode ends as it did, its bag lacks the summary
                    note = f"bag not finished ({exc}); `grounded-planner rollouts recover` adds its summary"
                    info.warnings.append(note)
                    error = "; ".join(e for e in (error, note) if e)
            if end_ns is not None:
                info.bag.end_ns = int(end_ns)
            info.status = status
            info.error = error
            info.ended_at = now_iso()
            info.timings_s["total"] = round(time.monotonic() - self._t0, 6)
            success, mode = auto_failure_mode(info.execution, info.plan, info.planner_error, info.expects_action)
            if info.success is None and success is not None:
                info.success, info.failure_mode, info.label_source = success, mode, "auto"
            elif info.success is False and not info.failure_mode and mode:
                info.failure_mode = mode  # e.g. a simulator said "failed" and the executor knows why
            try:
                self._flush_json()
            except OSError:
                info.status = IN_PROGRESS  # not closed on disk: a later close() tries again
                raise
            return self.data

    def __enter__(self) -> "RolloutRecorder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close(COMPLETE)
        else:
            self.close(ABORTED, error=f"{exc_type.__name__}: {exc}")


# -- reading records ---------------------------------------------------------------------------------
class RolloutRecord:
    """A rollout folder read back: its typed record (:attr:`info`) and where it lives."""

    def __init__(self, directory: str | Path, info: RolloutInfo | Mapping[str, Any] | None = None):
        self.directory = Path(directory)
        if info is None or isinstance(info, Mapping):
            info = RolloutInfo.from_json(dict(info or {"format": FORMAT}), self.directory / JSON_NAME)
        self.info = info

    @property
    def data(self) -> dict[str, Any]:
        """rollout.json's content as a dict (a copy: change the record through :attr:`info`)."""
        return self.info.to_json()

    @property
    def json_path(self) -> Path:
        return self.directory / JSON_NAME

    @property
    def bag_path(self) -> Path:
        return self.directory / (self.info.bag.file or BAG_NAME)

    @property
    def bag_window(self) -> tuple[int | None, int | None]:
        """The episode's log-time window [start, end) in a session's bag; (None, None) for a bag of its own."""
        return self.info.bag.start_ns, self.info.bag.end_ns

    def messages(self, topics: Sequence[str] | None = None) -> Iterator[BagMessage]:
        """This episode's bag messages in log-time order (its window only, inside a session)."""
        start_ns, end_ns = self.bag_window
        return read_bag(self.bag_path, topics, start_ns=start_ns, end_ns=end_ns)

    @property
    def episode_id(self) -> str:
        return str(self.info.episode_id or self.directory.name)

    @property
    def status(self) -> str:
        return str(self.info.status)

    @property
    def cut_short(self) -> bool:
        """True when the writer never closed the episode (killed, crashed, or still recording)."""
        return self.status in (IN_PROGRESS, CUT_SHORT)

    @property
    def success(self) -> bool | None:
        return self.info.success

    @property
    def failure_mode(self) -> str | None:
        return self.info.failure_mode

    @property
    def labelled(self) -> bool:
        """Success known, and for a failure its failure mode too."""
        return self.success is True or (self.success is False and bool(self.failure_mode))

    def writer_alive(self) -> bool:
        """Is the process that wrote this record still running (same host only; False elsewhere)?"""
        return self.status == IN_PROGRESS and writer_alive(self.info.writer)

    def save(self) -> None:
        """Write the record back (atomically)."""
        write_info(self.directory, self.info)

    def save_label(
        self, success: bool, failure_mode: str | None, notes: str | None = None, source: str = "human"
    ) -> None:
        """Write a label into rollout.json (atomically)."""
        check_failure_mode(failure_mode)
        if success and failure_mode:
            raise RolloutError(f"{self.directory}: a successful rollout has no failure mode (got {failure_mode!r})")
        if not success and not failure_mode:
            raise RolloutError(f"{self.directory}: a failed rollout needs a failure mode")
        self.info.success = bool(success)
        self.info.failure_mode = failure_mode
        self.info.label_source = source
        self.info.labelled_at = now_iso()
        if notes is not None:
            self.info.notes = notes
        self.save()


def load_rollout(directory: str | Path) -> RolloutRecord:
    """Read ``directory/rollout.json``; raises :class:`RolloutError` naming the file when it is unusable."""
    return RolloutRecord(directory, read_info(directory))


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


def _count_messages(record: RolloutRecord) -> int:
    start_ns, end_ns = record.bag_window
    if start_ns is None and end_ns is None:
        return bag_info(record.bag_path).message_count
    from mcap.reader import make_reader  # lazy: optional SDK (mcap), not in install_requires

    with open(record.bag_path, "rb") as f:
        return sum(1 for _ in make_reader(f).iter_messages(starting_at=start_ns, ending_before=end_ns))


def recover_rollout(directory: str | Path) -> RolloutRecord:
    """Finalise a cut-short rollout: rebuild its bag's summary and indexes, count its messages again and set status
    ``cut_short`` with the reason in ``recovery.reason`` (and ``error`` when empty).

    Every folder ends finished: one whose recorder died before its first complete message gets an empty but
    valid bag, one whose rollout.json was never written gets one, and an unreadable bag is kept aside as
    ``rollout.mcap.corrupt`` next to an empty one. Inside a session the shared bag is recovered (once) and the
    episode's window ends at its last message. Raises RolloutError only while the writer is still alive.
    """

    directory = Path(directory)
    reasons = []
    if not (directory / JSON_NAME).exists() and (directory / BAG_NAME).exists():
        record = RolloutRecord(directory, RolloutInfo(episode_id=directory.name))
        reasons.append(f"{JSON_NAME} was never written (the recorder stopped while starting)")
    else:
        record = load_rollout(directory)
    if record.status != IN_PROGRESS:
        return _finish_bag_only(record)
    if record.writer_alive():
        raise RolloutError(f"{record.directory} is still being recorded by pid {record.info.writer['pid']}")
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
    info = record.info
    if info.bag.session is not None and info.bag.end_ns is None:
        info.bag.end_ns = scan.end_ns + 1 if scan.message_count else info.bag.start_ns
    messages = _count_messages(record)
    if messages == 0:
        reasons.append("the recorder stopped before its first complete message")
    elif scan.dropped_bytes:
        reasons.append(f"the last chunk was cut ({scan.dropped_bytes} bytes dropped)")
    reason = "; ".join(["the recorder stopped without closing the rollout (killed or crashed)"] + reasons)
    info.status = CUT_SHORT
    info.ended_at = None
    info.recovered_at = now_iso()
    info.bag.file = os.path.relpath(bag, directory)
    info.bag.messages = messages
    info.recovery = {"reason": reason, "bag_messages": messages, "dropped_bytes": scan.dropped_bytes}
    info.error = info.error or reason
    record.save()
    return record


def _finish_bag_only(record: RolloutRecord) -> RolloutRecord:
    """A finished episode whose own bag lacks its summary (the disk was full at close): add the summary."""
    bag = record.bag_path
    if record.info.bag.session is not None or not bag.is_file() or has_footer(bag):
        return record
    scan = recover_mcap(bag)
    record.info.bag.messages = _count_messages(record)
    record.info.recovered_at = now_iso()
    record.info.recovery = {
        "reason": "the bag had no summary (not finished at close)",
        "bag_messages": record.info.bag.messages,
        "dropped_bytes": scan.dropped_bytes,
    }
    record.save()
    return record


def find_unfinished(paths: Iterable[str | Path]) -> list[Path]:
    """Folders at or below ``paths`` that ``recover`` should finish: rollout.json says ``in_progress``, a bag lies
    there without rollout.json, or an episode's own bag has no summary (unreadable rollout.json files raise
    RolloutError naming them)."""
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
        if (
            not (directory / JSON_NAME).exists()
            or load_rollout(directory).status == IN_PROGRESS
            or ((directory / BAG_NAME).is_file() and not has_footer(directory / BAG_NAME))
        ):
            out.append(directory)
    return out
