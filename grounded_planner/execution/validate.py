"""Goal checks at the executor's door: every number finite, quaternions unit, frames known, widths >= 0.

Used by :meth:`Executor.execute` (so the ``execute`` CLI, its ``--dry-run`` and the executor node refuse alike)
and by the node on the goal message's poses. A refusal names the step and the field, so a bad plan file or a
bad goal explains itself; nothing of a refused goal reaches the motion planner or the robot's IK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from grounded_planner.errors import InputError
from grounded_planner.plan import PlanError

# How far |q| may be from 1 (a quaternion normalised in float32 is within ~1e-7; hand-written ones such as
# (0, 0, 0.7071, 0.7071) within ~1e-5).
UNIT_QUATERNION_TOLERANCE = 1e-3


class ExecutionInputError(InputError):
    """The plan and the targets do not fit together (a missing target, a type mismatch); nothing was moved."""


class InvalidGoalError(ExecutionInputError):
    """A goal field that cannot be executed; ``step`` (None: the whole goal) and ``field`` name it.

    Nothing has moved when this is raised.
    """

    def __init__(self, step: int | None, kind: str, field: str, problem: str):
        where = f"step {step} ({kind}) {field}" if step is not None else field
        super().__init__(f"{where}: {problem}")
        self.step = step
        self.field = field


def _finite(values: Sequence[Any]) -> bool:
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def _num(value: Any) -> str:
    try:
        return f"{float(value):.6g}"  # float32 message fields print as the number the user wrote
    except (TypeError, ValueError):
        return repr(value)


def _fmt(values: Any) -> str:
    try:
        return "[" + ", ".join(f"{float(v):g}" for v in values) + "]"
    except (TypeError, ValueError):
        return repr(values)


def check_target(step: int, kind: str, target: Any) -> None:
    """One target: position 3 finite numbers (m); yaw None or finite (rad); width None or finite >= 0 (m);
    normal None or 3 finite numbers; confidence finite. Raises :class:`InvalidGoalError`."""
    position = getattr(target, "position", None)
    try:
        ok = position is not None and len(position) == 3 and _finite(position)
    except TypeError:
        ok = False
    if not ok:
        raise InvalidGoalError(step, kind, "position", f"{_fmt(position)} must be 3 finite numbers (x, y, z in metres)")
    yaw = getattr(target, "yaw", None)
    if yaw is not None and not _finite([yaw]):
        raise InvalidGoalError(
            step, kind, "yaw", f"{_num(yaw)} is not a finite angle (radians about the frame's z axis)"
        )
    width = getattr(target, "width", None)
    if width is not None and not (_finite([width]) and float(width) >= 0):
        raise InvalidGoalError(step, kind, "width", f"{_num(width)} must be a finite width >= 0 m (or unknown)")
    normal = getattr(target, "normal", None)
    if normal is not None and not (len(normal) == 3 and _finite(normal)):
        raise InvalidGoalError(step, kind, "normal", f"{_fmt(normal)} must be 3 finite numbers (or unknown)")
    confidence = getattr(target, "confidence", 0.0)
    if not _finite([confidence]):
        raise InvalidGoalError(step, kind, "confidence", f"{_num(confidence)} must be a finite number in [0, 1]")


def check_targets(targets: Any, expected_frame: str = "") -> None:
    """A whole target set (a ``TargetSet``): a named frame (``expected_frame`` when given), every target sound.

    Raises :class:`InvalidGoalError` for the first bad field.
    """
    frame = str(getattr(targets, "frame", "") or "")
    if not frame:
        raise InvalidGoalError(None, "", "frame", "the targets name no frame: expected the robot base frame")
    if expected_frame and frame != expected_frame:
        raise InvalidGoalError(
            None, "", "frame", f"targets are in {frame!r}, expected {expected_frame!r} (the robot base)"
        )
    for target in getattr(targets, "targets", []) or []:
        own = str(getattr(target, "frame", "") or "")
        index = int(getattr(target, "index", 0))
        kind = str(getattr(target, "type", ""))
        if own and own != frame:
            raise InvalidGoalError(index, kind, "frame", f"{own!r} differs from the plan's frame {frame!r}")
        check_target(index, kind, target)


def pair_steps(plan: Any, targets: Any) -> list[tuple[int, Any, Any]]:
    """``(index, action, target)`` for every plan action; :class:`ExecutionInputError` when they do not fit.

    Every action needs exactly one target of its own type, and every target an action; targets still in a
    camera optical frame are refused (back-projected without extrinsics: metres, but not the robot's).
    """
    frame = str(getattr(targets, "frame", ""))
    if "optical" in frame:
        raise ExecutionInputError(
            f"targets are in the camera frame {frame!r}, not the robot base frame: "
            "back-project with the camera extrinsics (--extrinsics)"
        )
    actions = list(getattr(plan, "actions", []))
    by_index: dict[int, Any] = {}
    for target in getattr(targets, "targets", []):
        if int(target.index) in by_index:
            raise ExecutionInputError(f"targets: two targets for action {target.index}")
        by_index[int(target.index)] = target
    pairs = []
    for index, action in enumerate(actions):
        target = by_index.pop(index, None)
        if target is None:
            raise ExecutionInputError(
                f"action {index} ({action.type}) has no target in the target set "
                f"(targets for actions {sorted(t.index for t in targets.targets)})"
            )
        if str(target.type) != str(action.type):
            raise ExecutionInputError(f"action {index} is a {action.type} but its target is a {target.type}")
        pairs.append((index, action, target))
    if by_index:
        raise ExecutionInputError(
            f"targets for actions {sorted(by_index)} that the plan ({len(actions)} actions) does not have"
        )
    return pairs


def check_goal(plan: Any, targets: Any = None) -> tuple[Any, list[tuple[int, Any, Any]]]:
    """Every check that needs no robot: plan and targets fit (:func:`pair_steps`), every target sound
    (:func:`check_targets`). ``targets`` None: the targets the plan's actions carry.

    Returns the target set and the ``(index, action, target)`` pairs. Raises :class:`InvalidGoalError` or
    :class:`ExecutionInputError`; callers run it before connecting a robot, so a bad file never connects one.
    """
    if targets is None:
        try:
            targets = plan.target_set()
        except PlanError as exc:
            raise ExecutionInputError(str(exc)) from exc
    pairs = pair_steps(plan, targets)
    check_targets(targets)
    return targets, pairs


def check_quaternion(step: int, kind: str, q_xyzw: Sequence[Any]) -> None:
    """A pose orientation (x, y, z, w) must be finite and unit length. Raises :class:`InvalidGoalError`."""
    if len(q_xyzw) != 4 or not _finite(q_xyzw):
        raise InvalidGoalError(step, kind, "pose.orientation", f"{_fmt(q_xyzw)} must be 4 finite numbers (x, y, z, w)")
    norm = math.sqrt(sum(float(v) ** 2 for v in q_xyzw))
    if abs(norm - 1.0) > UNIT_QUATERNION_TOLERANCE:
        raise InvalidGoalError(
            step, kind, "pose.orientation", f"{_fmt(q_xyzw)} is not a unit quaternion (norm {norm:.4g})"
        )


@dataclass(frozen=True)
class GoalPose:
    """The 3D target of one goal action as a message carries it, in plain values."""

    step: int
    type: str
    frame: str
    position: Sequence[Any]  # x, y, z (m)
    orientation: Sequence[Any]  # quaternion x, y, z, w
    width: Any = 0.0  # m; 0 = unknown
    normal: Sequence[Any] = (0.0, 0.0, 0.0)  # zero = unknown


def check_poses(poses: Iterable[GoalPose], expected_frame: str = "") -> None:
    """The goal's poses (one per action that has one): every frame known (non-empty, ``expected_frame`` when
    given, one frame for the whole plan), every position and normal finite, every orientation a unit
    quaternion, every width finite and >= 0. Raises :class:`InvalidGoalError` for the first bad field.
    """
    first = ""
    for pose in poses:
        step, kind, frame = pose.step, pose.type, pose.frame
        if not frame:
            raise InvalidGoalError(step, kind, "pose.header.frame_id", "empty: the pose names no frame")
        if expected_frame and frame != expected_frame:
            raise InvalidGoalError(
                step, kind, "pose.header.frame_id", f"{frame!r}, expected {expected_frame!r} (the robot base)"
            )
        first = first or frame
        if frame != first:
            raise InvalidGoalError(
                step, kind, "pose.header.frame_id", f"{frame!r} differs from the first pose's {first!r}"
            )
        if not (len(pose.position) == 3 and _finite(pose.position)):
            raise InvalidGoalError(step, kind, "pose.position", f"{_fmt(pose.position)} must be 3 finite numbers (m)")
        check_quaternion(step, kind, pose.orientation)
        if not (_finite([pose.width]) and float(pose.width) >= 0):
            raise InvalidGoalError(
                step, kind, "width", f"{_num(pose.width)} must be a finite width >= 0 m (0 = unknown)"
            )
        if not (len(pose.normal) == 3 and _finite(pose.normal)):
            raise InvalidGoalError(
                step, kind, "normal", f"{_fmt(pose.normal)} must be 3 finite numbers (zero = unknown)"
            )
