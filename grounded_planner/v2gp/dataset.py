"""V2GP inputs: LeRobot-format demonstration datasets (v2.x and v3.0: parquet + images or MP4 videos).

Layouts read (``meta/info.json`` says which; ``codebase_version``):

* v2.x: ``data/chunk-XXX/episode_XXXXXX.parquet`` (``data_path`` template), ``meta/episodes.jsonl``,
  ``meta/tasks.jsonl``, videos at ``video_path`` (one MP4 per episode and camera).
* v3.0: several episodes per ``data/chunk-XXX/file-XXX.parquet``; ``meta/episodes/chunk-XXX/file-XXX.parquet``
  gives each episode's files, rows (``dataset_from_index``/``dataset_to_index``) and video time span
  (``videos/<key>/from_timestamp``); ``meta/tasks.parquet`` the instructions.

Camera features of dtype ``image`` live in the parquet (struct of PNG/JPEG ``bytes`` and/or a ``path``);
``video`` features are decoded with PyAV. The gripper signal is a column named by config, optionally one
element of a vector column: ``observation.state[6]`` or ``observation.state[gripper]`` (a name from the
feature's ``names``). Simulated datasets may carry ``meta/v2gp_objects.jsonl`` (per episode, per frame
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

from grounded_planner.v2gp.episode import DemoEpisode, ObjectTrack
from grounded_planner.v2gp.errors import DatasetError, VideoUnavailableError, require
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

    def __init__(self, root: str | Path, gripper: str = "observation.state[-1]", camera: str | None = None):
        self.root = Path(root)
        self.info = _load_json(self.root / "meta" / "info.json")
        version = str(self.info.get("codebase_version", ""))
        if not re.match(r"^v?[23]\.", version):
            raise DatasetError(f"{self.root}: unsupported LeRobot codebase_version {version!r} (expected v2.x or v3.0)")
        self.version = version.lstrip("v")
        self.v3 = self.version.startswith("3")
        self.fps = float(self.info.get("fps") or 0) or 30.0
        self.features: dict[str, Any] = self.info.get("features") or {}
        cameras = [k for k, f in self.features.items() if f.get("dtype") in ("image", "video")]
        if camera is None:
            if not cameras:
                raise DatasetError(f"{self.root}: no image or video feature in meta/info.json")
            camera = cameras[0]
        elif camera not in cameras:
            raise DatasetError(f"{self.root}: camera {camera!r} is not an image/video feature "
                               f"(have: {', '.join(cameras) or 'none'})")
        self.camera = camera
        self.camera_is_video = self.features[camera]["dtype"] == "video"
        self.gripper_column, self.gripper_index = self._resolve_gripper(gripper)
        self.command_column, self.command_index = self._resolve_command()
        self._pq = require("pyarrow.parquet", "v2gp", "reading LeRobot parquet files")
        self._episodes = self._load_episodes()
        self._objects = {int(d["episode_index"]): d for d in _load_jsonl(self.root / OBJECTS_FILE)}
        self._videos: dict[Path, _VideoFrames] = {}
        self._videos_lock = threading.Lock()

    # -- metadata ---------------------------------------------------------------------------------
    def _resolve_gripper(self, spec: str) -> tuple[str, int | None]:
        m = re.match(r"^(.+?)(?:\[([^\]]+)\])?$", spec.strip())
        if not m:
            raise DatasetError(f"gripper column spec {spec!r}: expected COLUMN or COLUMN[INDEX|NAME]")
        column, sel = m.group(1), m.group(2)
        if column not in self.features:
            raise DatasetError(f"{self.root}: gripper column {column!r} is not a feature "
                               f"(have: {', '.join(sorted(self.features))})")
        if sel is None:
            return column, None
        try:
            return column, int(sel)
        except ValueError:
            names = flat_names(self.features[column].get("names"))
            if sel in names:
                return column, names.index(sel)
            raise DatasetError(f"{self.root}: {column} has no element named {sel!r} (names: {names})") from None

    def _resolve_command(self) -> tuple[str | None, int | None]:
        """The commanded gripper: the ``action`` element named as the gripper's element (in teleoperation the
        leader arm's gripper), or (None, None)."""
        if self.gripper_column == "action" or self.gripper_index is None or "action" not in self.features:
            return None, None
        names = flat_names(self.features[self.gripper_column].get("names"))
        action_names = flat_names(self.features["action"].get("names"))
        try:
            name = names[self.gripper_index]
        except IndexError:
            return None, None
        return ("action", action_names.index(name)) if name in action_names else (None, None)

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
            return self.root / template.format(chunk_index=int(ep["data/chunk_index"]),
                                               file_index=int(ep["data/file_index"]))
        template = template or "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        chunk = index // int(self.info.get("chunks_size") or 1000)
        return self.root / template.format(episode_chunk=chunk, episode_index=index)

    def _video_path(self, ep: dict[str, Any], index: int) -> tuple[Path, float]:
        template = self.info.get("video_path")
        if not template:
            raise DatasetError(f"{self.root}: {self.camera} is a video feature but info.json has no video_path")
        if self.v3:
            key = f"videos/{self.camera}/"
            path = self.root / template.format(video_key=self.camera, chunk_index=int(ep[key + "chunk_index"]),
                                               file_index=int(ep[key + "file_index"]))
            return path, float(ep.get(key + "from_timestamp") or 0.0)
        chunk = index // int(self.info.get("chunks_size") or 1000)
        return self.root / template.format(episode_chunk=chunk, video_key=self.camera, episode_index=index), 0.0

    def episode(self, index: int) -> DemoEpisode:
        """Read one episode's table (gripper, timestamps, image column) and return it."""
        if index not in self._episodes:
            raise DatasetError(f"{self.root}: no episode {index} (have {len(self._episodes)} episodes)")
        ep = self._episodes[index]
        path = self._data_path(ep, index)
        if not path.exists():
            raise DatasetError(f"{self.root}: data file {path} of episode {index} is missing")
        columns = [self.gripper_column, "frame_index", "timestamp", "episode_index", "task_index"]
        if self.command_column:
            columns.append(self.command_column)
        if not self.camera_is_video:
            columns.append(self.camera)
        schema = self._pq.read_schema(path)
        # v3 files hold many episodes: the filter skips row groups of others by their statistics
        filters = [("episode_index", "=", index)] if self.v3 and "episode_index" in schema.names else None
        table = self._pq.read_table(path, columns=[c for c in columns if c in schema.names], filters=filters)
        if self.gripper_column not in table.column_names:
            raise DatasetError(f"{path}: no column {self.gripper_column!r}")
        if "episode_index" in table.column_names:
            mask = np.asarray(table.column("episode_index").to_numpy()) == index
            table = table.filter(mask)
        n = table.num_rows
        if n == 0:
            raise DatasetError(f"{path}: no rows of episode {index}")
        gripper = _element(table.column(self.gripper_column).to_pylist(), self.gripper_index, path, self.gripper_column)
        commanded = None
        if self.command_column and self.command_column in table.column_names:
            try:
                commanded = _element(table.column(self.command_column).to_pylist(), self.command_index, path,
                                     self.command_column)
            except DatasetError as exc:  # an extra signal: the episode is still segmented from the gripper alone
                log.warning("episode %d: commanded gripper not used: %s", index, exc)
        frames = (np.asarray(table.column("frame_index").to_numpy(), dtype=np.int64)
                  if "frame_index" in table.column_names else np.arange(n))
        timestamps = (np.asarray(table.column("timestamp").to_numpy(), dtype=float)
                      if "timestamp" in table.column_names else frames / self.fps)
        tasks = ep.get("tasks") or []
        if isinstance(tasks, str):
            tasks = [tasks]
        if not tasks and "task_index" in table.column_names:
            tasks = [self._tasks.get(int(table.column("task_index")[0].as_py()), "")]
        instruction = str(tasks[0]) if tasks else ""
        source = f"{self.root}#episode={index}"

        if self.camera_is_video:
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
        return DemoEpisode(index=index, instruction=instruction, fps=self.fps, gripper=gripper,
                           frame_indices=frames, source=source, camera=self.camera, _reader=reader, objects=objects,
                           commanded=commanded)


