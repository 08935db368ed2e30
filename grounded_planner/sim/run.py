"""One scenario end to end without ROS: first frame -> plan (GT, a file, or a VLM looking at the rendered frame)
-> 3D targets (exact, or back-projected from the rendered depth) -> the executor on the sim backend, open loop or
closed loop (each step checked, re-grounded or replanned) -> success predicates (+ a GIF, a rollout record)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from grounded_planner.errors import InputError
from grounded_planner.execution.closed_loop import ClosedLoop, Observation
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.geometry.errors import GeometryError
from grounded_planner.geometry.targets import TargetSet, compute_targets
from grounded_planner.sim.backend import SimBackend, default_scenario_path
from grounded_planner.sim.camera import BASE_FRAME
from grounded_planner.sim.export import gt_plan, gt_targets
from grounded_planner.sim.scenario import Scenario
from grounded_planner.sim.video import FrameRecorder
from grounded_planner.sim.workcell import SimWorkcell
from grounded_planner.vlm.errors import VLMError
from grounded_planner.rollout.taxonomy import auto_failure_mode
from grounded_planner.rollout.record import RolloutRecorder

TARGET_SOURCES = ("depth", "gt")
CONDITIONS = ("open_loop", "closed_loop")


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
    condition: str = "open_loop"
    perturbations: list[str] = field(default_factory=list)  # the perturbations that were active in this run
    planner_error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "condition": self.condition,
            "success": self.success,
            "execution": None if self.execution is None else self.execution.to_dict(),
            "predicates": self.predicates,
            "perturbations": self.perturbations,
            "targets": None if self.targets is None else self.targets.to_dict(),
            "plan": None if self.plan is None else self.plan.to_dict(),
            "planner_error": self.planner_error,
            "sim_time_s": round(self.sim_time_s, 3),
            "wall_s": round(self.wall_s, 3),
            "gif": self.gif,
        }


def run_scenario(
    scenario_path: str | Path | Scenario,
    seed: int | None = 0,
    plan=None,
    planner: Callable[[Any, str], Any] | None = None,
    targets: str = "depth",
    executor_config=None,
    gif_path: str | Path | None = None,
    rollout_dir: str | Path | None = None,
    robot: str | None = None,
    settle_s: float = 0.5,
    vlm: Any = None,
    condition: str = "open_loop",
    trial: int = 0,
) -> SimRunResult:
    """Run a scenario once.

    Parameters
    ----------
    scenario_path : a scenario YAML file, or a :class:`~grounded_planner.sim.scenario.Scenario` (a generated one,
        e.g. a Spa-Bench trial's; ``seed`` still draws its ``randomize`` ranges, None keeps it as it is).
    plan : GroundedPlan, optional
        The plan to execute (pixels of the first frame). Default: ``planner(rgb, instruction)`` when a planner
        is given, else the scenario's exact GT plan.
    targets : ``depth`` back-projects the plan with the geometry layer from the rendered depth and the true
        calibration (the real pipeline); ``gt`` uses the exact targets from the sim state (GT plan only).
    gif_path : where to write an animated GIF of the run (None: no recording).
    robot : ``gp5``, ``fr3`` or ``so101`` to override the scenario's arm model.
    executor_config : default: the execution layer's defaults; for the SO-101, config/execution_so101.yaml.
    vlm : callable ``cell -> context manager of a SimVLM`` (see :func:`grounded_planner.sim.vlm.sim_vlm`): the
        planner looks at rendered frames; ``closed_loop`` also re-grounds and replans with it.
    condition : ``open_loop`` (the plan of the first frame, executed blind) or ``closed_loop`` (every step checked
        and recovered, budgets from ``executor_config.closed_loop``); the rollout's ``condition``.
    rollout_dir : a new folder for a rollout record (rollout.json + rollout.mcap: first and last frame, plan,
        targets, feedback, joint states at 10 Hz, result) labelled by the success predicates (source ``sim``).
    """

    if targets not in TARGET_SOURCES:
        raise InputError(f"targets must be one of {', '.join(TARGET_SOURCES)}, got {targets!r}")
    if condition not in CONDITIONS:
        raise InputError(f"condition must be one of {', '.join(CONDITIONS)}, got {condition!r}")
    if condition == "closed_loop" and vlm is None:
        raise InputError("closed loop needs a planner to re-ground and replan with (vlm)")
    if targets == "gt" and (plan is not None or planner is not None):
        raise InputError("targets='gt' needs the scenario's own GT plan; use targets='depth' for other plans")
    wall0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if isinstance(scenario_path, Scenario):
            scenario = scenario_path if robot is None else dataclasses.replace(scenario_path, robot=robot)
            cell = stack.enter_context(SimWorkcell(scenario, seed=seed))
        else:
            cell = stack.enter_context(SimWorkcell.from_scenario(scenario_path, seed=seed, robot=robot))
        config = executor_config or ExecutorConfig()
        if executor_config is None and cell.robot.executor_config:
            # the arm's own heights and envelope (the defaults are sized for a Franka): its shipped config
            config = ExecutorConfig.load(default_scenario_path(f"../{cell.robot.executor_config}"))
        recorder = None
        if rollout_dir is not None:
            active = [p.type for p in cell.scenario.perturbations if p.active]
            recorder = stack.enter_context(
                RolloutRecorder(
                    rollout_dir,
                    instruction=cell.scenario.instruction,
                    task=cell.scenario.name,
                    condition=condition,
                    scene_id=f"{cell.scenario.name}-s{seed}",
                    trial=trial,
                    model="sim-ground-truth"
                    if plan is None and planner is None and vlm is None
                    else getattr(plan, "model", ""),
                    config=config,
                    extra={
                        "sim": {
                            "scenario": cell.scenario.source or cell.scenario.name
                            if isinstance(scenario_path, Scenario)
                            else str(scenario_path),
                            "seed": seed,
                            "targets": targets,
                            "robot": cell.robot.name,
                            "perturbations": active,
                        }
                    },
                )
            )
        sim_vlm = stack.enter_context(vlm(cell)) if vlm is not None else None
        rgb, depth_m = cell.render()
        if recorder is not None:
            recorder.log_frame(rgb, depth_m, cell.camera_model)
        t_plan = time.perf_counter()
        if plan is None:
            try:
                plan = (
                    sim_vlm.plan(rgb, cell.scenario.instruction)
                    if sim_vlm is not None
                    else planner(rgb, cell.scenario.instruction)
                    if planner is not None
                    else gt_plan(cell)
                )
            except VLMError as exc:  # the planner failing is this run's outcome, recorded, not a crash
                return _planner_failed(cell, seed, condition, recorder, str(exc), wall0)
        try:
            target_set = (
                gt_targets(cell, plan)
                if targets == "gt"
                else compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
            )
        except GeometryError as exc:
            if condition != "closed_loop":
                return _planner_failed(cell, seed, condition, recorder, f"back-projection: {exc}", wall0, plan)
            target_set = TargetSet(frame=BASE_FRAME, targets=[], warnings=[str(exc)])  # the loop re-grounds
        if recorder is not None:
            recorder.log_plan(plan, planning_time_s=time.perf_counter() - t_plan)
            recorder.log_targets(target_set)
            ticks = [0]

            def log_joints(_time_s: float) -> None:
                ticks[0] += 1
                if ticks[0] % 5 == 0:  # every 5th 20 ms tick: 10 Hz
                    # the SO-101's one jaw hinge is named twice in finger_joints: log each joint once
                    fingers = list(dict.fromkeys(cell.robot.finger_joints))
                    with cell.lock:
                        q = [*cell.arm_q(), *cell.data.qpos[cell._finger_qadr[: len(fingers)]]]
                    recorder.log_joint_state([*cell.robot.arm_joints, *fingers], q)

            cell.tick_listeners.append(log_joints)
        video = FrameRecorder(cell) if gif_path is not None else None
        sim0, t_exec = cell.time_s, time.perf_counter()
        with video or contextlib.nullcontext(), SimBackend(cell) as backend:
            feedback = recorder.log_feedback if recorder is not None else None
            executor = Executor(backend, config)
            if condition == "closed_loop":

                def observe() -> Observation:
                    frame_rgb, frame_depth = cell.render()
                    if recorder is not None:
                        recorder.log_frame(frame_rgb, frame_depth, cell.camera_model)
                    return Observation(frame_rgb, frame_depth, cell.camera_model, cell.extrinsics)

                loop = ClosedLoop(
                    executor,
                    observe,
                    sim_vlm.plan,
                    sim_vlm.locate,
                    config.closed_loop,
                    on_attempt=recorder.log_attempt if recorder is not None else None,
                    on_plan=(lambda p, why: recorder.log_replan(p, why) if why != "initial" else None)
                    if recorder is not None
                    else None,
                )
                execution = loop.run(
                    cell.scenario.instruction,
                    plan,
                    first=Observation(rgb, depth_m, cell.camera_model, cell.extrinsics),
                    on_feedback=feedback,
                )
            else:
                execution = executor.execute(plan, target_set, on_feedback=feedback)
            cell.step(int(settle_s / cell.model.opt.timestep))
        evaluated = cell.evaluate()
        success = all(r.ok for r in evaluated)
        if recorder is not None:
            recorder.log_result(execution, execution_time_s=time.perf_counter() - t_exec)
            recorder.log_frame(*cell.render(), cell.camera_model)
            recorder.set_label(
                success,
                None if success else _failure_mode(execution),
                notes="; ".join(f"{r.predicate.type} {r.predicate.object}: {r.detail}" for r in evaluated),
                source="sim",
            )
        gif = str(video.save_gif(gif_path)) if video is not None else None
        return SimRunResult(
            scenario=cell.scenario.name,
            seed=seed,
            plan=plan,
            targets=target_set,
            execution=execution,
            success=success,
            predicates=[r.to_dict() for r in evaluated],
            sim_time_s=cell.time_s - sim0,
            wall_s=time.perf_counter() - wall0,
            gif=gif,
            condition=condition,
            perturbations=[p.type for p in cell.scenario.perturbations if p.active],
        )


def _failure_mode(execution) -> str:
    """Why a run the success predicates call failed: what the closed loop's checks or the executor's step outcomes
    say, else the object did not end up where the instruction wanted it."""

    mode = getattr(execution, "failure_mode", None)
    if mode:
        return mode
    if not execution.to_dict().get("steps"):
        return "no_action"  # the planner saw nothing to do
    _, auto = auto_failure_mode(execution.to_dict(), None)
    return auto or "incorrect_spatial_outcome"


def _planner_failed(cell, seed, condition: str, recorder, message: str, wall0: float, plan=None) -> SimRunResult:
    """A run whose planner (or the back-projection of its answer) failed: nothing moved; recorded as such."""
    evaluated = cell.evaluate()
    if recorder is not None:
        if plan is not None:
            recorder.log_plan(plan)
        recorder.log_planner_error(message)
        recorder.set_label(False, "planner_error", notes=message, source="sim")
    return SimRunResult(
        scenario=cell.scenario.name,
        seed=seed,
        plan=plan,
        targets=None,
        execution=None,
        success=False,
        predicates=[r.to_dict() for r in evaluated],
        wall_s=time.perf_counter() - wall0,
        condition=condition,
        planner_error=message,
        perturbations=[p.type for p in cell.scenario.perturbations if p.active],
    )
