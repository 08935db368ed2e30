"""`spabench run`: each trial rendered, planned (the planner_node's planner, the oracle or the blind baseline),
back-projected from the rendered depth, executed on the simulated arm (open or closed loop), scored by Table I and
labelled with a failure mode from the simulator's state; one rollout per trial; ``trials.jsonl`` resumable."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import multiprocessing
import numpy as np

from grounded_planner.execution.closed_loop import ClosedLoop, Observation
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.fileio import append_line, write_text_atomic
from grounded_planner.geometry.errors import GeometryError
from grounded_planner.geometry.targets import TargetSet, compute_targets
from grounded_planner.plan import GroundedPlan, PlanError
from grounded_planner.rollout.record import RolloutRecorder
from grounded_planner.rollout.taxonomy import auto_failure_mode
from grounded_planner.sim.backend import SimBackend, default_scenario_path
from grounded_planner.sim.camera import BASE_FRAME
from grounded_planner.sim.export import gt_plan
from grounded_planner.sim.scenario import PlanStepSpec, ScenarioError
from grounded_planner.sim.vlm import sim_vlm
from grounded_planner.sim.workcell import SimWorkcell
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.predicates import evaluate_record, moved_objects, object_positions
from grounded_planner.spabench.report import blind_candidates, load_trials, movable_outside, trials_path
from grounded_planner.spabench.scenes import generate_trial
from grounded_planner.spabench.trial import CONDITIONS, ROBOTS, TASKS, Trial, check_name, direction_xy, trial_id
from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.errors import VLMError
from grounded_planner.vlm.factory import make_planner

PLANNERS = ("gt", "blind", "openai", "gemini", "transformers", "replay")
VLM_PLANNERS = ("openai", "gemini", "transformers", "replay")
EXECUTORS = ("local", "ray")
# A carried target that ends farther than this (m, table plane) from where its place aimed was let go before the
# goal (premature release or drop); nearer, the place happened and its spatial outcome was wrong.
RELEASED_EARLY_M = 0.05
# Relational placement, blind: where it puts the target beside the reference (m, centre to centre).
BLIND_PLACE_OFFSET_M = 0.05
SIDES = ("left", "right", "front", "behind")
SETTLE_S = 0.5


class RunError(SpaBenchError):
    """`spabench run` options that cannot run (a name, a planner without its model, a folder of another run)."""


@dataclass(frozen=True)
class RunOptions:
    """What every trial of a run shares (picklable: it travels to worker processes and Ray actors)."""

    out: str  # the run folder (trials.jsonl, rollouts/)
    robot: str = "so101"
    planner: str = "gt"
    base_url: str = ""  # openai backend: the model server's root incl. /v1
    model: str = ""  # model name / Gemini id / local path; replay: the JSONL of recorded plans
    closed_loop: bool = False

    def __post_init__(self) -> None:
        check_name(self.robot, ROBOTS, "robot", "--robot")
        check_name(self.planner, PLANNERS, "planner", "--planner")
        if self.closed_loop and self.planner not in ("openai", "gemini", "transformers"):
            raise RunError(
                f"--closed-loop re-grounds and replans with a VLM: --planner {self.planner} has none "
                "(use openai, gemini or transformers)"
            )
        if self.planner not in VLM_PLANNERS and (self.base_url or self.model):
            raise RunError(f"--base-url/--model are for a VLM planner, not --planner {self.planner}")

    def planner_config(self) -> PlannerConfig:
        """The planner_node's configuration for a VLM planner (environment GP_VLM_* as the node reads it)."""
        overrides: dict[str, Any] = {"backend": self.planner}
        if self.planner == "replay":
            if not self.model:
                raise RunError("--planner replay needs --model FILE: the JSONL of recorded plans to replay")
            overrides["replay_file"] = self.model
        else:
            overrides.update({k: v for k, v in (("base_url", self.base_url), ("model", self.model)) if v})
        try:
            return PlannerConfig.from_env(**overrides)
        except (TypeError, ValueError) as exc:
            raise RunError(f"--planner {self.planner}: {exc}") from None


def parse_names(value: str | None, allowed: Sequence[str], flag: str) -> list[str]:
    """A comma-separated list of names (None: all of ``allowed``); an unknown one is a :class:`RunError`."""
    if value is None:
        return list(allowed)
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise RunError(
            f"{flag}: unknown name(s) {', '.join(map(repr, bad)) or repr(value)} "
            f"(expected a comma-separated list of {', '.join(allowed)})"
        )
    return list(dict.fromkeys(names))


