"""Closed-loop execution: run a grounded plan one step at a time on the :class:`Executor`, check each step from what
the gripper and the camera tell, and recover from a failed check by re-grounding the step on a fresh frame or by
replanning the rest of the task.

The camera and the planner are injected callables, so the same loop runs in the simulator, the CLI and the
executor node:

- ``observe() -> Observation``: a fresh colour frame with aligned depth, the camera model and the extrinsics;
- ``plan(rgb, instruction, done) -> GroundedPlan``: a plan for what is left, ``done`` lists what happened so far;
- ``locate(rgb, action) -> GroundedAction | None``: the same action re-grounded in a new image (ask the model for
  that object or target again); ``None`` when the model no longer sees it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.execution.config import ClosedLoopConfig
from grounded_planner.execution.executor import ExecutionInputError, Executor, FeedbackFn
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.geometry.errors import GeometryError
from grounded_planner.geometry.targets import Target, compute_targets
from grounded_planner.plan import GroundedAction, GroundedPlan

log = logging.getLogger(__name__)

OK = "ok"
# Open/close check: depth points this far above the handle are ignored (the retreated hand, not the drawer), m.
HANDLE_VIEW_ABOVE_M = 0.08
CONDITION = "closed_loop"
OPEN_LOOP = "open_loop"
CONDITIONS = (OPEN_LOOP, CONDITION)

# Executor outcomes after which trying again is pointless or unsafe: a person has to look first.
_STOP_OUTCOMES = (Outcome.FAULT, Outcome.CANCELLED, Outcome.TIMEOUT)
# The failure modes this loop can tell (names of grounded_planner.rollout.taxonomy.FAILURE_MODES, which the tests
# check; not imported: the execution layer does not depend on the rollout layer).
FAILURE_MODES = ("grasp_failure", "premature_release", "incorrect_spatial_outcome", "refused", "planner_error")
# Executor outcomes -> the failure mode of the rollout taxonomy (grounded_planner.rollout.taxonomy).
_OUTCOME_MODE = {
    Outcome.GRASP_FAILED: "grasp_failure",
    Outcome.OUTSIDE_WORKSPACE: "refused",
    Outcome.UNREACHABLE: "refused",
}


@dataclass
class Observation:
    """One instant of the camera: colour (H, W, 3) uint8, aligned depth (H, W) metres (0 = invalid), the
    geometry ``CameraModel`` and ``Extrinsics`` (camera optical frame -> robot base)."""

    rgb: np.ndarray
    depth_m: np.ndarray
    camera: Any
    extrinsics: Any


ObserveFn = Callable[[], Observation]
PlanFn = Callable[[np.ndarray, str, Sequence[str]], GroundedPlan]
LocateFn = Callable[[np.ndarray, GroundedAction], "GroundedAction | None"]


@dataclass
class Check:
    """A step check's verdict: ``ok`` or a failure mode of the rollout taxonomy, and what was measured."""

    verdict: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.verdict == OK


@dataclass
class Attempt:
    """One try of one step: what the executor reported and what the check saw afterwards."""

    step: int  # index of the step in the episode (counting across replans)
    attempt: int  # 1 for the first try of the step
    plan_index: int  # which plan of the episode the step came from (0 = the first)
    type: str
    object: str
    outcome: str  # the executor's step outcome
    check: str  # ok, a failure mode, or "" when the executor's outcome already decided
    message: str
    duration_s: float
    action: dict = field(default_factory=dict)
    target: dict | None = None
    recovery: str = ""  # what the loop did next: reground, replan, stop, or ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ClosedLoopResult:
    """How a closed-loop episode ended. ``steps`` keeps the last try of every step in the executor's JSON
    shape (plus ``attempts`` and ``check``), so rollout tools read it like an open-loop result."""

    success: bool
    message: str
    steps: list[dict] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    plans: list[dict] = field(default_factory=list)
    replans: int = 0
    failure_mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": bool(self.success),
            "message": self.message,
            "condition": CONDITION,
            "steps": list(self.steps),
            "attempts": [a.to_dict() for a in self.attempts],
            "plans": list(self.plans),
            "replans": int(self.replans),
            "failure_mode": self.failure_mode,
        }


