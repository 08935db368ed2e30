"""Small LeRobot v2.1 datasets of other embodiments' layouts, written with pyarrow (what a recorder writes):
one parquet per episode, meta/info.json (features with names), meta/episodes.jsonl and meta/tasks.jsonl.

Used by test/test_v2gp_embodiments.py for the failure cases of issue #26 and DROID's layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def plateaus(*spells: tuple[float, int], noise: float = 0.0, ramp: int = 6, seed: int = 0) -> np.ndarray:
    """A signal of flat spells (level, frames) joined by linear ramps of ``ramp`` frames (part of the next spell),
    plus Gaussian noise of ``noise``. The first frame of spell k+1's ramp follows the last frame of spell k."""
    out: list[float] = []
    for k, (level, n) in enumerate(spells):
        if k == 0:
            out += [level] * n
            continue
        prev = out[-1]
        out += list(np.linspace(prev, level, ramp + 1)[1:])
        out += [level] * (n - ramp)
    rng = np.random.default_rng(seed)
    return np.asarray(out) + (rng.normal(0.0, noise, len(out)) if noise else 0.0)


def write_v21(
    root: Path,
    features: dict[str, dict[str, Any]],
    episodes: list[dict[str, Any]],
    robot_type: str | None,
    fps: int = 30,
) -> Path:
    """Write a LeRobot v2.1 dataset. ``episodes``: per episode a dict of column -> per-frame values (vectors as
    (T, K) arrays, scalars as (T,)), plus "task" (the instruction)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "data/chunk-000").mkdir(parents=True, exist_ok=True)
    tasks: dict[str, int] = {}
    meta, index = [], 0
    for e, ep in enumerate(episodes):
        columns = {k: v for k, v in ep.items() if k != "task"}
        n = len(next(iter(columns.values())))
        task = tasks.setdefault(ep.get("task", "pick up the object"), len(tasks))
        table = {
            k: (np.asarray(v, dtype=np.float32).tolist() if not isinstance(v, list) else v) for k, v in columns.items()
        }
        table.update(
            {
                "timestamp": (np.arange(n) / fps).astype(np.float32).tolist(),
                "frame_index": list(range(n)),
                "episode_index": [e] * n,
                "index": list(range(index, index + n)),
                "task_index": [task] * n,
            }
        )
        pq.write_table(pa.table(table), root / f"data/chunk-000/episode_{e:06d}.parquet")
        meta.append({"episode_index": e, "tasks": [ep.get("task", "pick up the object")], "length": n})
        index += n
    features = {
        **features,
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {
        "codebase_version": "v2.1",
        "robot_type": robot_type,
        "fps": fps,
        "total_episodes": len(episodes),
        "total_frames": index,
        "chunks_size": 1000,
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
        "features": features,
    }
    (root / "meta/info.json").write_text(json.dumps(info, indent=2))
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps(m) + "\n" for m in meta))
    (root / "meta/tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for t, i in tasks.items())
    )
    return root


def droid_from_synthetic(src: Path, dst: Path) -> Path:
    """The synthetic dataset (``v2gp synth``, v2.1 with images) rewritten in DROID's LeRobot layout
    (cadene/droid_1.0.1 / lerobot/droid_1.0.1): ``observation.state.gripper_position`` and
    ``action.gripper_position`` (0 open .. 1 closed), joint and cartesian positions, three cameras
    (``observation.images.exterior_1_left``, ``exterior_2_left``, ``wrist_left``), the instruction in per-frame
    ``language_instruction`` columns (the tasks left empty), robot_type ``franka``."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    src, dst = Path(src), Path(dst)
    shutil.copytree(src / "meta", dst / "meta")
    info = json.loads((src / "meta/info.json").read_text())
    camera = next(k for k, f in info["features"].items() if f["dtype"] == "image")
    episodes = [json.loads(line) for line in (src / "meta/episodes.jsonl").read_text().splitlines()]
    (dst / "data/chunk-000").mkdir(parents=True)
    for ep in episodes:
        name = f"data/chunk-000/episode_{ep['episode_index']:06d}.parquet"
        t = pq.read_table(src / name).to_pydict()
        n = len(t["frame_index"])
        state = np.asarray(t["observation.state"], dtype=np.float32)
        rng = np.random.default_rng(ep["episode_index"])
        out = {
            "observation.images.exterior_1_left": t[camera],
            "observation.images.exterior_2_left": t[camera],
            "observation.images.wrist_left": t[camera],
            "observation.state.gripper_position": state[:, 2:3].tolist(),
            "observation.state.joint_position": rng.normal(0, 0.1, (n, 7)).astype(np.float32).tolist(),
            "observation.state.cartesian_position": np.c_[state[:, :2], rng.normal(0, 0.1, (n, 4))]
            .astype(np.float32)
            .tolist(),
            "action.gripper_position": state[:, 2:3].tolist(),
            "language_instruction": [ep["tasks"][0]] * n,
            "language_instruction_2": [""] * n,
            "language_instruction_3": [""] * n,
            "is_first": [i == 0 for i in range(n)],
            **{k: t[k] for k in ("timestamp", "frame_index", "episode_index", "index", "task_index")},
        }
        pq.write_table(pa.table(out), dst / name)
        ep["tasks"] = [""]  # DROID's instruction lives in the per-frame fields
    (dst / "meta/episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    image = info["features"][camera]
    info["robot_type"] = "franka"
    info["features"] = {
        "observation.images.exterior_1_left": image,
        "observation.images.exterior_2_left": image,
        "observation.images.wrist_left": image,
        "observation.state.gripper_position": {"dtype": "float32", "shape": [1], "names": None},
        "observation.state.joint_position": {"dtype": "float32", "shape": [7], "names": None},
        "observation.state.cartesian_position": {"dtype": "float32", "shape": [6], "names": None},
        "action.gripper_position": {"dtype": "float32", "shape": [1], "names": None},
        "language_instruction": {"dtype": "string", "shape": [1], "names": None},
        "language_instruction_2": {"dtype": "string", "shape": [1], "names": None},
        "language_instruction_3": {"dtype": "string", "shape": [1], "names": None},
        "is_first": {"dtype": "bool", "shape": [1], "names": None},
        **{k: info["features"][k] for k in ("timestamp", "frame_index", "episode_index", "index", "task_index")},
    }
    (dst / "meta/info.json").write_text(json.dumps(info, indent=2))
    return dst