# -- the blind baseline ---------------------------------------------------------------------------------


def _rng(trial: Trial) -> np.random.Generator:
    """The blind policy's draws: from the trial alone, so that every executor draws the same."""
    return np.random.default_rng([trial.seed, TASKS.index(trial.task), CONDITIONS.index(trial.condition), 24])


class _WithPlan:
    """The workcell as seen with another plan (the blind policy's), for the oracle's grounding (``gt_plan``)."""

    def __init__(self, cell, steps: list[PlanStepSpec]):
        self._cell = cell
        self.scenario = dataclasses.replace(cell.scenario, plan=steps)

    def __getattr__(self, name: str):
        return getattr(self._cell, name)


def blind_plan(cell, trial: Trial, record: dict[str, Any]) -> GroundedPlan:
    """The spatially blind policy's plan (see :func:`grounded_planner.spabench.report.blind_success_probability`,
    whose chance it must match): a uniform pick among the named category, the spatial qualifier ignored; grounded
    in the rendered frame as the oracle's plan is."""
    rng = _rng(trial)
    spec = trial.spec
    steps: list[PlanStepSpec] = []
    if trial.task == "counting":
        outside = movable_outside(record)
        k = int(rng.integers(0, len(outside) + 1))
        for obj in sorted(rng.choice(outside, size=k, replace=False).tolist()) if k else []:
            steps += [PlanStepSpec("grasp", object=obj), PlanStepSpec("place", target=spec.receptacle)]
    else:
        candidates = blind_candidates(record)
        if candidates:
            obj = str(candidates[int(rng.integers(0, len(candidates)))])
            if trial.task == "relational_placement" and spec.reference:
                side = SIDES[int(rng.integers(0, len(SIDES)))]
                camera = cell.scenario.camera
                dx, dy = direction_xy(side, tuple(camera.position_m[:2]), tuple(camera.look_at_m[:2]))
                steps += [
                    PlanStepSpec("grasp", object=obj),
                    PlanStepSpec(
                        "place", target=spec.reference, offset_m=(BLIND_PLACE_OFFSET_M * dx, BLIND_PLACE_OFFSET_M * dy)
                    ),
                ]
            elif spec.receptacle:
                steps += [PlanStepSpec("grasp", object=obj), PlanStepSpec("place", target=spec.receptacle)]
    plan = gt_plan(_WithPlan(cell, steps))
    return dataclasses.replace(
        plan, model="spabench-blind", reason="" if steps else "the blind policy drew nothing to move"
    )


# -- one trial ---------------------------------------------------------------------------------------


def _measure(cell) -> dict[str, list[float]]:
    return {k: [float(x) for x in v] for k, v in object_positions(cell).items()}


def _executor_config(cell) -> ExecutorConfig:
    if cell.robot.executor_config:  # the arm's own heights and envelope (the defaults are sized for a Franka)
        return ExecutorConfig.load(default_scenario_path(f"../{cell.robot.executor_config}"))
    return ExecutorConfig()


def rollout_folder(task: str, condition: str, seed: int) -> str:
    """The rollout folder of a trial, relative to the run folder."""
    return f"rollouts/{task}_{condition}_{seed}"


def run_trial(options: RunOptions, task: str, condition: str, seed: int) -> dict[str, Any]:
    """Run one trial; return its ``trials.jsonl`` record (a dict in the contract's key order)."""
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    wall0 = time.perf_counter()
    trial = generate_trial(task, condition, seed, options.robot)
    rel = rollout_folder(task, condition, seed)
    folder = Path(options.out) / rel
    if folder.exists():  # a trial that crashed half-way in an earlier run: its rollout is redone
        shutil.rmtree(folder)
    with contextlib.ExitStack() as stack:
        cell = stack.enter_context(SimWorkcell(trial.scenario, seed=None))
        config = _executor_config(cell)
        recorder = stack.enter_context(
            RolloutRecorder(
                folder,
                instruction=trial.instruction,
                task=task,
                condition=condition,
                scene_id=trial.pair_id or trial.trial_id,
                trial=seed,
                model=options.planner,
                config=config,
                expects_action=trial.expects_action,
                extra={
                    "spabench": {
                        "trial_id": trial.trial_id,
                        "robot": options.robot,
                        "planner": options.planner,
                        "closed_loop": options.closed_loop,
                        "spec": trial.spec.to_dict(),
                    }
                },
            )
        )
        cell.step(int(SETTLE_S / cell.model.opt.timestep))
        initial = _measure(cell)
        record = trial.record(options.planner)
        record.initial_positions = {k: tuple(v) for k, v in initial.items()}
        record_dict = record.to_dict()
        rgb, depth_m = cell.render()
        recorder.log_frame(rgb, depth_m, cell.camera_model)
        outcome = _plan_and_execute(options, trial, cell, recorder, record_dict, rgb, depth_m)
        cell.step(int(SETTLE_S / cell.model.opt.timestep))
        final = _measure(cell)
        record.final_positions = {k: tuple(v) for k, v in final.items()}
        record.grasp_attempted = outcome["grasp_attempted"]
        record.error = outcome["error"] or None
        scored = record.to_dict()
        # success is Table I on the final state, whatever went wrong on the way (a planner that failed in a trial
        # needing no action left the goal holding); the failure mode says why a trial failed
        success = evaluate_record(record).success
        mode = None if success else failure_mode(trial, scored, outcome)
        record.success, record.failure_mode, record.outcome_source = success, mode, "auto"
        record.rollout = rel
        recorder.log_frame(*cell.render(), cell.camera_model)
        recorder.set_label(success, mode, notes=outcome["error"] or "", source="sim")
    record.started_at = started_at
    record.wall_s = time.perf_counter() - wall0
    return record.to_dict()


