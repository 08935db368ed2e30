"""The primitive executor: turns a grounded plan and its 3D targets into checked motions and step outcomes."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from grounded_planner.errors import InputError, RunFailure
from grounded_planner.execution.backend import (
    BackendError,
    BackendFault,
    GraspFailedError,
    MotionStoppedError,
    MotionTimeoutError,
    RobotBackend,
    UnreachableError,
)
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.motions import OPENING_MARGIN_M, Motion, StepFailure, fmt_position, plan_primitive
from grounded_planner.execution.outcomes import Outcome
from grounded_planner.execution.validate import (  # noqa: F401 (re-exported)
    ExecutionInputError,
    InvalidGoalError,
    check_goal,
    check_targets,
)

log = logging.getLogger(__name__)

FeedbackFn = Callable[[int, str, Any], None]


@dataclass
class StepOutcome:
    """How one plan step ended (the StepOutcome message of ExecutionResult carries the same). ``motions`` are the
    commands it planned (all of them in a dry run)."""

    index: int
    type: str
    outcome: Outcome
    message: str
    motions: list[Motion] = field(default_factory=list)
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # adjustments the planner made (heights raised, ...)

    def to_dict(self) -> dict[str, Any]:
        return {"index": int(self.index), "type": self.type, "outcome": self.outcome.value, "message": self.message}


@dataclass
class ExecutionResult:
    """The outcome of a whole plan: ``success`` is True only when every step ended ``ok``."""

    success: bool
    message: str
    steps: list[StepOutcome] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Exactly the ``grounded-planner execute`` JSON object."""
        return {"success": bool(self.success), "steps": [s.to_dict() for s in self.steps]}


