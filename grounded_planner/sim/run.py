"""One scenario end to end without ROS: first frame -> plan (GT, a file, or a planner) -> 3D targets (exact, or
back-projected from the rendered depth) -> the executor on the sim backend -> success predicates (+ a GIF)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

TARGET_SOURCES = ("depth", "gt")


@dataclass
class SimRunResult:
    """What one run did; ``to_dict()`` is the ``sim run`` JSON (and fits a rollout record's labels)."""

    scenario: str
    seed: int | None
    plan: Any  # GroundedPlan executed
    targets: Any  # TargetSet used
    execution: Any  # ExecutionResult
    success: bool  # every success predicate holds after the run
    predicates: list[dict] = field(default_factory=list)
    sim_time_s: float = 0.0
    wall_s: float = 0.0
    gif: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "seed": self.seed, "success": self.success,
                "execution": self.execution.to_dict(), "predicates": self.predicates,
                "targets": self.targets.to_dict(), "plan": self.plan.to_dict(),
                "sim_time_s": round(self.sim_time_s, 3), "wall_s": round(self.wall_s, 3), "gif": self.gif}


def run_scenario(scenario_path: str | Path, seed: int | None = 0, plan=None,
                 planner: Callable[[Any, str], Any] | None = None, targets: str = "depth",
                 executor_config=None, gif_path: str | Path | None = None, rollout_dir: str | Path | None = None,
                 robot: str | None = None, settle_s: float = 0.5) -> SimRunResult:
    """Run a scenario once.

    Parameters
    ----------
    plan : GroundedPlan, optional
        The plan to execute (pixels of the first frame). Default: ``planner(rgb, instruction)`` when a planner
        is given, else the scenario's exact GT plan.
    targets : ``depth`` back-projects the plan with the geometry layer from the rendered depth and the true
        calibration (the real pipeline); ``gt`` uses the exact targets from the sim state (GT plan only).
    executor_config : ExecutorConfig, optional (the execution layer's defaults otherwise).
    gif_path : where to write an animated GIF of the run (None: no recording).
    robot : ``gp5`` or ``fr3`` to override the scenario's arm model.
    rollout_dir : a new folder for a rollout record (rollout.json + rollout.mcap: first and last frame, plan,
        targets, feedback, joint states at 10 Hz, result) labelled by the success predicates (source ``sim``).
    """
    from grounded_planner.execution.config import ExecutorConfig
    from grounded_planner.execution.executor import Executor
    from grounded_planner.geometry.targets import compute_targets
    from grounded_planner.sim.backend import SimBackend
    from grounded_planner.sim.export import gt_plan, gt_targets
    from grounded_planner.sim.video import FrameRecorder
    from grounded_planner.sim.workcell import SimWorkcell

    if targets not in TARGET_SOURCES:
        raise ValueError(f"targets must be one of {', '.join(TARGET_SOURCES)}, got {targets!r}")
    if targets == "gt" and (plan is not None or planner is not None):
        raise ValueError("targets='gt' needs the scenario's own GT plan; use targets='depth' for other plans")
    wall0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        cell = stack.enter_context(SimWorkcell.from_scenario(scenario_path, seed=seed, robot=robot))
        config = executor_config or ExecutorConfig()
        recorder = None
        if rollout_dir is not None:
            from grounded_planner.rollout.record import RolloutRecorder

            recorder = stack.enter_context(RolloutRecorder(
                rollout_dir, instruction=cell.scenario.instruction, task=cell.scenario.name,
                scene_id=f"{cell.scenario.name}-s{seed}", model="sim-ground-truth" if plan is None and planner is None
                else getattr(plan, "model", ""), config=config,
                extra={"sim": {"scenario": str(scenario_path), "seed": seed, "targets": targets,
                               "robot": cell.robot.name}}))
        rgb, depth_m = cell.render()
        if recorder is not None:
            recorder.log_frame(rgb, depth_m, cell.camera_model)
        t_plan = time.perf_counter()
        if plan is None:
            plan = planner(rgb, cell.scenario.instruction) if planner is not None else gt_plan(cell)
        target_set = gt_targets(cell, plan) if targets == "gt" else \
            compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
        if recorder is not None:
            recorder.log_plan(plan, planning_time_s=time.perf_counter() - t_plan)
            recorder.log_targets(target_set)
            ticks = [0]

            def log_joints(_time_s: float) -> None:
                ticks[0] += 1
                if ticks[0] % 5 == 0:  # every 5th 20 ms tick: 10 Hz
                    with cell.lock:
                        q = [*cell.arm_q(), *cell.data.qpos[cell._finger_qadr]]
                    recorder.log_joint_state([*cell.robot.arm_joints, *cell.robot.finger_joints], q)

            cell.tick_listeners.append(log_joints)
        video = FrameRecorder(cell) if gif_path is not None else None
        sim0, t_exec = cell.time_s, time.perf_counter()
        with video or contextlib.nullcontext(), SimBackend(cell) as backend:
            feedback = recorder.log_feedback if recorder is not None else None
            execution = Executor(backend, config).execute(plan, target_set, on_feedback=feedback)
            cell.step(int(settle_s / cell.model.opt.timestep))
        evaluated = cell.evaluate()
        success = all(r.ok for r in evaluated)
        if recorder is not None:
            recorder.log_result(execution, execution_time_s=time.perf_counter() - t_exec)
            recorder.log_frame(*cell.render(), cell.camera_model)
            recorder.set_label(success, notes="; ".join(f"{r.predicate.type} {r.predicate.object}: {r.detail}"
                                                         for r in evaluated), source="sim")
        gif = str(video.save_gif(gif_path)) if video is not None else None
        return SimRunResult(scenario=cell.scenario.name, seed=seed, plan=plan, targets=target_set,
                            execution=execution, success=success, predicates=[r.to_dict() for r in evaluated],
                            sim_time_s=cell.time_s - sim0, wall_s=time.perf_counter() - wall0, gif=gif)