def _element(cells: list, index: int | None, path: Path, column: str) -> np.ndarray:
    """One float per row from a column of numbers or of vectors (element ``index``); None cells are NaN."""
    out = np.full(len(cells), np.nan)
    for i, v in enumerate(cells):
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            if index is None:
                raise DatasetError(f"{path}: {column} is a vector; name the element, e.g. '{column}[-1]'")
            if not -len(v) <= index < len(v):
                raise DatasetError(f"{path}: {column} row {i} has {len(v)} elements, no element {index}")
            item = v[index]
            out[i] = np.nan if item is None else float(item)
        else:
            out[i] = float(v)
    return out


def flat_names(names: Any) -> list[str]:
    """A feature's element names as one flat list: ``[...]``, ``{"motors": [...]}`` or nested ``[["a", "b"]]``."""
    if isinstance(names, dict):  # {"motors": [...]}
        names = next(iter(names.values()), None)
    out: list[str] = []
    stack = [names] if names is not None else []
    while stack:
        item = stack.pop(0)
        if isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif item is not None:
            out.append(str(item))
    return out


def open_dataset(path: str | Path, gripper: str = "observation.state[-1]", camera: str | None = None):
    """Open a demonstration dataset folder: LeRobot v2.x/v3.0, or a folder of this project's rollouts.

    Returns an object with ``episode_indices`` and ``episode(index) -> DemoEpisode``.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"dataset {root} is not a folder")
    if (root / "meta" / "info.json").exists():
        return LeRobotDataset(root, gripper=gripper, camera=camera)
    if (root / "rollout.json").exists() or next(root.rglob("rollout.json"), None) is not None:
        return RolloutDataset(root, gripper=gripper, camera=camera)
    raise DatasetError(f"{root}: not a LeRobot dataset (no meta/info.json) and no rollout folders (rollout.json)")