class Executor:
    """Runs grounded plans on a :class:`RobotBackend` inside the configured safety envelope.

    Every step is planned into motions first; all of a plan's motions are checked against the envelope (and
    the backend's reachability check) before the first one is sent, so a plan with a target outside the
    workspace moves nothing. A failed step aborts the plan: the arm stops and, unless the backend faulted or
    the caller cancelled, rises by ``abort_retreat_height_m`` (an open gripper after ``grasp_failed``).
    """

    def __init__(self, backend: RobotBackend | None, config: ExecutorConfig | None = None):
        self.backend = backend
        self.config = config or ExecutorConfig()
        self._stop_reason: str | None = None
        self._deadline: float | None = None
        self._guard = threading.Lock()
        self._running = threading.Lock()  # one real run at a time: two plans must never drive one arm
        self._active = False  # a backend command is in flight (guarded by _guard)

    # -- planning ----------------------------------------------------------------------------------
    def plan_step(self, action: Any, target: Any, held_yaw: float | None = None) -> tuple[list[Motion], list[str]]:
        """The motions of one primitive and notes about adjustments (:func:`~grounded_planner.execution.motions.plan_primitive`)."""
        return plan_primitive(action, target, self.config, held_yaw)

    def _plan_all(
        self, pairs: list[tuple[int, Any, Any]], dry_run: bool, held_yaw: float | None = None
    ) -> list[StepOutcome]:
        """Plan and check every step (envelope, then the backend's reachability); outcome ``ok`` when it passes.
        A place keeps the yaw of the grasp before it (``held_yaw``: of a grasp run by an earlier call)."""
        checked: list[StepOutcome] = []
        for index, action, target in pairs:
            start = time.perf_counter()
            try:
                motions, notes = self.plan_step(action, target, held_yaw)
                for motion in motions:
                    if motion.kind == "move" and self.backend is not None:
                        reason = self.backend.check_reachable(motion.position_m, motion.yaw_rad)
                        if reason:
                            raise StepFailure(
                                Outcome.UNREACHABLE,
                                f"{action.type} waypoint {motion.label} {fmt_position(motion.position_m)}: {reason}",
                            )
            except StepFailure as failure:
                checked.append(
                    StepOutcome(
                        index, action.type, failure.outcome, failure.message, duration_s=time.perf_counter() - start
                    )
                )
                continue
            if action.type == "grasp":
                held_yaw = motions[0].yaw_rad
            elif action.type == "place":
                held_yaw = None
            verb = "would run" if dry_run else "planned"
            summary = f"{verb} {len(motions)} motions: " + "; ".join(m.describe() for m in motions)
            if dry_run and not (self.backend is not None and self.backend.checks_reachability_offline):
                summary += " [reachability not checked offline" + (
                    f" by the {self.backend.name} backend]" if self.backend is not None else "]"
                )
            if notes:
                summary += " [" + "; ".join(notes) + "]"
            checked.append(
                StepOutcome(
                    index,
                    action.type,
                    Outcome.OK,
                    summary,
                    motions,
                    duration_s=time.perf_counter() - start,
                    notes=notes,
                )
            )
        return checked

    # -- running -----------------------------------------------------------------------------------
    def execute(
        self,
        plan: Any,
        targets: Any = None,
        dry_run: bool = False,
        cancel: threading.Event | None = None,
        on_feedback: FeedbackFn | None = None,
        held_yaw: float | None = None,
    ) -> ExecutionResult:
        """Run (or with ``dry_run`` only check) ``plan`` with its 3D targets.

        ``held_yaw`` (radians, backend convention): the yaw of an object grasped by an earlier call, which a first
        place keeps (the closed loop runs one step per call; within one plan a place keeps its grasp's yaw anyway).

        ``targets`` (a ``TargetSet``) defaults to the targets the plan's actions carry (``action.target_3d``).
        Raises :class:`~grounded_planner.execution.validate.InvalidGoalError` (naming step and field) for a
        non-finite number, a negative width or a target set without a frame, and :class:`ExecutionInputError`
        when plan and targets do not match — in a dry run too; every robot-side problem becomes a step outcome.
        """
        targets, pairs = check_goal(
            plan, targets
        )  # before anything computes a motion: a NaN yaw must never reach the IK
        if not pairs:
            return ExecutionResult(True, "empty plan: nothing to do", [])
        if held_yaw is not None and not math.isfinite(held_yaw):
            raise InputError(f"held_yaw must be a finite angle in radians, got {held_yaw!r}")
        checked = self._plan_all(pairs, dry_run, held_yaw)
        refused = [s for s in checked if not s.outcome.is_ok]
        if dry_run:
            ok = not refused
            message = (
                "dry run: every step passes the checks"
                if ok
                else f"dry run: {len(refused)} of {len(checked)} steps would be refused"
            )
            return ExecutionResult(ok, message, checked)
        if refused:
            first = refused[0]
            first.message = f"plan refused before any motion: {first.message}"
            return ExecutionResult(False, first.message, [first])
        if self.backend is None:
            raise InputError("Executor.execute needs a backend unless dry_run=True")
        self.backend.require_connected()
        if not self._running.acquire(blocking=False):
            raise RunFailure("this executor is already running a plan on the robot")
        try:
            return self._run(pairs, checked, cancel or threading.Event(), on_feedback)
        finally:
            self._running.release()

    def _run(
        self,
        pairs: list[tuple[int, Any, Any]],
        checked: list[StepOutcome],
        cancel: threading.Event,
        on_feedback: FeedbackFn | None,
    ) -> ExecutionResult:
        backend = self.backend
        assert backend is not None
        self._stop_reason, self._deadline = None, None
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(cancel, done), name="executor-watch", daemon=True)
        watcher.start()
        results: list[StepOutcome] = []
        try:
            for (index, action, _target), plan in zip(pairs, checked):
                start = time.perf_counter()
                outcome, message = self._run_step(index, action, plan.motions, cancel, on_feedback)
                if plan.notes:
                    message += " [" + "; ".join(plan.notes) + "]"
                results.append(
                    StepOutcome(
                        index,
                        action.type,
                        outcome,
                        message,
                        plan.motions,
                        duration_s=time.perf_counter() - start,
                        notes=plan.notes,
                    )
                )
                if on_feedback is not None:
                    on_feedback(index, outcome.value, action)
                if not outcome.is_ok:
                    results[-1].message += self._abort(outcome)
                    return ExecutionResult(False, f"step {index} ({action.type}): {outcome.value}", results)
        except BaseException:
            # a bug or an interrupt outside the backend's error types: the arm must not keep moving
            self._safe_stop()
            raise
        finally:
            done.set()
            watcher.join(timeout=1.0)
        return ExecutionResult(True, f"all {len(results)} steps ok", results)

    def _run_step(
        self,
        index: int,
        action: Any,
        motions: Sequence[Motion],
        cancel: threading.Event,
        on_feedback: FeedbackFn | None,
    ) -> tuple[Outcome, str]:
        backend = self.backend
        assert backend is not None
        safety = self.config.safety
        for motion in motions:
            if cancel.is_set():
                return Outcome.CANCELLED, f"cancelled before {motion.label}; arm stopped"
            if on_feedback is not None:
                on_feedback(index, motion.label, action)
            with self._guard:
                self._deadline = time.monotonic() + safety.motion_timeout_s
                self._active = True
            try:
                if motion.kind == "move":
                    backend.move_to_pose(motion.position_m, motion.yaw_rad, motion.speed_scale)  # type: ignore[arg-type]
                elif motion.kind == "open":
                    backend.gripper_open(self._release_width(motion))
                else:
                    width = backend.gripper_close(motion.force_n, expected_width_m=motion.expected_width_m)
                    if motion.check_grasp and width < self.config.min_grasp_width_m:
                        return Outcome.GRASP_FAILED, (
                            f"{motion.label}: gripper closed to {width * 1000:.1f} mm, "
                            f"below {self.config.min_grasp_width_m * 1000:.1f} mm: "
                            "nothing held"
                        )
            except MotionStoppedError as exc:
                if self._stop_reason == "timeout":
                    return Outcome.TIMEOUT, f"{motion.label}: exceeded {safety.motion_timeout_s:.1f} s; arm stopped"
                if cancel.is_set() or self._stop_reason == "cancel":
                    return Outcome.CANCELLED, f"cancelled during {motion.label}; arm stopped ({exc})"
                return Outcome.FAULT, f"{motion.label}: motion stopped unexpectedly: {exc}"
            except MotionTimeoutError as exc:
                return Outcome.TIMEOUT, f"{motion.label}: {exc}"
            except UnreachableError as exc:
                return Outcome.UNREACHABLE, f"{motion.label}: {exc}"
            except GraspFailedError as exc:
                return Outcome.GRASP_FAILED, f"{motion.label}: {exc}"
            except BackendFault as exc:
                return Outcome.FAULT, f"{motion.label}: {exc}"
            except BackendError as exc:
                return Outcome.FAULT, f"{motion.label}: {type(exc).__name__}: {exc}"
            finally:
                with self._guard:
                    self._deadline = None
                    self._active = False
            if self._stop_reason == "cancel":  # stop() landed just as the motion finished
                return Outcome.CANCELLED, f"cancelled after {motion.label}; arm stopped"
        return Outcome.OK, "done: " + ", ".join(m.label for m in motions)

    def _release_width(self, motion: Motion) -> float | None:
        """The opening an ``open`` motion commands: a release at the configured opening that would not clear what
        the fingers hold (they grip wider than it less OPENING_MARGIN_M) opens fully instead, as a grasp of an object
        wider than the opening does: it must let go, never squeeze."""
        width = motion.width_m
        if width is not None and motion.label == "release" and self.backend.gripper_width() + OPENING_MARGIN_M > width:
            return None
        return width

    def _watch(self, cancel: threading.Event, done: threading.Event) -> None:
        """Stop the backend when the caller cancels or a command overruns its time limit."""
        backend = self.backend
        assert backend is not None
        while not done.is_set():
            if cancel.wait(0.01):
                self._stop_reason = "cancel"
                self._safe_stop()
                # keep stopping while a command is in flight: a stop that lands just before a command starts
                # would be cleared by that command, which would then run to its end
                while not done.wait(0.02):
                    with self._guard:
                        active = self._active
                    if active:
                        self._safe_stop()
                return
            with self._guard:
                deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self._stop_reason = "timeout"
                with self._guard:
                    if self._deadline == deadline:  # fire once per command
                        self._deadline = None
                self._safe_stop()

    def _safe_stop(self) -> None:
        try:
            self.backend.stop()  # type: ignore[union-attr]
        except BackendError as exc:
            log.error("stop() failed: %s", exc)

    def _state_note(self) -> str:
        """Where the arm and gripper are now (the known state a cancel or fault leaves), as far as the backend tells."""
        backend = self.backend
        assert backend is not None
        parts = []
        try:
            pose = backend.current_pose()
            if pose is not None:
                parts.append(f"arm still at {fmt_position(pose[0])}")
            parts.append(f"gripper at {backend.gripper_width() * 1000:.1f} mm")
        except Exception as exc:  # noqa: BLE001 - best effort: a report on a broken robot must not raise past the outcome
            parts.append(f"state unknown: {exc}")
        return ", ".join(parts)

    def _abort(self, outcome: Outcome) -> str:
        """After a failed step: leave the arm in a known state. Returns a note for the step message."""
        backend = self.backend
        assert backend is not None
        if outcome in (Outcome.CANCELLED, Outcome.FAULT):
            # after a fault the robot needs a person to look at it; after a cancel the caller wants it still
            if outcome is Outcome.FAULT:
                self._safe_stop()
            return f"; {self._state_note()}; rest of the plan not run"
        self._stop_reason = None
        notes = []
        with self._guard:  # the retreat is held to the same time limit as any motion, and can be cancelled
            self._deadline = time.monotonic() + self.config.safety.motion_timeout_s
            self._active = True
        try:
            if outcome is Outcome.GRASP_FAILED:
                backend.gripper_open(self.config.gripper_open_width_m)
                notes.append("gripper opened")
            pose = backend.current_pose()
            if pose is not None:
                position, yaw = pose
                top = self.config.safety.workspace_max_m[2]
                up = np.array(position, dtype=float)
                up[2] = min(up[2] + self.config.abort_retreat_height_m, top)
                if self.config.safety.violation(up) is None:
                    backend.move_to_pose(up, yaw, self.config.speed(self.config.fine_speed_scale))
                    notes.append(f"retreated to z={up[2]:.3f} m")
                else:
                    notes.append("no retreat: the arm stopped outside the envelope")
        except BackendError as exc:
            notes.append(f"retreat failed: {exc}")
            self._safe_stop()
        finally:
            with self._guard:
                self._deadline = None
                self._active = False
        return "; " + ", ".join(notes + ["rest of the plan not run"])