def describe_step(action: GroundedAction) -> str:
    """A step as the planner is told about it: ``grasp red box``, ``place red box on blue bowl``."""
    if action.type == "place":
        return f"place {action.object or 'the held object'} on {action.target or 'the target'}".strip()
    return f"{action.type} {action.object}".strip()


class ClosedLoop:
    """Run, check, recover. One instance per robot; :meth:`run` is one episode.

    Parameters
    ----------
    executor : Executor
        Runs each step (as a one-step plan) inside the safety envelope; its backend's gripper width is read for
        the checks.
    observe, plan, locate : callables (see the module docstring).
    config : ClosedLoopConfig
        Budgets (attempts per step, replans, time) and check thresholds.
    on_attempt, on_plan : callables, optional
        Called with each finished :class:`Attempt` and with each new plan (``plan, reason``): the rollout hooks.
    target_config : geometry ``TargetConfig``, optional
    """

    def __init__(
        self,
        executor: Executor,
        observe: ObserveFn,
        plan: PlanFn,
        locate: LocateFn,
        config: ClosedLoopConfig | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        on_plan: Callable[[GroundedPlan, str], None] | None = None,
        target_config: Any = None,
    ):
        self.executor = executor
        self.observe = observe
        self.planner = plan
        self.locate = locate
        self.config = config or executor.config.closed_loop
        self.on_attempt = on_attempt
        self.on_plan = on_plan
        self.target_config = target_config

    # -- the episode -------------------------------------------------------------------------------
    def run(
        self,
        instruction: str,
        plan: GroundedPlan | None = None,
        first: Observation | None = None,
        cancel: threading.Event | None = None,
        on_feedback: FeedbackFn | None = None,
    ) -> ClosedLoopResult:
        """Carry out ``instruction``: from ``plan`` (made on ``first``) when given, else from a first plan."""
        cfg = self.config
        cancel = cancel or threading.Event()
        deadline = time.monotonic() + cfg.time_budget_s
        result = ClosedLoopResult(False, "")
        done: list[str] = []  # what happened, in the planner's words
        obs = first or self.observe()
        if plan is None:
            plan = self.planner(obs.rgb, instruction, ())
        self._new_plan(result, plan, "initial")
        queue = list(plan.actions)
        plan_obs = obs  # the frame the queued actions are grounded in
        step = 0
        held_from: tuple[GroundedAction, Observation] | None = None  # the grasp that holds the object now
        held_yaw: float | None = None  # the yaw that grasp closed at: the place keeps it, as in one open-loop run
        while queue:
            action = queue[0]
            attempt = 0
            while True:
                attempt += 1
                if cancel.is_set():
                    return self._end(result, False, "cancelled", None)
                if time.monotonic() > deadline:
                    return self._end(
                        result, False, f"time budget of {cfg.time_budget_s:g} s spent at step {step}", _mode_of(result)
                    )
                record, check, grasp_yaw = self._try(
                    step, attempt, len(result.plans) - 1, action, plan_obs, held_from, cancel, on_feedback, held_yaw
                )
                result.attempts.append(record)
                self._report(result, record)
                if check.ok:
                    break
                outcome = Outcome(record.outcome)
                if outcome in _STOP_OUTCOMES:
                    record.recovery = "stop"
                    self._notify(record)
                    return self._end(
                        result,
                        False,
                        f"step {step} ({action.type}): {record.outcome}: {record.message}",
                        _mode_of(result) if outcome is not Outcome.CANCELLED else None,
                    )
                # the object is no longer in the hand (dropped, or placed in the wrong spot): retrying the place
                # cannot help, the rest of the task has to be planned again from what the camera sees
                if action.type != "place" and attempt < cfg.max_attempts_per_step:
                    fresh = self.observe()
                    regrounded = self.locate(fresh.rgb, action)
                    if regrounded is not None:
                        record.recovery = "reground"
                        self._notify(record)
                        action, plan_obs = regrounded, fresh
                        continue
                    record.message += "; re-grounding found nothing"
                record.recovery = "replan"
                self._notify(record)
                done.append(f"{describe_step(action)} (failed: {check.verdict})")
                break
            if check.ok:
                done.append(describe_step(action))
                held_from = (action, plan_obs) if action.type == "grasp" else None
                held_yaw = grasp_yaw if action.type == "grasp" else None
                queue.pop(0)
                step += 1
                continue
            # replan the rest from a fresh frame
            if result.replans >= cfg.max_replans:
                return self._end(
                    result,
                    False,
                    f"step {step} ({action.type}) failed its check ({check.verdict}) and "
                    f"the replan budget ({cfg.max_replans}) is spent",
                    check.verdict,
                )
            if time.monotonic() > deadline:
                return self._end(
                    result, False, f"time budget of {cfg.time_budget_s:g} s spent before a replan", check.verdict
                )
            result.replans += 1
            step += 1
            plan_obs = self.observe()
            try:
                plan = self.planner(plan_obs.rgb, instruction, tuple(done))
            except Exception as exc:  # noqa: BLE001 - the planner failing is an outcome of the episode, recorded, not a crash
                return self._end(result, False, f"replan failed: {type(exc).__name__}: {exc}", "planner_error")
            self._new_plan(result, plan, f"replan after step {step - 1}: {check.verdict}")
            if not plan.actions:
                return self._end(result, True, f"replan: nothing left to do ({plan.reason or 'empty plan'})", None)
            queue = list(plan.actions)
            held_from, held_yaw = None, None
        return self._end(
            result,
            True,
            f"all steps done and checked ({len(result.attempts)} attempts, {result.replans} replans)",
            None,
        )

    # -- one attempt -------------------------------------------------------------------------------
    def _try(
        self,
        step: int,
        attempt: int,
        plan_index: int,
        action: GroundedAction,
        obs: Observation,
        held_from: tuple[GroundedAction, Observation] | None,
        cancel: threading.Event,
        on_feedback: FeedbackFn | None,
        held_yaw: float | None = None,
    ) -> tuple[Attempt, Check, float | None]:
        """One try of ``action``: its record, its check, and for a grasp the yaw the gripper closed at."""
        start = time.perf_counter()
        one = GroundedPlan(
            instruction=describe_step(action),
            image_size=(int(obs.rgb.shape[1]), int(obs.rgb.shape[0])),
            actions=[action],
        )
        record = Attempt(step, attempt, plan_index, action.type, action.object, "", "", "", 0.0, action.to_dict())
        try:
            targets = compute_targets(one, obs.depth_m, obs.camera, obs.extrinsics, self.target_config)
        except GeometryError as exc:
            record.outcome, record.check, record.message = (
                Outcome.OUTSIDE_WORKSPACE.value,
                "refused",
                f"no 3D target: {exc}",
            )
            record.duration_s = time.perf_counter() - start
            return record, Check("refused", record.message), None
        target = targets.targets[0]
        record.target = target.to_dict()
        backend = self.executor.backend
        width_at_release: list[float] = []

        def feedback(index: int, state: str, act: Any = None) -> None:
            # the gripper width just before the release tells whether the object was still held on arrival
            if action.type == "place" and state == "release" and backend is not None:
                width_at_release.append(float(backend.gripper_width()))
            if on_feedback is not None:
                on_feedback(step, state, act)

        try:
            execution = self.executor.execute(one, targets, cancel=cancel, on_feedback=feedback, held_yaw=held_yaw)
        except ExecutionInputError as exc:  # one action with its own target always pairs; a bug if not
            raise RunFailure(f"closed loop: step {step} could not be paired with its target: {exc}") from exc
        outcome = execution.steps[0].outcome if execution.steps else Outcome.OK
        grasp_yaw = (
            execution.steps[0].motions[0].yaw_rad
            if action.type == "grasp" and execution.steps and execution.steps[0].motions
            else None
        )  # what the executor closed the gripper at
        record.outcome, record.message = (
            outcome.value,
            execution.message if not execution.steps else execution.steps[0].message,
        )
        if not outcome.is_ok:
            mode = _OUTCOME_MODE.get(outcome)
            record.check = mode or outcome.value
            record.duration_s = time.perf_counter() - start
            return record, Check(record.check, record.message), grasp_yaw
        check = self._check(action, target, obs, held_from, width_at_release[0] if width_at_release else None)
        record.check, record.duration_s = check.verdict, time.perf_counter() - start
        record.message += f"; check: {check.verdict} ({check.detail})"
        return record, check, grasp_yaw

    # -- step checks -------------------------------------------------------------------------------
    def _check(
        self,
        action: GroundedAction,
        target: Target,
        before: Observation,
        held_from: tuple[GroundedAction, Observation] | None,
        width_at_release: float | None,
    ) -> Check:
        if action.type == "grasp":
            return self.check_grasp(action, before, self.observe())
        if action.type == "place":
            return self.check_place(action, target, held_from, width_at_release, self.observe())
        return self.check_handle(action, target, self.observe())

    def _gripper_width(self) -> float | None:
        backend = self.executor.backend
        try:
            return None if backend is None else float(backend.gripper_width())
        except Exception as exc:  # noqa: BLE001 - a gripper that cannot be read leaves the check to the camera
            log.warning("closed loop: gripper width unknown: %s", exc)
            return None

    def check_grasp(self, action: GroundedAction, before: Observation, after: Observation) -> Check:
        """The gripper closed on something (width) and the object left its box (depth in the grasp box changed)."""
        cfg, min_width = self.config, self.executor.config.min_grasp_width_m
        width = self._gripper_width()
        if width is not None and width < min_width:
            return Check("grasp_failure", f"gripper at {width * 1000:.1f} mm after the lift: nothing held")
        changed, valid = _depth_change(
            before.depth_m, after.depth_m, action.bbox, before.rgb.shape, cfg.grasp_depth_change_m
        )
        if valid == 0:
            return Check(OK, "held (width); no valid depth in the grasp box to confirm")
        fraction = changed / valid
        held = "unknown width" if width is None else f"gripper at {width * 1000:.1f} mm"
        if fraction < cfg.grasp_changed_fraction:
            return Check(
                "grasp_failure",
                f"{held}, but only {fraction:.0%} of the grasp box changed depth: the object did not leave its place",
            )
        return Check(OK, f"{held}; {fraction:.0%} of the grasp box changed depth")

    def check_place(
        self,
        action: GroundedAction,
        target: Target,
        held_from: tuple[GroundedAction, Observation] | None,
        width_at_release: float | None,
        after: Observation,
    ) -> Check:
        """Released, and the object is re-observed at the target (horizontal distance to the place point)."""
        cfg, min_width = self.config, self.executor.config.min_grasp_width_m
        if width_at_release is not None and width_at_release < min_width:
            return Check(
                "premature_release",
                f"gripper at {width_at_release * 1000:.1f} mm before the release: the object was lost on the way",
            )
        if held_from is None:
            return Check(OK, "released (no grasp of this episode to re-observe)")
        grasp_action = held_from[0]
        found = self.locate(after.rgb, grasp_action)
        if found is None or found.bbox is None:
            return Check(
                "incorrect_spatial_outcome", f"{grasp_action.object or 'the object'} not found again after the place"
            )
        where = self._position_of(found, after)
        if where is None:
            return Check("incorrect_spatial_outcome", f"{grasp_action.object}: no depth where it was seen again")
        offset = float(np.hypot(*(where[:2] - np.asarray(target.position, float)[:2])))
        if offset > cfg.place_tolerance_m:
            return Check(
                "incorrect_spatial_outcome",
                f"{grasp_action.object} seen {offset * 1000:.0f} mm from the "
                f"place point (tolerance {cfg.place_tolerance_m * 1000:.0f} mm)",
            )
        return Check(OK, f"{grasp_action.object} seen {offset * 1000:.0f} mm from the place point")

    def check_handle(self, action: GroundedAction, target: Target, after: Observation) -> Check:
        """The handle moved along the surface normal: out for ``open``, in for ``close``."""
        cfg = self.config
        # the arm waits above the handle after its retreat: drop what is well above the handle from the depth, or
        # the hand in front of the drawer reads as a handle that moved towards the camera
        after = _without_points_above(after, float(np.asarray(target.position, float)[2]) + HANDLE_VIEW_ABOVE_M)
        found = self.locate(after.rgb, action)
        where = None if found is None else self._position_of(found, after)
        if where is None:
            return Check("incorrect_spatial_outcome", f"handle of {action.object} not found again")
        normal = None if target.normal is None else np.asarray(target.normal, float).copy()
        if normal is None or np.linalg.norm(normal[:2]) < 1e-6:
            normal = -np.asarray(target.position, float)  # the executor pulls towards the base then
        normal[2] = 0.0
        normal /= max(np.linalg.norm(normal), 1e-9)
        travel = float(np.dot(where - np.asarray(target.position, float), normal))
        wanted = travel if action.type == "open" else -travel
        if wanted < cfg.handle_min_travel_m:
            return Check(
                "incorrect_spatial_outcome",
                f"handle moved {travel * 1000:+.0f} mm along the normal "
                f"(need {'+' if action.type == 'open' else '-'}"
                f"{cfg.handle_min_travel_m * 1000:.0f} mm)",
            )
        return Check(OK, f"handle moved {travel * 1000:+.0f} mm along the normal")

    def _position_of(self, action: GroundedAction, obs: Observation) -> np.ndarray | None:
        """Base-frame position of a grounded thing in ``obs`` (a handle's point for open/close, else the grasp
        point); None without usable depth."""
        kind = action.type if action.type in ("open", "close") else "grasp"
        probe = GroundedAction(type=kind, object=action.object, bbox=action.bbox)
        one = GroundedPlan(
            instruction="locate", image_size=(int(obs.rgb.shape[1]), int(obs.rgb.shape[0])), actions=[probe]
        )
        try:
            return np.asarray(
                compute_targets(one, obs.depth_m, obs.camera, obs.extrinsics, self.target_config).targets[0].position,
                float,
            )
        except GeometryError:
            return None

    # -- bookkeeping -------------------------------------------------------------------------------
    def _new_plan(self, result: ClosedLoopResult, plan: GroundedPlan, reason: str) -> None:
        result.plans.append({"reason": reason, "plan": plan.to_dict()})
        if self.on_plan is not None:
            self.on_plan(plan, reason)

    def _notify(self, record: Attempt) -> None:
        if self.on_attempt is not None:
            self.on_attempt(record)

    def _report(self, result: ClosedLoopResult, record: Attempt) -> None:
        """Keep the last try of each step in ``result.steps`` (the executor's step JSON + attempts + check)."""
        entry = {
            "index": record.step,
            "type": record.type,
            "outcome": record.outcome,
            "message": record.message,
            "attempts": record.attempt,
            "check": record.check,
        }
        result.steps = [s for s in result.steps if s["index"] != record.step] + [entry]
        if record.check == OK:
            self._notify(record)

    @staticmethod
    def _end(result: ClosedLoopResult, success: bool, message: str, mode: str | None) -> ClosedLoopResult:
        result.success, result.message = success, message
        result.failure_mode = None if success or mode not in FAILURE_MODES else mode
        log.info("closed loop: %s", message)
        return result


