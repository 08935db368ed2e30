"""Export rollouts to a LeRobotDataset (lerobot imported only here, only when exporting).

Each rollout becomes one episode, resampled at ``fps`` from its bag: at time ``k / fps`` the frame holds
the last color image and the last joint state logged at or before it (sample-and-hold, as a policy would
have seen them). Features: ``observation.images.color`` (H, W, 3), and when joint states were recorded
``observation.state`` (joint positions) and ``action`` (the next frame's joint positions, the target a
position-controlled arm was commanded to). Depth is not exported (LeRobot images are 3-channel). The
episode's task is the instruction; success, failure mode, condition and scene go to a sidecar file
``meta/grounded_planner_rollouts.jsonl`` (one line per episode index), since LeRobot has no place for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.rollout.bag import image_to_rgb
from grounded_planner.rollout.record import RolloutRecord, RolloutTopics

SIDECAR = "meta/grounded_planner_rollouts.jsonl"


class ExportError(InputError):
    """Rollouts that cannot be exported as asked (lerobot missing, no frames, mismatched joints)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


@dataclass
class EpisodeFrames:
    """One rollout resampled at a fixed rate, ready for ``LeRobotDataset.add_frame``."""

    task: str
    images: list[np.ndarray] = field(default_factory=list)  # (H, W, 3) uint8 each
    states: list[np.ndarray] | None = None  # (n_joints,) float32 each
    joint_names: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.images)


def resample_rollout(record: RolloutRecord, fps: int, topics: RolloutTopics | None = None) -> EpisodeFrames:
    """The rollout's color frames (and joint states) sampled-and-held at ``fps`` over the recording."""
    if fps <= 0:
        raise ExportError(f"fps must be positive, got {fps}")
    topics = topics or RolloutTopics()
    colors: list[tuple[int, Any]] = []
    joints: list[tuple[int, Any]] = []
    for m in record.messages(topics=[*topics.color_topics, topics.joint_states]):  # raw or compressed colour
        (colors if m.topic in topics.color_topics else joints).append((m.log_time_ns, m.msg))
    if not colors:
        raise ExportError(f"{record.directory}: no color frames on {' or '.join(topics.color_topics)} to export")
    t0, t_end = colors[0][0], max(colors[-1][0], joints[-1][0] if joints else 0)
    period_ns = 1e9 / fps
    n = int((t_end - t0) // period_ns) + 1
    out = EpisodeFrames(task=str(record.data.get("instruction") or record.data.get("task") or "unspecified"))
    if joints:
        out.joint_names = list(joints[0][1].name)
        out.states = []
    ci = ji = 0
    for k in range(n):
        t = t0 + k * period_ns
        while ci + 1 < len(colors) and colors[ci + 1][0] <= t:
            ci += 1
        out.images.append(image_to_rgb(colors[ci][1]))
        if joints:
            while ji + 1 < len(joints) and joints[ji + 1][0] <= t:
                ji += 1
            msg = joints[ji][1]
            if list(msg.name) != out.joint_names:
                raise ExportError(
                    f"{record.directory}: joint names changed within the rollout "
                    f"({out.joint_names} -> {list(msg.name)})"
                )
            out.states.append(np.asarray(msg.position, dtype=np.float32))
    return out


def lerobot_features(first: EpisodeFrames) -> dict[str, dict[str, Any]]:
    """LeRobot feature spec for episodes shaped like ``first``."""
    h, w = first.images[0].shape[:2]
    features: dict[str, dict[str, Any]] = {
        "observation.images.color": {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]},
    }
    if first.states is not None:
        spec = {"dtype": "float32", "shape": (len(first.joint_names),), "names": list(first.joint_names)}
        features["observation.state"] = spec
        features["action"] = dict(spec)
    return features


def _frames(ep: EpisodeFrames):
    for k, image in enumerate(ep.images):
        frame: dict[str, Any] = {"observation.images.color": image, "task": ep.task}
        if ep.states is not None:
            frame["observation.state"] = ep.states[k]
            frame["action"] = ep.states[min(k + 1, len(ep.states) - 1)]
        yield frame


def export_lerobot(
    records: Sequence[RolloutRecord],
    repo_id: str,
    root: str | Path,
    fps: int = 15,
    robot_type: str = "",
    topics: RolloutTopics | None = None,
) -> dict[str, Any]:
    """Write ``records`` as a new LeRobotDataset at ``root``; returns a small report dict."""
    try:
        # lazy: optional SDK (lerobot), not in install_requires
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except Exception as exc:  # ImportError, or a broken torch/torchvision pairing raising at import time
        raise ExportError(
            f"exporting needs lerobot, which does not import here ({type(exc).__name__}: {exc}); "
            "install it with `pip install lerobot` (it pulls torch)",
            3,
        ) from exc
    root = Path(root)
    if root.exists():
        raise ExportError(f"{root} exists already; LeRobotDataset.create writes a new folder")
    if not records:
        raise ExportError("no rollouts to export")
    episodes = [resample_rollout(r, fps, topics) for r in records]
    features = lerobot_features(episodes[0])
    for r, ep in zip(records, episodes):
        if lerobot_features(ep) != features:
            raise ExportError(
                f"{r.directory}: image size or joints differ from {records[0].directory}; "
                "export them into separate datasets"
            )
    dataset = LeRobotDataset.create(
        repo_id=repo_id, fps=fps, features=features, root=root, robot_type=robot_type or None, use_videos=False
    )
    sidecar: list[dict[str, Any]] = []
    for index, (r, ep) in enumerate(zip(records, episodes)):
        for frame in _frames(ep):
            dataset.add_frame(frame)
        dataset.save_episode()
        sidecar.append(
            {
                "episode_index": index,
                "episode_id": r.episode_id,
                "task": r.data.get("task", ""),
                "condition": r.data.get("condition", ""),
                "scene_id": r.data.get("scene_id", ""),
                "instruction": r.data.get("instruction", ""),
                "success": r.success,
                "failure_mode": r.failure_mode,
                "status": r.status,
                "frames": len(ep),
            }
        )
    if hasattr(dataset, "finalize"):  # lerobot >= 0.4 (dataset v3) must close its parquet files
        dataset.finalize()
    (root / SIDECAR).parent.mkdir(parents=True, exist_ok=True)
    with open(root / SIDECAR, "w", encoding="utf-8") as f:
        for line in sidecar:
            f.write(json.dumps(line) + "\n")
    return {
        "root": str(root),
        "repo_id": repo_id,
        "episodes": len(episodes),
        "frames": sum(len(ep) for ep in episodes),
        "fps": fps,
        "features": sorted(features),
    }
