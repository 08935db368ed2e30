"""V2GP inputs: LeRobot-format demonstration datasets (v2.x and v3.0: parquet + images or MP4 videos).

Layouts read (``meta/info.json`` says which; ``codebase_version``):

* v2.x: ``data/chunk-XXX/episode_XXXXXX.parquet`` (``data_path`` template), ``meta/episodes.jsonl``,
  ``meta/tasks.jsonl``, videos at ``video_path`` (one MP4 per episode and camera).
* v3.0: several episodes per ``data/chunk-XXX/file-XXX.parquet``; ``meta/episodes/chunk-XXX/file-XXX.parquet``
  gives each episode's files, rows (``dataset_from_index``/``dataset_to_index``) and video time span
  (``videos/<key>/from_timestamp``); ``meta/tasks.parquet`` the instructions.

Camera features of dtype ``image`` live in the parquet (struct of PNG/JPEG ``bytes`` and/or a ``path``);
``video`` features are decoded with PyAV; a dataset with no camera feature is read too (stage 1 needs none;
the later stages name the camera they need). The gripper signal(s) are found by name through the robot
profile (:mod:`grounded_planner.v2gp.grippers`) or named by config: ``observation.state[6]`` or
``observation.state[gripper]`` (a name from the feature's ``names`` or ``name``). Per-frame
``language_instruction*`` columns (DROID's port) give the instruction where the tasks give none. Simulated datasets may carry ``meta/v2gp_objects.jsonl`` (per episode, per frame
object boxes), which the ``oracle`` grounder uses.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from grounded_planner.v2gp.episode import DemoEpisode, GripperTrace, ObjectTrack
from grounded_planner.v2gp.errors import DatasetError, VideoUnavailableError, require
from grounded_planner.v2gp.grippers import combine, element_names, elements, find_grippers
from grounded_planner.v2gp.rollouts import RolloutDataset
from PIL import Image

__all__ = ["DemoEpisode", "LeRobotDataset", "ObjectTrack", "RolloutDataset", "flat_names", "open_dataset"]

log = logging.getLogger(__name__)
OBJECTS_FILE = "meta/v2gp_objects.jsonl"


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DatasetError(f"{path} not found: a LeRobot dataset has meta/info.json") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def _load_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{n}: not JSON: {exc}") from exc
    return out


def _decode_image(cell: Any, root: Path, where: str) -> np.ndarray:
    if isinstance(cell, dict):
        data, rel = cell.get("bytes"), cell.get("path")
        if data:
            return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        if rel:
            path = Path(rel) if Path(rel).is_absolute() else root / rel
            try:
                return np.asarray(Image.open(path).convert("RGB"))
            except OSError as exc:
                raise DatasetError(f"{where}: cannot read image {path}: {exc}") from exc
    if isinstance(cell, (bytes, bytearray)):
        return np.asarray(Image.open(io.BytesIO(cell)).convert("RGB"))
    raise DatasetError(f"{where}: image cell must hold bytes or a path, got {type(cell).__name__}")


class _VideoFrames:
    """Frames of one MP4 by timestamp (PyAV), decoding forward from the nearest keyframe; thread-safe."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._cache: dict[int, np.ndarray] = {}

    def at(self, t_s: float, fps: float) -> np.ndarray:
        key = int(round(t_s * fps))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            av = require("av", "v2gp", f"reading video {self.path}")
            try:
                with av.open(str(self.path)) as container:
                    stream = container.streams.video[0]
                    base = float(stream.time_base)
                    container.seek(max(0, int((t_s - 1.0) / base)), stream=stream, backward=True, any_frame=False)
                    best = None
                    for frame in container.decode(stream):
                        ft = float(frame.pts * base) if frame.pts is not None else 0.0
                        if best is None or abs(ft - t_s) <= abs(best[0] - t_s):
                            best = (ft, frame)
                        if ft >= t_s - 0.5 / fps:
                            break
            except (av.error.FFmpegError, OSError, ValueError, IndexError) as exc:  # type: ignore[attr-defined]
                raise VideoUnavailableError(f"cannot decode video {self.path}: {exc}") from exc
            if best is None:
                raise VideoUnavailableError(f"video {self.path} has no frame near t={t_s:.3f} s")
            image = best[1].to_ndarray(format="rgb24")
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = image
            return image