def _plan_and_execute(
    options: RunOptions, trial: Trial, cell, recorder, record: dict[str, Any], rgb, depth_m
) -> dict[str, Any]:
    """Plan from the first frame, back-project, execute; what happened, for the failure mode."""
    out: dict[str, Any] = {
        "mode": None,
        "error": "",
        "grasp_attempted": False,
        "plan": None,
        "targets": None,
        "execution": None,
        "held": set(),
    }
    cell.tick_listeners.append(lambda _t: cell.held_body and out["held"].add(cell.held_body.split(":", 1)[-1]))
    with contextlib.ExitStack() as stack:  # the closed loop's VLM stays open until the run ends
        return _plan_and_execute_with(options, trial, cell, recorder, record, rgb, depth_m, out, stack)


def _plan_and_execute_with(options, trial, cell, recorder, record, rgb, depth_m, out, stack) -> dict[str, Any]:
    t_plan = time.perf_counter()
    try:
        if options.planner == "gt":
            plan = gt_plan(cell)
        elif options.planner == "blind":
            plan = blind_plan(cell, trial, record)
        elif options.closed_loop:
            vlm = stack.enter_context(sim_vlm(cell, options.planner_config()))
            plan = vlm.plan(rgb, trial.instruction)
        else:
            # the planner_node's own planner (make_planner of its PlannerConfig), asked as the node asks it
            planner = make_planner(options.planner_config())
            try:
                plan = planner.plan(rgb, trial.instruction)
            finally:
                planner.close()
    except (VLMError, PlanError, ScenarioError) as exc:
        out.update(mode="planner_error", error=f"planner: {exc}")
        recorder.log_planner_error(out["error"])
        return out
    recorder.log_plan(plan, planning_time_s=time.perf_counter() - t_plan)
    out["plan"] = plan
    try:
        targets = compute_targets(plan, depth_m, cell.camera_model, cell.extrinsics)
    except GeometryError as exc:
        if not options.closed_loop:
            out.update(mode="planner_error", error=f"back-projection: {exc}")
            recorder.log_planner_error(out["error"])
            return out
        targets = TargetSet(frame=BASE_FRAME, targets=[], warnings=[str(exc)])
    recorder.log_targets(targets)
    out["targets"] = targets
    with SimBackend(cell) as backend:
        executor = Executor(backend, _executor_config(cell))
        if options.closed_loop:

            def observe() -> Observation:
                frame_rgb, frame_depth = cell.render()
                recorder.log_frame(frame_rgb, frame_depth, cell.camera_model)
                return Observation(frame_rgb, frame_depth, cell.camera_model, cell.extrinsics)

            loop = ClosedLoop(
                executor,
                observe,
                vlm.plan,
                vlm.locate,
                executor.config.closed_loop,
                on_attempt=recorder.log_attempt,
                on_plan=lambda p, why: recorder.log_replan(p, why) if why != "initial" else None,
            )
            execution = loop.run(
                trial.instruction,
                plan,
                first=Observation(rgb, depth_m, cell.camera_model, cell.extrinsics),
                on_feedback=recorder.log_feedback,
            )
        else:
            execution = executor.execute(plan, targets, on_feedback=recorder.log_feedback)
    recorder.log_result(execution)
    out["execution"] = execution
    steps = execution.to_dict()["steps"]
    out["grasp_attempted"] = any(
        s.get("type") == "grasp" and s.get("outcome") not in ("outside_workspace", "unreachable") for s in steps
    )
    _, mode = auto_failure_mode(execution.to_dict(), plan.to_dict(), expects_action=trial.expects_action)
    if mode == "refused":
        bad = next(s for s in steps if s.get("outcome") in ("outside_workspace", "unreachable"))
        out.update(
            mode="refused",
            error=f"step {bad.get('index')} {bad.get('type')}: {bad.get('outcome')}: {bad.get('message', '')}".strip(),
        )
    elif mode:
        out["mode"] = mode
    return out


