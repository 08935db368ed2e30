"""V2GP stage 1, the readers of a gripper signal: which element(s) of a dataset are a robot's gripper(s), their
commanded counterpart, and the plain ``frame,gripper`` CSV.

A LeRobot dataset's gripper is found by name (``gripper``, ``hand``, ``finger``, ``claw``, ``jaw``), through the
robot profile of its ``robot_type`` (:mod:`grounded_planner.v2gp.profiles`) where there is one, never by position:
the last element of a state vector is as often a quaternion component as a gripper. ``docs/v2gp.md`` ("Which
column is the gripper") has the rules.
"""

from __future__ import annotations

import csv
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grounded_planner.v2gp.errors import DatasetError
from grounded_planner.v2gp.levels import SignalError
from grounded_planner.v2gp.profiles import BY_NAME, UNKNOWN, RobotProfile, profile_for_robot_type

#: words that name a gripper element
GRIPPER_WORDS = ("gripper", "hand", "finger", "claw", "jaw")
_WORD = re.compile(r"gripper|hand|finger|claw|jaw", re.IGNORECASE)
_STRONG = re.compile(r"gripper|claw|jaw", re.IGNORECASE)
# elements that carry a gripper word but are no opening: a pose, an orientation, a rate, a force
_NOT_OPENING = re.compile(
    r"quat|orient|rotation|euler|roll|pitch|yaw|vel|effort|torque|current|force|temp|"
    r"end_?effector|eef|(^|[._])ee[._]|cartesian|pose|(^|[._])pos(ition)?_[xyz]$|[._][xyzw]$|"
    r"_[xyzw]$|wrist|arm_joint",
    re.IGNORECASE,
)
_LEFT = re.compile(r"(^|[._/])(left|l)([._/]|$)|^kLeft|^left", re.IGNORECASE)
_RIGHT = re.compile(r"(^|[._/])(right|r)([._/]|$)|^kRight|^right", re.IGNORECASE)
# state and action features, in the order they are tried
STATE_KEYS = ("observation.state", "state", "states", "observation.states", "observation.qpos", "qpos")
ACTION_KEYS = ("action", "actions", "action.original")


def element_names(feature: dict[str, Any]) -> list[str]:
    """A feature's element names as one flat list (``names`` or ``name``; ``[...]``, ``{"motors": [...]}`` or
    nested ``[["a", "b"]]``)."""
    names = feature.get("names", feature.get("name"))
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    out: list[str] = []
    stack = [names] if names is not None else []
    while stack:
        item = stack.pop(0)
        if isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif item is not None:
            out.append(str(item))
    return out


