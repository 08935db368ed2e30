"""A synthetic demonstration dataset with known answers, written in the LeRobot v2.1 or v3.0 layout.

A top-down table scene (blocks, a plate, a tray, a drawer with a handle) is rendered frame by frame while a
scripted gripper (a dark disc) picks and places blocks, opens the drawer, or grasps at nothing. Every
episode stores the gripper signal (noise and a few missing samples included), the rendered frames (PNG in
the parquet or an MP4 video), the per-frame object boxes (``meta/v2gp_objects.jsonl``, for the ``oracle``
grounder) and the plan a perfect V2GP run must produce (``meta/v2gp_truth.jsonl``: segments, plan and the
instruction after revision), so the pipeline can be checked end to end without a robot.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.v2gp.errors import require
from PIL import Image
from fractions import Fraction
from grounded_planner.rollout.record import RolloutRecorder

CAMERA = "observation.images.front"
WIDTH, HEIGHT = 320, 240
# name -> (category, kind, colour); the colours are what the test VLM server "sees"
SCENE = {
    "red block": ("block", "rigid", (220, 30, 30)),
    "yellow block": ("block", "rigid", (230, 200, 30)),
    "blue plate": ("plate", "fixture", (30, 60, 220)),
    "green tray": ("tray", "fixture", (30, 190, 70)),
    "orange drawer handle": ("drawer", "articulated", (240, 130, 20)),
}
TABLE_RGB = (185, 160, 120)
DRAWER_RGB = (120, 90, 60)
GRIPPER_RGB = (50, 50, 50)
# Episode scripts: (instruction, steps). A step is (kind, object, target): pick_place, open, empty_grasp, drop.
SCRIPTS = [
    ("put the red block on the blue plate", [("pick_place", "red block", "blue plate")]),
    (
        "put the red block on the blue plate and the yellow block on the green tray",
        [("pick_place", "red block", "blue plate"), ("pick_place", "yellow block", "green tray")],
    ),
    ("open the drawer", [("open", "orange drawer handle", "")]),
    # a failed grasp that is retried: the plan keeps both blocks, the instruction stays
    (
        "put the yellow block on the green tray and the red block on the blue plate",
        [
            ("empty_grasp", "yellow block", ""),
            ("pick_place", "yellow block", "green tray"),
            ("pick_place", "red block", "blue plate"),
        ],
    ),
    # a failed grasp that is not retried: the plan only moves the red block, the instruction is revised
    (
        "put the yellow block on the green tray and the red block on the blue plate",
        [("empty_grasp", "yellow block", ""), ("pick_place", "red block", "blue plate")],
    ),
    # the same block twice: the second grasp is where the first place put it
    (
        "put the red block on the blue plate, then move it to the green tray",
        [("pick_place", "red block", "blue plate"), ("pick_place", "red block", "green tray")],
    ),
    # the block slips out of the gripper on the way: no usable step, no plan
    ("put the yellow block on the green tray", [("drop", "yellow block", "green tray")]),
]


@dataclass
class SyntheticConfig:
    """What to generate."""

    episodes: int = 5  # number of episodes (the scripts above, cycled)
    seed: int = 0  # layout jitter and signal noise
    video: bool = False  # store frames as an MP4 per episode (v2.1) / one MP4 (v3.0) instead of PNG in parquet
    fps: int = 10  # frames per second
    noise_sigma: float = 0.01  # gripper signal noise (normalised units)
    dropouts: int = 2  # missing gripper samples per episode (outside the edges of a grasp)

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise InputError(f"episodes must be >= 1, got {self.episodes}")
        if self.fps < 1:
            raise InputError(f"fps must be >= 1, got {self.fps}")
        if self.noise_sigma < 0 or self.dropouts < 0:
            raise InputError("noise_sigma and dropouts must be >= 0")


def _box(center: np.ndarray, half: tuple[float, float]) -> np.ndarray:
    return np.array([center[0] - half[0], center[1] - half[1], center[0] + half[0], center[1] + half[1]])


class _Episode:
    """Simulates one scripted episode: states per frame, then renders them."""

    def __init__(self, rng: np.random.Generator, steps: list[tuple[str, str, str]], cfg: SyntheticConfig):
        j = lambda s: rng.uniform(-s, s)  # noqa: E731 - small layout jitter
        self.half = {
            "red block": (9.0, 9.0),
            "yellow block": (9.0, 9.0),
            "blue plate": (26.0, 22.0),
            "green tray": (30.0, 20.0),
            "orange drawer handle": (14.0, 5.0),
        }
        self.pos = {
            "red block": np.array([60 + j(12), 80 + j(12)]),
            "yellow block": np.array([70 + j(12), 150 + j(12)]),
            "blue plate": np.array([230 + j(10), 70 + j(8)]),
            "green tray": np.array([235 + j(10), 170 + j(8)]),
            "orange drawer handle": np.array([150 + j(8), 205.0]),
        }
        self.home = np.array([160.0, 120.0])
        self.ee = self.home.copy()
        self.grip = 0.0
        self.openness = 0.0
        self.held: str | None = None
        self.frames: list[dict[str, Any]] = []
        self.segments: list[tuple[int, int]] = []
        self.actions: list[dict[str, Any]] = []
        self._record(4)
        for kind, obj, target in steps:
            self._step(kind, obj, target, rng)
        self._move(self.home, 6)
        self._record(4)

    def _record(self, n: int = 1) -> None:
        for _ in range(n):
            self.frames.append(
                {
                    "ee": self.ee.copy(),
                    "grip": self.grip,
                    "openness": self.openness,
                    "pos": {k: v.copy() for k, v in self.pos.items()},
                }
            )

    def _move(self, goal: np.ndarray, n: int) -> None:
        start = self.ee.copy()
        for k in range(1, n + 1):
            self.ee = start + (goal - start) * k / n
            if self.held:
                self.pos[self.held] = self.ee.copy()
            if self.held == "orange drawer handle":
                self.openness = float(np.clip((self.ee[1] - 205.0) / 25.0, 0, 1))
            self._record()

    def _gripper(self, level: float, n: int = 3) -> tuple[int, int]:
        """Ramp the gripper to ``level`` over ``n`` frames; returns (last frame before, last frame of ramp)."""
        before = len(self.frames) - 1
        start = self.grip
        for k in range(1, n + 1):
            self.grip = start + (level - start) * k / n
            self._record()
        return before, len(self.frames) - 1

    def _step(self, kind: str, obj: str, target: str, rng: np.random.Generator) -> None:
        # where the object is when this step starts: the first frame's box, or where an earlier step put it
        first_box = _box(self.pos[obj], self.half[obj])
        self._move(self.pos[obj].copy(), 8)
        self._record(2)
        knee, _ = self._gripper(1.0 if kind == "empty_grasp" else (0.5 if kind == "open" else 0.7))
        self._record(2)
        if kind == "pick_place":
            self.held = obj
            dest = self.pos[target] + np.array([rng.uniform(-6, 6), rng.uniform(-5, 5)])
            self._move(dest, 10)
            self._record(1)
            self.held = None
            self.actions += [
                {"type": "grasp", "object": obj, "bbox": first_box.round(2).tolist()},
                {"type": "place", "object": obj, "target": target, "point": dest.round(2).tolist()},
            ]
        elif kind == "open":
            self.held = obj
            self._move(self.pos[obj] + np.array([0.0, 25.0]), 8)
            self._record(1)
            self.held = None
            self.actions.append({"type": "open", "object": obj, "bbox": first_box.round(2).tolist()})
        elif kind == "drop":  # the object slips out half way: the fingers close fully, it stays behind
            self.held = obj
            dest = self.pos[target]
            self._move(self.ee + (dest - self.ee) / 2, 7)
            self.held = None
            self._gripper(1.0, 2)
            self._move(dest, 4)
        else:  # empty grasp: the fingers close on nothing, the arm lifts away
            self._move(self.ee + np.array([15.0, -15.0]), 4)
        _, _ = self._gripper(0.0)
        end = len(self.frames) - 1
        self.segments.append((knee, end))
        self._record(2)
        self._move(self.ee + np.array([0.0, -20.0]), 4)

    # -- outputs --------------------------------------------------------------------------------------
    def render(self, i: int) -> np.ndarray:
        state = self.frames[i]
        img = np.empty((HEIGHT, WIDTH, 3), dtype=np.uint8)
        img[:] = TABLE_RGB

        def fill(box, color):
            x1, y1, x2, y2 = (int(round(v)) for v in box)
            img[max(0, y1) : max(0, y2), max(0, x1) : max(0, x2)] = color

        handle = state["pos"]["orange drawer handle"]
        fill((handle[0] - 40, 195 + 25 * state["openness"] - 15, handle[0] + 40, 240), DRAWER_RGB)
        order = ["blue plate", "green tray", "orange drawer handle", "red block", "yellow block"]
        for name in order:
            fill(_box(state["pos"][name], self.half[name]), SCENE[name][2])
        # the gripper disc, drawn in a 32x32 patch around it (a full-frame distance map per frame is slow)
        ee = state["ee"]
        x0, y0 = max(0, int(ee[0]) - 16), max(0, int(ee[1]) - 16)
        x1, y1 = min(WIDTH, int(ee[0]) + 17), min(HEIGHT, int(ee[1]) + 17)
        yy, xx = np.mgrid[y0:y1, x0:x1]
        dist = np.hypot(xx - ee[0], yy - ee[1])
        patch = img[y0:y1, x0:x1]
        patch[(dist < 12 - 4 * state["grip"]) & (dist > 9 - 4 * state["grip"])] = GRIPPER_RGB
        return img

    def gripper_signal(self, rng: np.random.Generator, cfg: SyntheticConfig) -> np.ndarray:
        sig = np.array([f["grip"] for f in self.frames]) + rng.normal(0, cfg.noise_sigma, len(self.frames))
        edges = set()
        for s, e in self.segments:
            edges.update(range(s - 2, s + 6))
            edges.update(range(e - 6, e + 3))
        candidates = [i for i in range(len(sig)) if i not in edges]
        for i in rng.choice(candidates, size=min(cfg.dropouts, len(candidates)), replace=False):
            sig[i] = np.nan
        return sig

    def object_tracks(self) -> list[dict[str, Any]]:
        tracks = []
        for name, (category, kind, _) in SCENE.items():
            boxes = [_box(f["pos"][name], self.half[name]).round(2).tolist() for f in self.frames]
            track = {"name": name, "category": category, "kind": kind, "boxes_px": boxes}
            if kind == "articulated":
                track["openness"] = [round(f["openness"], 4) for f in self.frames]
            tracks.append(track)
        return tracks


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=1)  # lossless either way; level 1 is fast
    return buf.getvalue()


def _write_video(path: Path, frames: list[np.ndarray], fps: int) -> None:
    av = require("av", "v2gp", "writing synthetic videos")

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.time_base = Fraction(1, fps)
        stream.options = {"crf": "10", "g": "10"}
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def simulate(cfg: SyntheticConfig):
    """Yield (episode index, instruction, simulation, frames, gripper signal 0..1, truth) per episode."""
    rng = np.random.default_rng(cfg.seed)
    for e in range(cfg.episodes):
        instruction, steps = SCRIPTS[e % len(SCRIPTS)]
        sim = _Episode(rng, steps, cfg)
        images = [sim.render(i) for i in range(len(sim.frames))]
        grip = sim.gripper_signal(rng, cfg)
        plan_instruction = instruction
        if "yellow" in instruction and not any(st[0] == "pick_place" and st[1] == "yellow block" for st in steps):
            plan_instruction = "put the red block on the blue plate"  # what the plan actually does
        truth = {
            "episode_index": e,
            "instruction": instruction,
            "plan_instruction": plan_instruction,
            "segments": [list(seg) for seg in sim.segments],
            "kept_segments": [list(seg) for seg, st in zip(sim.segments, steps) if st[0] in ("pick_place", "open")],
            "plan": {"instruction": plan_instruction, "image_size": [WIDTH, HEIGHT], "actions": sim.actions},
        }
        yield e, instruction, sim, images, grip, truth


def write_synthetic_rollouts(
    out: str | Path, cfg: SyntheticConfig | None = None, joint: str = "fr3_finger_joint1"
) -> Path:
    """The same episodes as rollout folders (rollout.json + rollout.mcap): color frames, and the gripper as a
    Franka finger joint (0.04 m open, 0 closed) in sensor_msgs/JointState; ``v2gp_truth.jsonl`` beside them."""

    cfg = cfg or SyntheticConfig()
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        raise InputError(f"{root} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    truth = []
    period_ns = int(1e9 / cfg.fps)
    for e, instruction, _sim, images, grip, expected in simulate(cfg):
        clock = [1_700_000_000_000_000_000 + e * 10**12]
        with RolloutRecorder(
            root / f"episode_{e:03d}",
            instruction=instruction,
            clock_ns=lambda clock=clock: clock[0],
            fsync_every_s=None,
        ) as rec:
            for image, g in zip(images, grip):
                if np.isfinite(g):  # a dropout: no joint state for this frame
                    rec.log_joint_state([joint, "fr3_joint1"], [0.04 * (1.0 - float(g)), 0.0])
                rec.log_frame(image)
                clock[0] += period_ns
        truth.append(expected)
    (root / "v2gp_truth.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
    return root


def write_synthetic_dataset(out: str | Path, cfg: SyntheticConfig | None = None, version: str = "v2.1") -> Path:
    """Write the dataset to ``out`` (created; must be empty or absent) and return its path."""
    cfg = cfg or SyntheticConfig()
    if version not in ("v2.1", "v3.0"):
        raise InputError(f"version must be v2.1 or v3.0, got {version!r}")
    pa = require("pyarrow", "v2gp", "writing the synthetic dataset")
    pq = require("pyarrow.parquet", "v2gp", "writing the synthetic dataset")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        raise InputError(f"{root} exists and is not empty")
    (root / "meta").mkdir(parents=True, exist_ok=True)
    instructions = sorted({SCRIPTS[i % len(SCRIPTS)][0] for i in range(cfg.episodes)})
    task_index = {t: i for i, t in enumerate(instructions)}

    tables, episodes_meta, objects, truth = [], [], [], []
    video_frames: list[np.ndarray] = []
    global_index = 0
    for e, instruction, sim, images, grip, expected in simulate(cfg):
        n = len(images)
        ee = np.array([f["ee"] for f in sim.frames], dtype=np.float32)
        state = [[float(ee[i, 0]), float(ee[i, 1]), None if np.isnan(grip[i]) else float(grip[i])] for i in range(n)]
        columns: dict[str, Any] = {
            "observation.state": pa.array(state, type=pa.list_(pa.float32())),
            "action": pa.array(state, type=pa.list_(pa.float32())),
            "timestamp": pa.array((np.arange(n) / cfg.fps).astype(np.float32)),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, e, dtype=np.int64)),
            "index": pa.array(np.arange(global_index, global_index + n, dtype=np.int64)),
            "task_index": pa.array(np.full(n, task_index[instruction], dtype=np.int64)),
        }
        if not cfg.video:
            columns[CAMERA] = pa.array(
                [{"bytes": _png(im), "path": f"frame_{i:06d}.png"} for i, im in enumerate(images)],
                type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            )
        table = pa.table(columns)
        meta: dict[str, Any] = {"episode_index": e, "tasks": [instruction], "length": n}
        if version == "v2.1":
            path = root / f"data/chunk-000/episode_{e:06d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            if cfg.video:
                _write_video(root / f"videos/chunk-000/{CAMERA}/episode_{e:06d}.mp4", images, cfg.fps)
        else:
            tables.append(table)
            meta.update(
                {
                    "data/chunk_index": 0,
                    "data/file_index": 0,
                    "dataset_from_index": global_index,
                    "dataset_to_index": global_index + n,
                }
            )
            if cfg.video:
                start_s = len(video_frames) / cfg.fps
                video_frames.extend(images)
                meta.update(
                    {
                        f"videos/{CAMERA}/chunk_index": 0,
                        f"videos/{CAMERA}/file_index": 0,
                        f"videos/{CAMERA}/from_timestamp": start_s,
                        f"videos/{CAMERA}/to_timestamp": len(video_frames) / cfg.fps,
                    }
                )
        episodes_meta.append(meta)
        objects.append({"episode_index": e, "objects": sim.object_tracks()})
        truth.append(expected)
        global_index += n

    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [3], "names": ["ee_x", "ee_y", "gripper"]},
        "action": {"dtype": "float32", "shape": [3], "names": ["ee_x", "ee_y", "gripper"]},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
        CAMERA: {
            "dtype": "video" if cfg.video else "image",
            "shape": [HEIGHT, WIDTH, 3],
            "names": ["height", "width", "channel"],
        },
    }
    info: dict[str, Any] = {
        "codebase_version": version,
        "robot_type": "synthetic_topdown",
        "fps": cfg.fps,
        "total_episodes": cfg.episodes,
        "total_frames": global_index,
        "total_tasks": len(instructions),
        "chunks_size": 1000,
        "features": features,
        "splits": {"train": f"0:{cfg.episodes}"},
    }
    if version == "v2.1":
        info["data_path"] = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        info["video_path"] = (
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4" if cfg.video else None
        )
        (root / "meta/episodes.jsonl").write_text("".join(json.dumps(m) + "\n" for m in episodes_meta))
        (root / "meta/tasks.jsonl").write_text(
            "".join(json.dumps({"task_index": i, "task": t}) + "\n" for t, i in task_index.items())
        )
    else:
        info["data_path"] = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
        info["video_path"] = (
            "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4" if cfg.video else None
        )
        (root / "data/chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(tables), root / "data/chunk-000/file-000.parquet")
        (root / "meta/episodes/chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(episodes_meta), root / "meta/episodes/chunk-000/file-000.parquet")
        pq.write_table(
            pa.table({"task_index": list(task_index.values()), "task": list(task_index)}), root / "meta/tasks.parquet"
        )
        if cfg.video:
            _write_video(root / f"videos/{CAMERA}/chunk-000/file-000.mp4", video_frames, cfg.fps)
    (root / "meta/info.json").write_text(json.dumps(info, indent=2))
    (root / "meta/v2gp_objects.jsonl").write_text("".join(json.dumps(o) + "\n" for o in objects))
    (root / "meta/v2gp_truth.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
    return root


def scene_colors() -> dict[str, tuple[int, int, int]]:
    """Object name -> RGB colour of the synthetic scene (what a colour-seeing test VLM server needs)."""
    return {name: color for name, (_, _, color) in SCENE.items()}