def _without_points_above(obs: Observation, z_max_m: float) -> Observation:
    """``obs`` with depth set invalid (0) where the base-frame point lies above ``z_max_m``."""
    if obs.extrinsics is None:
        return obs
    depth = np.asarray(obs.depth_m, dtype=np.float32)
    points = obs.extrinsics.transform_points(obs.camera.deproject_image(depth).reshape(-1, 3))
    above = (points[:, 2] > z_max_m).reshape(depth.shape) & (depth > 0)
    return dataclasses.replace(obs, depth_m=np.where(above, 0.0, depth).astype(np.float32))


def _mode_of(result: ClosedLoopResult) -> str | None:
    """The failure mode of the last failed check, if any."""
    for attempt in reversed(result.attempts):
        if attempt.check and attempt.check != OK:
            return attempt.check
    return None


def _depth_change(
    before_m: np.ndarray,
    after_m: np.ndarray,
    bbox: Sequence[float] | None,
    image_shape: Sequence[int],
    threshold_m: float,
) -> tuple[int, int]:
    """(changed, valid) pixel counts of the box ``bbox`` (pixels of an image of ``image_shape``) between two depth
    images of the same camera; a pixel is valid when both images have depth there."""
    if bbox is None:
        return 0, 0
    h, w = before_m.shape[:2]
    sx, sy = w / float(image_shape[1]), h / float(image_shape[0])
    x1, y1, x2, y2 = bbox
    cols = slice(max(0, int(np.floor(x1 * sx))), min(w, int(np.ceil(x2 * sx))))
    rows = slice(max(0, int(np.floor(y1 * sy))), min(h, int(np.ceil(y2 * sy))))
    a, b = before_m[rows, cols], after_m[rows, cols]
    valid = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b)
    changed = valid & (np.abs(a - b) > threshold_m)
    return int(changed.sum()), int(valid.sum())