@dataclass
class GripperChannel:
    """One gripper of a dataset: where its signal and its command are, and what its raw values mean."""

    hand: str  # "" for the only gripper; "left" / "right" / ... on a robot with several
    column: str  # feature key (observation.state, observation.state.gripper_position, ...)
    indices: list[int] | None  # elements of a vector column (several: one hand's fingers, combined); None: scalar
    names: list[str]
    open_value: float | None
    closed_value: float | None
    combine: str = "mean"
    command_column: str | None = None
    command_indices: list[int] | None = None
    profile: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How a user names it: ``observation.state[gripper.pos]``."""
        if self.indices is None:
            return self.column
        return f"{self.column}[{', '.join(self.names) if self.names else ', '.join(map(str, self.indices))}]"

    @property
    def command_label(self) -> str:
        if self.command_column is None:
            return ""
        if self.command_indices is None:
            return self.command_column
        return f"{self.command_column}[{', '.join(self.names) or ', '.join(map(str, self.command_indices))}]"


def _feature_is_vector(feature: dict[str, Any]) -> bool:
    shape = feature.get("shape") or [1]
    return int(np.prod(shape)) > 1 or bool(element_names(feature))


def _state_like(features: dict[str, Any]) -> list[str]:
    keys = [k for k in STATE_KEYS if k in features]
    keys += sorted(k for k in features if k.startswith("observation.state.") or k.startswith("observation.states."))
    keys += sorted(
        k
        for k in features
        if k.startswith("observation.")
        and k not in keys
        and features[k].get("dtype") not in ("image", "video", "string")
    )
    return [k for k in dict.fromkeys(keys) if features[k].get("dtype") not in ("image", "video", "string")]


def _command_for(
    features: dict[str, Any], column: str, names: list[str], indices: list[int] | None
) -> tuple[str | None, list[int] | None]:
    """The commanded counterpart: the action element(s) of the same name(s) (a teleoperation dataset's leader)."""
    if indices is None:  # observation.state.gripper_position -> action.gripper_position
        for prefix in ("observation.state.", "observation.states.", "observation."):
            if column.startswith(prefix):
                for action in ACTION_KEYS:
                    key = action + "." + column[len(prefix) :]
                    if key in features:
                        return key, None
        return None, None
    if column in ACTION_KEYS or not names:
        return None, None
    for action in ACTION_KEYS:
        if action in features:
            action_names = element_names(features[action])
            if all(n in action_names for n in names):
                return action, [action_names.index(n) for n in names]
    return None, None


def resolve_spec(features: dict[str, Any], spec: str, where: str) -> tuple[str, list[int] | None, list[str]]:
    """``COLUMN``, ``COLUMN[INDEX]`` or ``COLUMN[ELEMENT NAME]`` -> (column, [index] or None, [name])."""
    m = re.match(r"^(.+?)(?:\[([^\]]+)\])?$", spec.strip())
    if not m:
        raise DatasetError(f"gripper column spec {spec!r}: expected COLUMN or COLUMN[INDEX|NAME]")
    column, sel = m.group(1), m.group(2)
    if column not in features:
        raise DatasetError(f"{where}: gripper column {column!r} is not a feature (have: {', '.join(sorted(features))})")
    if sel is None:
        return column, None, []
    names = element_names(features[column])
    try:
        index = int(sel)
    except ValueError:
        if sel in names:
            return column, [names.index(sel)], [sel]
        raise DatasetError(f"{where}: {column} has no element named {sel!r} (names: {names})") from None
    name = names[index] if names and -len(names) <= index < len(names) else ""
    return column, [index], [name] if name else []


def find_grippers(
    features: dict[str, Any], robot_type: str | None, robot: str | None = None, spec: str = "", where: str = "dataset"
) -> tuple[list[GripperChannel], list[str]]:
    """The dataset's gripper channels and the warnings to show (unknown robot, assumptions).

    ``robot``: a profile name (``--robot``) that overrides the ``robot_type``; ``spec``: a column named by the
    user (``observation.state[6]``), which is then the only channel. Raises :class:`DatasetError` naming the
    columns it looked at when no element is named like a gripper.
    """
    warnings: list[str] = []
    profile: RobotProfile | None = BY_NAME.get(robot) if robot else None
    if profile is None:
        profile = profile_for_robot_type(robot_type)
    if spec:
        column, indices, names = resolve_spec(features, spec, where)
        cmd, cmd_idx = _command_for(features, column, names, indices)
        base = profile or UNKNOWN
        return [
            GripperChannel(
                "", column, indices, names, base.open_value, base.closed_value, base.combine, cmd, cmd_idx, base.name
            )
        ], warnings
    channels = _by_profile(features, profile) if profile is not None else []
    warnings += list(dict.fromkeys(n for ch in channels for n in ch.notes))
    if not channels:
        channels = _by_name(features)
        if not channels:
            looked = {k: element_names(features[k])[:40] for k in _state_like(features)}
            raise DatasetError(
                f"{where}: no element named like a gripper ({', '.join(GRIPPER_WORDS)}) in "
                + (
                    "; ".join(f"{k} (names: {', '.join(v) if v else 'none'})" for k, v in looked.items())
                    or "any state feature"
                )
                + "; name it in the config, e.g. gripper: observation.state[6] (robot_type "
                + f"{robot_type!r})"
            )
        if profile is not None:
            for ch in channels:
                ch.open_value, ch.closed_value, ch.combine, ch.profile = (
                    profile.open_value,
                    profile.closed_value,
                    profile.combine,
                    profile.name,
                )
            warnings.append(
                f"robot profile {profile.name!r}: its gripper pattern matched no element; found by name "
                f"instead: {', '.join(ch.label for ch in channels)}"
            )
        # no profile: stage1.plan_grippers says so in one warning, with the range and polarity it assumes
    return channels, warnings


def _by_profile(features: dict[str, Any], profile: RobotProfile) -> list[GripperChannel]:
    channels: list[GripperChannel] = []
    taken: set[str] = set()
    for hand, pattern in profile.grippers:
        rx = re.compile(pattern, re.IGNORECASE)
        for key in _state_like(features):
            feature = features[key]
            if _feature_is_vector(feature):
                names = element_names(feature)
                idx = [i for i, n in enumerate(names) if rx.search(n) and not _excluded(n, profile)]
                if idx and key + str(idx) not in taken:
                    taken.add(key + str(idx))
                    sel = [names[i] for i in idx]
                    cmd, cmd_idx = _command_for(features, key, sel, idx)
                    channels.append(
                        GripperChannel(
                            hand,
                            key,
                            idx,
                            sel,
                            profile.open_value,
                            profile.closed_value,
                            profile.combine,
                            cmd,
                            cmd_idx,
                            profile.name,
                        )
                    )
                    break
            elif rx.search(key.split(".")[-1]) and key not in taken:
                taken.add(key)
                cmd, cmd_idx = _command_for(features, key, [], None)
                channels.append(
                    GripperChannel(
                        hand,
                        key,
                        None,
                        [],
                        profile.open_value,
                        profile.closed_value,
                        profile.combine,
                        cmd,
                        cmd_idx,
                        profile.name,
                    )
                )
                break
        if channels and hand == "":
            break
    if not channels:
        channels = _by_layout(features, profile)
    if any(ch.hand for ch in channels):  # a two-armed profile: the one-arm fallback pattern is not wanted too
        channels = [ch for ch in channels if ch.hand]
    return channels


def _by_layout(features: dict[str, Any], profile: RobotProfile) -> list[GripperChannel]:
    """A profile's known layout of a state vector stored without element names (exactly that length); the
    command is the action element at the same place when the action has the same unnamed layout."""
    for key in _state_like(features):
        feature = features[key]
        length = int(np.prod(feature.get("shape") or [1]))
        if element_names(feature) or not _feature_is_vector(feature):
            continue
        for size, places in profile.unnamed:
            if size != length:
                continue
            action = next(
                (
                    a
                    for a in ACTION_KEYS
                    if a in features
                    and not element_names(features[a])
                    and int(np.prod(features[a].get("shape") or [1])) == size
                ),
                None,
            )
            return [
                GripperChannel(
                    hand,
                    key,
                    [i],
                    [],
                    profile.open_value,
                    profile.closed_value,
                    profile.combine,
                    action,
                    [i] if action else None,
                    profile.name,
                    [
                        f"{key} has no element names: element {i} is the {hand} gripper in the "
                        f"{size}-element layout of the {profile.name} profile"
                    ],
                )
                for hand, i in places
            ]
    return []


def _excluded(name: str, profile: RobotProfile) -> bool:
    # a profile pattern is specific, but a pose element can still share a word ("left_gripper_quat_x")
    return bool(re.search(r"quat|orient|euler|vel|effort|torque|current|force|temp|cartesian|pose", name, re.I))


def _side(name: str) -> str:
    if _LEFT.search(name):
        return "left"
    if _RIGHT.search(name):
        return "right"
    return ""


def _by_name(features: dict[str, Any]) -> list[GripperChannel]:
    """Elements named like a gripper, grouped per hand; ``gripper``/``claw``/``jaw`` before ``hand``/``finger``."""
    for strong in (True, False):
        for key in _state_like(features):
            feature = features[key]
            if _feature_is_vector(feature):
                names = element_names(feature)
                hits = [
                    i
                    for i, n in enumerate(names)
                    if (_STRONG if strong else _WORD).search(n) and not _NOT_OPENING.search(n)
                ]
            else:
                leaf = key.split(".", 2)[-1] if key.count(".") >= 2 else key
                ok = (_STRONG if strong else _WORD).search(leaf) and not _NOT_OPENING.search(leaf)
                if ok:
                    cmd, cmd_idx = _command_for(features, key, [], None)
                    return [GripperChannel(_side(leaf), key, None, [], None, None, "mean", cmd, cmd_idx, "")]
                continue
            if not hits:
                continue
            groups: dict[str, list[int]] = {}
            for i in hits:
                groups.setdefault(_side(names[i]), []).append(i)
            if len(groups) > 1 and "" in groups:  # an element with no side beside sided ones: its own group
                groups["other"] = groups.pop("")
            out = []
            for hand, idx in groups.items():
                sel = [names[i] for i in idx]
                cmd, cmd_idx = _command_for(features, key, sel, idx)
                out.append(
                    GripperChannel(
                        hand if len(groups) > 1 else hand, key, idx, sel, None, None, "mean", cmd, cmd_idx, ""
                    )
                )
            return out
    return []


def combine(rows: np.ndarray, how: str) -> np.ndarray:
    """(T, K) elements of one hand -> (T,) signal: their mean, or the mean of their absolute values.

    Elements of opposite sign (two fingers of a parallel gripper, +0.04 and -0.04 open: LIBERO's and
    robomimic's finger joints) would cancel in a mean: their absolute values are averaged then.
    """
    if rows.ndim == 1:
        return rows
    if rows.shape[1] == 1:
        return rows[:, 0]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row is a missing sample
        medians = np.nanmedian(rows, axis=0)
        mixed = bool(np.nanmax(medians) > 0 > np.nanmin(medians))
        return np.nanmean(np.abs(rows), axis=1) if how == "abs_mean" or mixed else np.nanmean(rows, axis=1)


def elements(cells: list, indices: list[int] | None, path: Path | str, column: str) -> np.ndarray:
    """(T, K) floats from a column of numbers or of vectors (elements ``indices``); None cells are NaN."""
    k = 1 if indices is None else len(indices)
    out = np.full((len(cells), k), np.nan)
    for i, v in enumerate(cells):
        if v is None:
            continue
        if isinstance(v, (list, tuple, np.ndarray)):
            if indices is None:
                if len(v) == 1:
                    out[i, 0] = np.nan if v[0] is None else float(v[0])
                    continue
                raise DatasetError(f"{path}: {column} is a vector; name the element, e.g. '{column}[-1]'")
            for j, index in enumerate(indices):
                if not -len(v) <= index < len(v):
                    raise DatasetError(f"{path}: {column} row {i} has {len(v)} elements, no element {index}")
                item = v[index]
                out[i, j] = np.nan if item is None else float(item)
        else:
            out[i, 0] = float(v)
    return out


def looks_like_a_gripper(signals: list[np.ndarray]) -> str:
    """ "" when ``signals`` (one per episode) move like a gripper; else why not, in words.

    A gripper dwells: it sits at a few levels (open, closed, on an object) and moves between them. A signal that
    never stops (a joint of the arm, a pose element) spends few frames still.
    """
    finite = [s[np.isfinite(s)] for s in signals if np.isfinite(s).sum() > 3]
    if not finite:
        return "has no finite sample"
    lo = min(float(s.min()) for s in finite)
    hi = max(float(s.max()) for s in finite)
    if hi - lo <= 1e-9 * max(1.0, abs(hi)):
        return f"is constant ({lo:.6g}) in every episode read"
    still = []
    for s in finite:
        span = float(s.max() - s.min())
        if span <= 0:
            continue
        still.append(float(np.mean(np.abs(np.diff(s)) <= 0.01 * span)))
    if still and float(np.median(still)) < 0.2:
        return (
            f"moves in almost every frame ({100 * float(np.median(still)):.0f} % of frames still, a gripper "
            "rests at its levels): it does not look like a gripper"
        )
    # a clock, a counter or a distance travelled: one way only in every episode, a little in every frame (a gripper
    # cut before its release falls one way too, but rests between its moves)
    moving = [s for s in finite if float(s.max() - s.min()) > 0]
    if moving and all(_one_way(s) and _share_still(s, 0.002) < 0.2 for s in moving):
        return (
            "only rises or only falls, a little in every frame, in every episode read: it does not look like a gripper"
        )
    return ""


def _one_way(s: np.ndarray) -> bool:
    """True when ``s`` never turns back by more than 5 % of its span (it only rises or only falls)."""
    span = float(s.max() - s.min())
    back_down = float(np.max(np.maximum.accumulate(s) - s))
    back_up = float(np.max(s - np.minimum.accumulate(s)))
    return min(back_down, back_up) <= 0.05 * span


def _share_still(s: np.ndarray, share: float) -> float:
    """The share of frame-to-frame steps of ``s`` within ``share`` of its span."""
    return float(np.mean(np.abs(np.diff(s)) <= share * float(s.max() - s.min())))


def load_gripper_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a ``frame,gripper`` CSV; empty or ``nan`` gripper cells are missing samples, ``true``/``false``
    (``closed``/``open``) a binary gripper state.

    Returns
    -------
    frames : ndarray of int64, shape (N,)
    values : ndarray of float, shape (N,)
    """
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8-sig")  # a BOM from spreadsheet exports is tolerated
    except OSError as exc:
        raise SignalError(f"cannot read gripper signal {path}: {exc.strerror}") from exc
    frames: list[int] = []
    values: list[float] = []
    with handle:
        reader = csv.DictReader(handle)
        fields = [f.strip() for f in (reader.fieldnames or [])]
        if "frame" not in fields or "gripper" not in fields:
            raise SignalError(f"{path}: expected CSV columns 'frame,gripper', got {','.join(fields) or 'no header'}")
        for line, row in enumerate(reader, start=2):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            try:
                frames.append(int(float(row["frame"])))
            except ValueError as exc:
                raise SignalError(f"{path}:{line}: frame must be an integer, got {row['frame']!r}") from exc
            cell = row["gripper"]
            if cell == "" or cell.lower() in ("nan", "none", "null", "na"):
                values.append(float("nan"))
                continue
            if cell.lower() in ("true", "closed", "false", "open"):  # a binary gripper state
                values.append(1.0 if cell.lower() in ("true", "closed") else 0.0)
                continue
            try:
                value = float(cell)
            except ValueError as exc:
                raise SignalError(f"{path}:{line}: gripper must be a number, got {cell!r}") from exc
            if math.isinf(value):
                raise SignalError(f"{path}:{line}: gripper must be finite, got {cell!r}")
            values.append(value)
    frames_arr = np.asarray(frames, dtype=np.int64)
    if frames_arr.size > 1 and np.any(np.diff(frames_arr) <= 0):
        bad = int(np.flatnonzero(np.diff(frames_arr) <= 0)[0]) + 1
        raise SignalError(
            f"{path}: frame numbers must be strictly increasing; row {bad + 2} has frame "
            f"{frames_arr[bad]} after {frames_arr[bad - 1]}"
        )
    return frames_arr, np.asarray(values, dtype=float)
