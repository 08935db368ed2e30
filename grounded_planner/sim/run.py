"""One scenario end to end without ROS: first frame -> plan (GT, a file, or a planner) -> 3D targets (exact, or
back-projected from the rendered depth) -> the executor on the sim backend -> success predicates (+ a GIF)."""

from __future__ import annotations

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
                 executor_config=None, gif_path: str | Path | None = None, settle_s: float = 0.5) -> SimRunResult:
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
    wall0 = time.perf_counter()
    with SimWorkcell.from_scenario(scenario_path, seed=seed) as cell:
        rgb, depth_m = cell.render()
        is_gt = plan is None and planner is None
        if plan is None:
            plan = planner(rgb, cell.scenario.instruction) if planner is not None else gt_plan(cell)
        if targets == "gt":
            if not is_gt:
                raise ValueError("targets='gt' needs the scenario's own GT plan; use targets='depth' for other plans")
            target_set = gt_targets(cell, plan)
        else:
            target_set = compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
        sim0 = cell.time_s
        recorder = FrameRecorder(cell) if gif_path is not None else None
        with SimBackend(cell) as backend:
            executor = Executor(backend, executor_config or ExecutorConfig())
            if recorder is not None:
                with recorder:
                    execution = executor.execute(plan, target_set)
                    cell.step(int(settle_s / cell.model.opt.timestep))
            else:
                execution = executor.execute(plan, target_set)
                cell.step(int(settle_s / cell.model.opt.timestep))
        evaluated = cell.evaluate()
        gif = str(recorder.save_gif(gif_path)) if recorder is not None else None
        return SimRunResult(scenario=cell.scenario.name, seed=seed, plan=plan, targets=target_set, execution=execution,
                            success=all(r.ok for r in evaluated), predicates=[r.to_dict() for r in evaluated],
                            sim_time_s=cell.time_s - sim0, wall_s=time.perf_counter() - wall0, gif=gif)