def _approached(record: dict[str, Any], outcome: dict[str, Any]) -> list[str]:
    """The objects the plan's grasps went for: the object whose initial centre is nearest each grasp target."""
    targets = outcome.get("targets")
    plan = outcome.get("plan")
    if targets is None or plan is None:
        return []
    initial = record["initial_positions"]
    receptacle = record["spec"].get("receptacle")
    found = []
    for t in targets.targets:
        if t.type != "grasp" or t.position is None:
            continue
        candidates = [
            (math.hypot(p[0] - t.position[0], p[1] - t.position[1]), o) for o, p in initial.items() if o != receptacle
        ]
        if candidates:
            found.append(min(candidates)[1])
    return found


def failure_mode(trial: Trial, record: dict[str, Any], outcome: dict[str, Any]) -> str:
    """Why a trial Table I calls failed, from the simulator's state (Table X plus refused / planner_error)."""
    if outcome.get("mode") in ("planner_error", "refused"):
        return outcome["mode"]
    initial, final = record["initial_positions"], record["final_positions"] or {}
    spec = record["spec"]
    moved = sorted(set(moved_objects(initial, final)) - {spec.get("receptacle")})
    plan = outcome.get("plan")
    if not trial.expects_action:
        return "wrong_object"  # it moved (or grasped) in a trial that needed no action
    if plan is None or not plan.actions or (not moved and not record.get("grasp_attempted")):
        return "no_action"
    approached = _approached(record, outcome)
    target = spec.get("target")
    if target is None:  # counting: any object will do, the count is what is asked
        return "grasp_failure" if outcome.get("mode") == "grasp_failure" else "incorrect_spatial_outcome"
    wrong = [o for o in approached if o != target]
    if approached and approached[0] != target or (target not in moved and wrong):
        picked = approached[0] if approached and approached[0] != target else wrong[0]
        if picked in (spec.get("distractors") or []) and trial.task in ("object_state", "referential_description"):
            return "wrong_instance"
        return "wrong_object"
    if outcome.get("mode") == "grasp_failure" or (target not in moved and target not in outcome["held"]):
        return "grasp_failure"
    aim = _place_aim(outcome)
    if aim is not None and target in final:
        if math.hypot(final[target][0] - aim[0], final[target][1] - aim[1]) > RELEASED_EARLY_M:
            return "premature_release"
    return "incorrect_spatial_outcome"


def _place_aim(outcome: dict[str, Any]) -> tuple[float, float] | None:
    targets = outcome.get("targets")
    for t in targets.targets if targets is not None else []:
        if t.type == "place" and t.position is not None:
            return float(t.position[0]), float(t.position[1])
    return None


# -- a whole run -------------------------------------------------------------------------------------


