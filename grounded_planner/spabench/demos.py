"""Demonstrations for the ID cells: the oracle's executions of ``id`` trials in the simulator, written as a
LeRobotDataset with LeRobot's own writer (the instruction as the task, a camera stream, the joints and the gripper),
so that ``v2gp run`` turns them into grounded-plan training data: train on the observed cells, test on the withheld.

The state follows LeRobot's SO-101 convention whatever the arm: joint positions in degrees named ``<joint>.pos`` and
``gripper.pos`` in 0..100 (0 closed, 100 fully open: the opening as a share of the gripper's full opening); the
action is the next frame's state. Only episodes where the oracle succeeded (Table I) are kept.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.geometry.targets import compute_targets
from grounded_planner.sim.backend import SimBackend, default_scenario_path
from grounded_planner.sim.export import gt_plan
from grounded_planner.sim.workcell import SimWorkcell
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.predicates import evaluate, object_positions
from grounded_planner.spabench.scenes import generate_trial

log = logging.getLogger(__name__)

CAMERA_KEY = "observation.images.front"
ROBOT_TYPES = {"so101": "so101_follower", "gp5": "gp5", "fr3": "fr3"}


class DemoError(SpaBenchError):
    """Demonstrations that cannot be written (LeRobot missing, the output folder exists, no success)."""


@dataclass
class DemoEpisode:
    """One recorded oracle execution."""

    trial_id: str
    task: str  # the instruction (LeRobot's per-frame task)
    images: list[np.ndarray]
    states: list[np.ndarray]
    joint_names: list[str]
    grasps: int  # grasp steps the oracle executed


def record_episode(trial, fps: float = 10.0, image_scale: float = 0.5) -> tuple[DemoEpisode, bool, str]:
    """Run the oracle on ``trial`` in the simulator, sampling the camera and the joints every ``1 / fps`` sim
    seconds; returns the episode, whether Table I calls it a success, and the verdict's detail."""
    with SimWorkcell(trial.scenario) as cell:
        config = (
            ExecutorConfig.load(default_scenario_path(f"../{cell.robot.executor_config}"))
            if cell.robot.executor_config
            else ExecutorConfig()
        )
        joints = [j.split("/")[-1] for j in cell.robot.arm_joints]
        names = [f"{j}.pos" for j in joints] + ["gripper.pos"]
        images: list[np.ndarray] = []
        states: list[np.ndarray] = []
        period = 1.0 / fps
        next_t = [cell.time_s]

        def sample(time_s: float | None = None) -> None:
            rgb, _ = cell.render()
            if image_scale != 1.0:
                step = int(round(1 / image_scale))
                rgb = rgb[::step, ::step]
            opening = 100.0 * cell.gripper_width() / cell.robot.max_opening_m
            images.append(np.ascontiguousarray(rgb))
            states.append(np.array([*np.degrees(cell.arm_q()), min(max(opening, 0.0), 100.0)], dtype=np.float32))

        def tick(time_s: float) -> None:
            if time_s >= next_t[0]:
                next_t[0] += period
                sample()

        initial = object_positions(cell)
        rgb, depth_m = cell.render()
        plan = gt_plan(cell)
        sample()
        cell.tick_listeners.append(tick)
        with SimBackend(cell) as backend:
            execution = Executor(backend, config).execute(
                plan, compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
            )
            cell.step(int(0.5 / cell.model.opt.timestep))
        sample()
        grasps = sum(1 for s in execution.to_dict().get("steps", []) if s.get("type") == "grasp")
        verdict = evaluate(trial.task, trial.spec, trial.expects_action, initial, object_positions(cell), grasps > 0)
    return (
        DemoEpisode(trial.trial_id, trial.instruction, images, states, names, grasps),
        verdict.success,
        verdict.detail,
    )


def write_demos(
    tasks: Iterable[str],
    episodes: int,
    robot: str,
    out_dir: str | Path,
    first_seed: int = 0,
    fps: int = 10,
    max_attempts_factor: int = 3,
) -> dict[str, Any]:
    """Record ``episodes`` successful oracle executions of ``id`` trials per task (seeds from ``first_seed`` on,
    at most ``max_attempts_factor`` x as many tries) and write them as one LeRobotDataset at ``out_dir``.

    Returns a report: episodes written per task, the trials left out and why, and the dataset's path.
    """
    out = Path(out_dir)
    if out.exists():
        raise DemoError(f"{out} exists already; LeRobotDataset.create writes a new folder")
    if episodes < 1:
        raise DemoError(f"--episodes must be >= 1, got {episodes}")
    try:
        # lazy: optional SDK (lerobot, which pulls torch), not in install_requires
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except Exception as exc:  # ImportError, or a broken torch/torchvision pairing raising at import time
        raise DemoError(
            f"writing demonstrations needs lerobot, which does not import here ({type(exc).__name__}: {exc})"
        ) from exc
    recorded: list[DemoEpisode] = []
    skipped: list[dict[str, str]] = []
    per_task: dict[str, int] = {}
    for task in tasks:
        per_task[task] = 0
        seed = first_seed
        while per_task[task] < episodes and seed < first_seed + max_attempts_factor * episodes:
            trial = generate_trial(task, "id", seed, robot)
            episode, ok, detail = record_episode(trial, fps=fps)
            if ok and episode.grasps > 0:
                recorded.append(episode)
                per_task[task] += 1
            else:
                skipped.append({"trial_id": trial.trial_id, "why": detail})
                log.warning("demo %s left out: %s", trial.trial_id, detail)
            seed += 1
    if not recorded:
        raise DemoError("no oracle execution succeeded: nothing to write")
    h, w = recorded[0].images[0].shape[:2]
    names = recorded[0].joint_names
    features = {
        CAMERA_KEY: {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (len(names),), "names": names},
        "action": {"dtype": "float32", "shape": (len(names),), "names": names},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # moved in whole at the end
    root = staging / out.name
    try:
        dataset = LeRobotDataset.create(
            repo_id=f"local/{out.name}",
            fps=fps,
            features=features,
            root=root,
            robot_type=ROBOT_TYPES[robot],
            use_videos=False,
        )
        for ep in recorded:
            for k, (image, state) in enumerate(zip(ep.images, ep.states)):
                dataset.add_frame(
                    {
                        CAMERA_KEY: image,
                        "observation.state": state,
                        "action": ep.states[min(k + 1, len(ep.states) - 1)],
                        "task": ep.task,
                    }
                )
            dataset.save_episode()
        dataset.finalize()
        shutil.move(str(root), str(out))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "root": str(out),
        "robot": robot,
        "episodes": len(recorded),
        "per_task": per_task,
        "frames": sum(len(ep.images) for ep in recorded),
        "fps": fps,
        "skipped": skipped,
        "grasps": [ep.grasps for ep in recorded],
        "trials": [ep.trial_id for ep in recorded],
    }


__all__ = ["DemoError", "DemoEpisode", "record_episode", "write_demos"]