class LeRobotDataset:
    """A LeRobot v2.x / v3.0 dataset folder, read with pyarrow (no lerobot install needed)."""

    def __init__(self, root: str | Path, gripper: str = "", camera: str | None = None, robot: str | None = None):
        self.root = Path(root)
        self.info = _load_json(self.root / "meta" / "info.json")
        version = str(self.info.get("codebase_version", ""))
        if not re.match(r"^v?[23]\.", version):
            raise DatasetError(f"{self.root}: unsupported LeRobot codebase_version {version!r} (expected v2.x or v3.0)")
        self.version = version.lstrip("v")
        self.v3 = self.version.startswith("3")
        self.fps = float(self.info.get("fps") or 0) or 30.0
        self.features: dict[str, Any] = self.info.get("features") or {}
        self.robot_type = self.info.get("robot_type")
        self.cameras = [k for k, f in self.features.items() if f.get("dtype") in ("image", "video")]
        if camera is None:
            # stage 1 reads no frame: a dataset without a camera is segmented; the later stages name what is missing
            camera = self.cameras[0] if self.cameras else None
        elif camera not in self.cameras:
            raise DatasetError(
                f"{self.root}: camera {camera!r} is not an image/video feature "
                f"(have: {', '.join(self.cameras) or 'none'})"
            )
        self.camera = camera
        self.camera_is_video = camera is not None and self.features[camera]["dtype"] == "video"
        self.channels, self.warnings = find_grippers(self.features, self.robot_type, robot, gripper, str(self.root))
        first = self.channels[0]
        self.gripper_column = first.column
        self.gripper_index = first.indices[0] if first.indices and len(first.indices) == 1 else None
        self.command_column = first.command_column
        self.command_index = (
            first.command_indices[0] if first.command_indices and len(first.command_indices) == 1 else None
        )
        # DROID's LeRobot port keeps up to three instructions per frame beside its tasks
        self.instruction_columns = [
            k
            for k in ("language_instruction", "language_instruction_2", "language_instruction_3")
            if k in self.features
        ]
        self._pq = require("pyarrow.parquet", "v2gp", "reading LeRobot parquet files")
        self._episodes = self._load_episodes()
        self._objects = {int(d["episode_index"]): d for d in _load_jsonl(self.root / OBJECTS_FILE)}
        self._videos: dict[Path, _VideoFrames] = {}
        self._videos_lock = threading.Lock()

    def require_camera(self, stage: str = "stages 2-4 (objects, grounding, plans)") -> str:
        """The camera the later stages read; DatasetError naming what is needed when the dataset has none."""
        if self.camera is None:
            raise DatasetError(
                f"{self.root}: {stage} need a camera: an image or video feature in meta/info.json "
                f"(features: {', '.join(sorted(self.features))}); this dataset has none, so only "
                "stage 1 runs on it (grounded-planner v2gp segment --dataset ...)"
            )
        return self.camera

    def _load_episodes(self) -> dict[int, dict[str, Any]]:
        meta = self.root / "meta"
        episodes: dict[int, dict[str, Any]] = {}
        if self.v3:
            files = sorted((meta / "episodes").glob("chunk-*/file-*.parquet"))
            if not files:
                raise DatasetError(f"{self.root}: no meta/episodes/chunk-*/file-*.parquet (v3.0 layout)")
            for f in files:
                for row in self._pq.read_table(f).to_pylist():
                    episodes[int(row["episode_index"])] = row
            task_file = meta / "tasks.parquet"
            self._tasks: dict[int, str] = {}
            if task_file.exists():
                for row in self._pq.read_table(task_file).to_pylist():
                    text = row.get("task") or row.get("__index_level_0__")
                    self._tasks[int(row["task_index"])] = str(text)
        else:
            rows = _load_jsonl(meta / "episodes.jsonl")
            if not rows:
                raise DatasetError(f"{self.root}: meta/episodes.jsonl is missing or empty (v2.x layout)")
            episodes = {int(r["episode_index"]): r for r in rows}
            self._tasks = {int(r["task_index"]): str(r["task"]) for r in _load_jsonl(meta / "tasks.jsonl")}
        return episodes

    @property
    def episode_indices(self) -> list[int]:
        return sorted(self._episodes)

    # -- episodes ---------------------------------------------------------------------------------
    def _data_path(self, ep: dict[str, Any], index: int) -> Path:
        template = self.info.get("data_path")
        if self.v3:
            template = template or "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
            return self.root / template.format(
                chunk_index=int(ep["data/chunk_index"]), file_index=int(ep["data/file_index"])
            )
        template = template or "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        chunk = index // int(self.info.get("chunks_size") or 1000)
        return self.root / template.format(episode_chunk=chunk, episode_index=index)

    def _video_path(self, ep: dict[str, Any], index: int) -> tuple[Path, float]:
        template = self.info.get("video_path")
        if not template:
            raise DatasetError(f"{self.root}: {self.camera} is a video feature but info.json has no video_path")
        if self.v3:
            key = f"videos/{self.camera}/"
            path = self.root / template.format(
                video_key=self.camera, chunk_index=int(ep[key + "chunk_index"]), file_index=int(ep[key + "file_index"])
            )
            return path, float(ep.get(key + "from_timestamp") or 0.0)
        chunk = index // int(self.info.get("chunks_size") or 1000)
        return self.root / template.format(episode_chunk=chunk, video_key=self.camera, episode_index=index), 0.0

    def gripper_table(self, index: int, extra: tuple[str, ...] = ()):
        """One episode's rows: the gripper and command columns of every channel, frame numbers, ``extra``."""
        if index not in self._episodes:
            raise DatasetError(f"{self.root}: no episode {index} (have {len(self._episodes)} episodes)")
        ep = self._episodes[index]
        try:
            path = self._data_path(ep, index)
        except (KeyError, ValueError, IndexError) as exc:  # a v3.0 episodes table without its file columns
            raise DatasetError(
                f"{self.root}: episode {index}'s data file is not named in its metadata "
                f"({type(exc).__name__}: {exc}); expected data/chunk_index and data/file_index "
                "(v3.0) or a data_path template (v2.x)"
            ) from exc
        if not path.exists():
            raise DatasetError(f"{self.root}: data file {path} of episode {index} is missing")
        columns = ["frame_index", "timestamp", "episode_index", "task_index", *self.instruction_columns, *extra]
        for ch in self.channels:
            columns += [ch.column] + ([ch.command_column] if ch.command_column else [])
        schema = self._pq.read_schema(path)
        # v3 files hold many episodes: the filter skips row groups of others by their statistics
        filters = [("episode_index", "=", index)] if self.v3 and "episode_index" in schema.names else None
        wanted = [c for c in dict.fromkeys(columns) if c in schema.names]
        table = self._pq.read_table(path, columns=wanted, filters=filters)
        for ch in self.channels:
            if ch.column not in table.column_names:
                raise DatasetError(f"{path}: no column {ch.column!r}")
        if "episode_index" in table.column_names:
            mask = np.asarray(table.column("episode_index").to_numpy()) == index
            table = table.filter(mask)
        if table.num_rows == 0:
            raise DatasetError(f"{path}: no rows of episode {index}")
        return ep, path, table

    def _traces(self, table, path: Path, index: int) -> list[GripperTrace]:
        traces = []
        for ch in self.channels:
            values = combine(elements(table.column(ch.column).to_pylist(), ch.indices, path, ch.column), ch.combine)
            commanded = None
            if ch.command_column and ch.command_column in table.column_names:
                try:
                    commanded = combine(
                        elements(
                            table.column(ch.command_column).to_pylist(), ch.command_indices, path, ch.command_column
                        ),
                        ch.combine,
                    )
                except DatasetError as exc:  # an extra signal: the episode is still segmented from the gripper alone
                    log.warning("episode %d: commanded gripper not used: %s", index, exc)
            traces.append(GripperTrace(ch.hand, ch.label, values, commanded))
        return traces

    def gripper_traces(self, index: int) -> list[GripperTrace]:
        """One episode's gripper signals only (no image, no video): what stage 1 reads."""
        _, path, table = self.gripper_table(index)
        return self._traces(table, path, index)

    def episode(self, index: int) -> DemoEpisode:
        """Read one episode's table (gripper signals, timestamps, image column) and return it."""
        ep, path, table = self.gripper_table(
            index, () if self.camera_is_video or self.camera is None else (self.camera,)
        )
        n = table.num_rows
        traces = self._traces(table, path, index)
        frames = (
            np.asarray(table.column("frame_index").to_numpy(), dtype=np.int64)
            if "frame_index" in table.column_names
            else np.arange(n)
        )
        timestamps = (
            np.asarray(table.column("timestamp").to_numpy(), dtype=float)
            if "timestamp" in table.column_names
            else frames / self.fps
        )
        tasks = ep.get("tasks") or []
        if isinstance(tasks, str):
            tasks = [tasks]
        if not tasks and "task_index" in table.column_names:
            tasks = [self._tasks.get(int(table.column("task_index")[0].as_py()), "")]
        instruction = str(tasks[0]) if tasks and str(tasks[0]).strip() else ""
        for column in self.instruction_columns:  # DROID: the first non-empty language_instruction of the episode
            if instruction:
                break
            texts = [t for t in table.column(column).to_pylist() if isinstance(t, str) and t.strip()]
            instruction = texts[0].strip() if texts else ""
        source = f"{self.root}#episode={index}"

        if self.camera is None:

            def reader(i: int) -> np.ndarray:
                self.require_camera()
                raise AssertionError("unreachable")
        elif self.camera_is_video:
            video_path, offset_s = self._video_path(ep, index)
            with self._videos_lock:
                video = self._videos.setdefault(video_path, _VideoFrames(video_path))

            def reader(i: int) -> np.ndarray:
                # checked when a frame is needed: stage 1 (the gripper signal) runs without the video
                if not video_path.exists():
                    raise VideoUnavailableError(f"{self.root}: video {video_path} of episode {index} is missing")
                return video.at(offset_s + float(timestamps[i]), self.fps)
        else:
            cells = table.column(self.camera).to_pylist()

            def reader(i: int) -> np.ndarray:
                return _decode_image(cells[i], self.root, f"{path} row {i}")

        objects = None
        if index in self._objects:
            objects = [ObjectTrack.from_dict(o) for o in self._objects[index].get("objects", [])]
        return DemoEpisode(
            index=index,
            instruction=instruction,
            fps=self.fps,
            gripper=traces[0].values,
            frame_indices=frames,
            source=source,
            camera=self.camera or "",
            _reader=reader,
            objects=objects,
            commanded=traces[0].commanded,
            grippers=traces,
        )


def flat_names(names: Any) -> list[str]:
    """A feature's element names as one flat list: ``[...]``, ``{"motors": [...]}`` or nested ``[["a", "b"]]``."""
    return element_names({"names": names})


def open_dataset(path: str | Path, gripper: str = "", camera: str | None = None, robot: str | None = None):
    """Open a demonstration dataset folder: LeRobot v2.x/v3.0, or a folder of this project's rollouts.

    ``gripper``: a column named by the user ("" = found by name through the robot profile, see
    :mod:`grounded_planner.v2gp.grippers`); ``robot``: a profile name that overrides the dataset's robot_type.
    Returns an object with ``episode_indices``, ``channels``, ``warnings`` and ``episode(index) -> DemoEpisode``.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"dataset {root} is not a folder")
    if (root / "meta" / "info.json").exists():
        return LeRobotDataset(root, gripper=gripper, camera=camera, robot=robot)
    if (root / "rollout.json").exists() or next(root.rglob("rollout.json"), None) is not None:
        return RolloutDataset(root, gripper=gripper, camera=camera)
    raise DatasetError(f"{root}: not a LeRobot dataset (no meta/info.json) and no rollout folders (rollout.json)")