def done_trials(out: str | Path, warn: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Trial records already in ``out/trials.jsonl`` (the resume set). A last line cut off by a crash is dropped
    with a warning; any other bad line is an error (the file is someone else's or damaged)."""
    path = trials_path(out)
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        if warn:
            warn(f"{path}: the last line was cut off (a run stopped mid-write); that trial runs again")
        write_text_atomic(path, "".join(lines[:-1]))
    return {r["trial_id"]: r for r in load_trials(out)}


def _append(out: Path, record: dict[str, Any]) -> None:
    append_line(trials_path(out), json.dumps(record, ensure_ascii=False))


def _progress_line(i: int, total: int, rec: dict[str, Any]) -> str:
    outcome = "success" if rec["success"] else f"failure ({rec['failure_mode']})"
    return f"[{i}/{total}] {rec['trial_id']}: {outcome} {rec['wall_s'] or 0:.1f} s"


class TrialWorker:
    """One worker (a process of the pool, or a Ray actor): ``run(index)`` runs key ``index`` of the run.

    ``own_process``: the worker is one of several processes sharing the cores (a pool process, a Ray actor). Mesa's
    software renderer (llvmpipe, what EGL renders with on a machine without a GPU) starts a rasterising thread per
    core in every process, so N workers ran N x cores threads: two workers on two cores ran 1.4x as fast as one, and
    1.9x with each rendering on its own thread (LP_NUM_THREADS=0). Unless the environment sets it otherwise.
    """

    def __init__(self, options: RunOptions, keys: Sequence[tuple[str, str, int]], own_process: bool = False):
        if own_process:
            os.environ.setdefault("LP_NUM_THREADS", "0")  # read when the process's first GL context is made
        self.options = options
        self.keys = list(keys)

    def run(self, index: int) -> dict[str, Any]:
        task, condition, seed = self.keys[index]
        return {"index": index, "record": run_trial(self.options, task, condition, seed)}

    def server_counts(self) -> dict[str, dict[str, Any]]:
        """Requests per model server, which the Ray runner of `v2gp run` sums over its actors: each trial opens its
        own planner here, so none are kept."""
        return {}


def expected_cost(task: str, condition: str, seed: int) -> int:
    """A trial's rough cost in pick-and-place moves, from its key alone (generating it to count would cost the
    parent process a share of a core): none where no action is expected, up to three in counting."""
    if condition == "no_intervention" or (condition == "relational_control" and seed % 2 == 0):
        return 0
    return 2 if task == "counting" else 1


_WORKER: TrialWorker | None = None


def _pool_init(options: RunOptions, keys) -> None:
    global _WORKER
    _WORKER = TrialWorker(options, keys, own_process=True)


def _pool_run(index: int) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER.run(index)


def run_trials(
    options: RunOptions,
    keys: Sequence[tuple[str, str, int]],
    *,
    workers: int = 1,
    executor: str = "local",
    ray_address: str = "",
    progress: TextIO | None = sys.stderr,
    ray_runner: Callable[..., Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every trial of ``keys`` not yet in ``options.out/trials.jsonl``; return all records of ``keys``.

    Each finished trial is appended to ``trials.jsonl`` at once (a stopped run resumes where it stopped); at the
    end the file is rewritten in ``keys`` order (earlier lines of other keys kept first), so that one worker, N
    workers and Ray write the same bytes apart from the timing fields.
    """
    if workers < 1:
        raise RunError(f"--workers must be >= 1, got {workers}")
    if executor not in EXECUTORS:
        raise RunError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    say = (lambda m: print(m, file=progress, flush=True)) if progress else (lambda m: None)
    done = done_trials(out, warn=say)
    for tid, rec in done.items():
        if rec["planner"] != options.planner or rec["robot"] != options.robot:
            raise RunError(
                f"{trials_path(out)} holds {tid} run with --planner {rec['planner']} --robot "
                f"{rec['robot']}: use a new --out folder for --planner {options.planner} "
                f"--robot {options.robot}"
            )
    todo = [i for i, (t, c, s) in enumerate(keys) if trial_id(t, c, s) not in done]
    if workers > 1:  # the longest trials first, so that no long one is left to run alone at the end
        todo.sort(key=lambda i: -expected_cost(*keys[i]))
    if done:
        say(
            f"spabench: {len(keys) - len(todo)} of {len(keys)} trials already in {trials_path(out)}; "
            f"running {len(todo)}"
        )
    finished = [0]

    def take(result: dict[str, Any]) -> None:
        if "error" in result:
            task, condition, seed = keys[result["index"]]
            raise RunError(f"{trial_id(task, condition, seed)} crashed its worker: {result['error']}")
        rec = result["record"]
        _append(out, rec)
        done[rec["trial_id"]] = rec
        finished[0] += 1
        say(_progress_line(finished[0], len(todo), rec))

    if todo and executor == "ray":
        if ray_runner is None:
            raise RunError("--executor ray: no Ray runner given")
        ray_runner(TrialWorker, (options, list(keys), True), todo, workers=workers, address=ray_address, on_result=take)
    elif todo and workers == 1:
        worker = TrialWorker(options, keys)
        for i in todo:
            take(worker.run(i))
    elif todo:
        ctx = multiprocessing.get_context("spawn")  # MuJoCo's renderer and threads do not survive a fork
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_pool_init, initargs=(options, list(keys))
        ) as pool:
            futures = [pool.submit(_pool_run, i) for i in todo]
            try:
                for fut in as_completed(futures):
                    take(fut.result())
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    order = {trial_id(*k): i for i, k in enumerate(keys)}
    records = sorted(done.values(), key=lambda r: (order.get(r["trial_id"], -1), r["trial_id"]))
    write_text_atomic(trials_path(out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return [r for r in records if r["trial_id"] in order]
