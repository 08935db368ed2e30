"""V2GP stage 1: split a demonstration into close-open gripper cycles (manipulation segments).

Definition (the one ``grounded-planner v2gp segment`` prints):

* The signal is normalised so that 0 is fully open and 1 fully closed (``open_value``/``closed_value``
  map raw units such as a Franka finger width in metres).
* Detection uses hysteresis: the gripper counts as *closed* from the first frame at or above
  ``close_threshold`` until the first frame at or below ``open_threshold``. A closed spell shorter than
  ``min_frames`` is a glitch and is ignored; an open spell shorter than ``min_frames`` inside a grasp
  is a sensor dropout and is bridged (both counted in measured samples). Missing samples (empty/NaN
  cells, skipped frame numbers) are interpolated for detection only.
* **start** is the frame where the gripper *starts closing*: walking back from the close-threshold
  crossing to where the rise began, i.e. the last frame still at the open level before the rise. On a
  noisy signal a single frame cannot show that, so the edge is fitted: the open level is the median of
  the flat open frames, the noise band is ``open_level + tol`` with ``tol = max(4 sigma, 0.02)`` (sigma
  from the median absolute frame-to-frame difference of the open frames), and a ramp model (flat at the
  open level, straight rise, flat at the closed level) is least-squares fitted to the samples around the
  edge; the start is the frame nearest to the fitted knee. For a linear ramp ``0, 0, 0.25, 0.5, ...`` that
  is the last ``0``; for an instantaneous step ``0, 0, 1, 1`` it is also the last ``0`` (the last open
  frame: the step happened right after it).
* **end** is the frame where the gripper is *fully open again*: the same fit on the falling edge, the frame
  nearest to where the fall reaches the open level, i.e. the first frame back at the open level (``1, 0.5,
  0, 0`` -> the first ``0``; a step ``1, 1, 0, 0`` -> the first ``0``).
* Precision: on noisy signals the boundaries are exact while each ramp frame moves the gripper by well
  over the noise (e.g. 2 % noise, ramps of up to ~10 frames); slower ramps in noise are placed within one
  frame. A boundary frame that is itself missing is inferred from its neighbours.
* A gripper already closed at the first frame gives a segment starting there (``truncated_start``); a
  gripper still closed at the last frame has no "fully open again" frame, so that cycle is reported
  in :attr:`SegmentResult.dropped` (reason ``not_reopened``) and not as a segment.

Learned levels (``levels: auto``, the ``so101`` profile; :func:`segment_levels`): real teleoperation does not
look like a textbook. An SO-101 gripper rests closed on nothing (about 2 of 100), opens only part way (30-39)
and holds a cube at an intermediate level (about 10). Fixed thresholds then either miss the grasp or report
the rest as one. Instead each episode's levels are learned from its own signal:

* the signal is turned into closedness (0 open .. 1 closed) with the configured polarity (``open_value`` /
  ``closed_value``; either may be ``None`` = auto: the closed side is then the signal's extreme farthest
  from the given open value, or the reverse);
* the turning points (openings and closings) are found by a zig-zag over the lightly smoothed signal: a
  move counts when it covers ``prominence`` of the episode's range (learned: most open to most closed), so
  a partial release still counts while sensor noise and hesitations of the operator do not;
* each closing between two openings is one closed spell with a flat level (1-D clustering of the samples
  near its peak). The **rest** level is the level of a spell that starts or ends the episode closed (the arm
  at rest); a spell whose level is within ``max(10 % of the range, 3 noise sigma)`` of the rest level (or
  beyond it) is a closure on nothing (``empty_closure``), any other is a **grasp**: something stopped the
  fingers. Without a rest spell nothing is called empty here (the plan filters still catch empty grasps);
* a thin object stops the fingers only a little short of the rest level (a roll of tape: held at 3.6 of 100
  against a rest of 1, with openings of 20-46). Where the dataset has the commanded gripper (``action``, the
  leader arm's gripper in teleoperation), a spell the fingers hold short of the command by more than they do
  at rest (``max(4 % of the range, 4 noise sigma)`` more) is a grasp whatever its level: on nothing the
  follower reaches what the leader commands;
* a grasp's **start** is the last frame still at the level of the opening before it, its **end** the first
  frame at the level of the opening after it (the convention above); a closed spell with no opening before
  it (the rest-closed start) is not a segment, one with no opening after it is dropped as ``not_reopened``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np


class SignalError(ValueError):
    """A gripper signal that cannot be segmented (bad file, bad column, bad values)."""


@dataclass
class SegmentConfig:
    """Per-robot segmentation settings (see the module docstring for the exact definition)."""

    # normalised level at/above which the gripper counts as closed (0 = open, 1 = closed)
    close_threshold: float = 0.5
    # normalised level at/below which a closed gripper counts as released; must be < close_threshold
    open_threshold: float = 0.2
    # a closed spell must last this many frames to be a grasp; shorter open spells inside a grasp are dropouts
    min_frames: int = 3
    # raw signal value of the fully open gripper (e.g. 0.08 for a Franka finger width in m); None = auto
    open_value: float | None = 0.0
    # raw signal value of the fully closed gripper (e.g. 0.0 for a Franka finger width in m); None = auto
    closed_value: float | None = 1.0
    # normalised closed level at/above which the fingers met nothing: an empty grasp (used by the filters)
    empty_grasp_level: float = 0.97
    # "fixed": the thresholds above on open_value..closed_value; "auto": each episode's levels learned from the
    # signal (segment_levels; open_value/closed_value then give the polarity, None = learned from the signal)
    levels: str = "fixed"
    # auto levels: a closing or opening counts when it covers this fraction of the episode's learned range
    prominence: float = 0.25

    def __post_init__(self) -> None:
        if self.levels not in ("fixed", "auto"):
            raise ValueError(f"SegmentConfig.levels must be 'fixed' or 'auto', got {self.levels!r}")
        if self.levels == "auto" and self.open_value is None and self.closed_value is None:
            raise ValueError("auto levels need the polarity: give open_value or closed_value (a raw value)")
        if self.levels == "fixed" and (self.open_value is None or self.closed_value is None):
            raise ValueError("fixed levels need both open_value and closed_value (raw values); use levels 'auto'")
        if not 0.05 <= float(self.prominence) <= 0.9:
            raise ValueError(f"SegmentConfig.prominence must be in [0.05, 0.9], got {self.prominence}")
        for name in ("close_threshold", "open_threshold", "open_value", "closed_value", "empty_grasp_level"):
            if getattr(self, name) is None and name in ("open_value", "closed_value"):
                continue
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"SegmentConfig.{name} must be finite, got {getattr(self, name)!r}")
        if not 0.0 < self.close_threshold <= 1.0:
            raise ValueError(f"close_threshold must be in (0, 1], got {self.close_threshold}")
        if not 0.0 <= self.open_threshold < self.close_threshold:
            raise ValueError(
                f"open_threshold must be in [0, close_threshold={self.close_threshold}), got {self.open_threshold}")
        if int(self.min_frames) != self.min_frames or self.min_frames < 1:
            raise ValueError(f"min_frames must be an integer >= 1, got {self.min_frames!r}")
        self.min_frames = int(self.min_frames)
        if self.open_value == self.closed_value:
            raise ValueError(f"open_value and closed_value must differ, both are {self.open_value}")


# Settings per robot (the `--robot` option and `segment.robot` in the V2GP config).
ROBOT_PROFILES: dict[str, dict[str, float]] = {
    "default": {},
    # DROID's Robotiq 2F-85 `gripper_position`: 0 open, 1 closed; thick objects stop it near 0.4
    "droid": {"close_threshold": 0.3, "open_threshold": 0.1, "min_frames": 4},
    # Franka Hand finger width in metres: 0.08 open, 0 closed
    "franka_width": {"open_value": 0.08, "closed_value": 0.0, "close_threshold": 0.4, "open_threshold": 0.15},
    # Franka Hand finger joint (sensor_msgs/JointState of rollouts): 0.04 m per finger open, 0 closed
    "franka_finger": {"open_value": 0.04, "closed_value": 0.0, "close_threshold": 0.4, "open_threshold": 0.15},
    # SO-100/SO-101 gripper joint in LeRobot's 0..100 range, 100 fully open; real teleoperation rests closed on
    # nothing, opens part way and holds at an intermediate level: levels learned per episode
    "so101": {"open_value": 100.0, "closed_value": 0.0, "close_threshold": 0.4, "open_threshold": 0.15,
              "levels": "auto", "prominence": 0.15},
}
# LeRobot ``robot_type`` (meta/info.json) -> profile, for datasets segmented without --robot
ROBOT_TYPES = {"so100": "so101", "so101": "so101", "so100_follower": "so101", "so101_follower": "so101",
               "so_follower": "so101", "koch": "so101", "koch_follower": "so101"}


def config_for_robot(robot: str, **overrides) -> SegmentConfig:
    """The :class:`SegmentConfig` of a named robot profile, with keyword overrides (None values ignored)."""
    if robot not in ROBOT_PROFILES:
        raise ValueError(f"unknown robot profile {robot!r} (expected one of {', '.join(sorted(ROBOT_PROFILES))})")
    values = dict(ROBOT_PROFILES[robot])
    # "auto" for open_value/closed_value: learned from the signal (None in SegmentConfig)
    values.update({k: (None if v == "auto" and k.endswith("_value") else v) for k, v in overrides.items()
                   if v is not None})
    if overrides.get("close_threshold") is not None or overrides.get("open_threshold") is not None:
        values["levels"] = "fixed"  # thresholds given by hand: the user asked for the fixed rule
    return SegmentConfig(**values)


@dataclass
class Segment:
    """One close-open cycle, in the signal's frame numbers (both ends inclusive)."""

    start: int  # frame where the gripper starts closing
    end: int  # frame where the gripper is fully open again
    close_frame: int  # first frame at/above close_threshold
    release_frame: int  # first frame at/below open_threshold after the grasp
    closed_level: float  # median normalised level while closed (about 1 for an empty grasp)
    truncated_start: bool = False  # already closed at the first frame: the real start is earlier
    dropped_mid_grasp: bool = False  # the fingers closed fully during the hold: the object slipped out

    def to_list(self) -> list[int]:
        return [int(self.start), int(self.end)]


@dataclass
class SegmentResult:
    """Segments plus what was left out and why (nothing is silently dropped)."""

    segments: list[Segment] = field(default_factory=list)
    # (close_frame, reason) of closed spells that are not segments: "not_reopened", "too_short"
    dropped: list[tuple[int, str]] = field(default_factory=list)
    open_level: float = 0.0
    noise_sigma: float = 0.0

    def to_dict(self) -> dict:
        return {"segments": [s.to_list() for s in self.segments]}


#: what a cached stage-1 result depends on besides the config (bumped when the rule changes)
SEGMENT_RULE = "levels-and-command/1"


def segment(values: Sequence[float], frames: Sequence[int] | None = None,
            config: SegmentConfig | None = None, commanded: Sequence[float] | None = None) -> "SegmentResult":
    """Segments by the config's rule: :func:`segment_levels` for ``levels: auto`` (which also reads the
    ``commanded`` gripper when there is one), else :func:`segment_signal`."""
    config = config or SegmentConfig()
    if config.levels == "auto":
        return segment_levels(values, frames, config, commanded)
    return segment_signal(values, frames, config)


def normalise(raw: np.ndarray, config: SegmentConfig) -> np.ndarray:
    """Map raw gripper readings to 0 = open, 1 = closed (NaN stays NaN)."""
    return (np.asarray(raw, dtype=float) - config.open_value) / (config.closed_value - config.open_value)


def _dense_signal(values: Sequence[float], frames: Sequence[int] | None) -> tuple[np.ndarray | None, int]:
    """Raw samples on a dense grid over the frame range (skipped frame numbers and NaN = missing), first frame.

    Returns (None, 0) for a signal with no finite sample; SignalError for frame numbers that do not increase.
    """
    raw = np.asarray(values, dtype=float).reshape(-1)
    if frames is None:
        frames_arr = np.arange(raw.size)
    else:
        frames_arr = np.asarray(frames).reshape(-1)
        if frames_arr.size != raw.size:
            raise SignalError(f"{frames_arr.size} frame numbers for {raw.size} gripper values")
        if frames_arr.size and np.any(np.diff(frames_arr) <= 0):
            bad = int(np.flatnonzero(np.diff(frames_arr) <= 0)[0]) + 1
            raise SignalError(f"frame numbers must be strictly increasing; row {bad} has frame {frames_arr[bad]} "
                              f"after {frames_arr[bad - 1]}")
    if raw.size == 0 or not np.isfinite(raw).any():
        return None, 0
    first_frame = int(frames_arr[0])
    dense = np.full(int(frames_arr[-1]) - first_frame + 1, np.nan)
    dense[frames_arr.astype(np.int64) - first_frame] = raw
    return dense, first_frame


def _fill_missing(values: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaN samples, edges held (for detection only)."""
    good = np.isfinite(values)
    if good.all():
        return values
    idx = np.arange(values.size)
    return np.interp(idx, idx[good], values[good])


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) index ranges where ``mask`` is True."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    diff = np.diff(padded)
    return list(zip(np.flatnonzero(diff == 1).tolist(), np.flatnonzero(diff == -1).tolist()))


def _hysteresis(values: np.ndarray, close_threshold: float, open_threshold: float) -> np.ndarray:
    closed = np.zeros(values.size, dtype=bool)
    state = False
    for i, v in enumerate(values):
        if not state and v >= close_threshold:
            state = True
        elif state and v <= open_threshold:
            state = False
        closed[i] = state
    return closed


def _flat_level(values: np.ndarray, tol: float) -> float:
    """Level of the flat part of ``values``: starting at the median, twice the median of the values within
    ``tol`` of it, so the ramp samples of a slow gripper do not drag the level toward the other state."""
    level = float(np.median(values))
    for _ in range(2):
        near = values[np.abs(values - level) <= max(tol, 1e-3)]
        if not near.size:
            break
        level = float(np.median(near))
    return level


def _ramp_sse(t: np.ndarray, vals: np.ndarray, level: float, closed: float, knees: np.ndarray,
              lengths: np.ndarray, rising: bool) -> tuple[np.ndarray, np.ndarray]:
    """Squared error of the ramp model per knee (best length) and that best length; shapes (K,), (K,)."""
    k = knees[:, None, None]
    length = lengths[None, :, None]
    if rising:
        frac = np.clip((t[None, None, :] - k) / length, 0.0, 1.0)
    else:
        frac = np.clip((k - t[None, None, :]) / length, 0.0, 1.0)
    sse = (((level + (closed - level) * frac) - vals[None, None, :]) ** 2).sum(axis=2)
    best = sse.argmin(axis=1)
    return sse[np.arange(knees.size), best], lengths[best]


def _ramp_knee(t: np.ndarray, vals: np.ndarray, level: float, closed: float, knee_lo: float, knee_hi: float,
               rising: bool, sigma: float) -> int | None:
    """Least-squares fit of a linear ramp between the open ``level`` and the ``closed`` level.

    The model is ``level`` up to the knee ``k``, a straight ramp of length ``L`` frames, then ``closed``
    (mirrored when not ``rising``: ``closed`` until ``k - L``, ramp, ``level`` from ``k``). Every sample of
    the window counts, the flat ones included, which makes the knee far less noise-sensitive than a
    threshold crossing. Searched coarse to fine (60 x 60 grid, then 0.05 frame around the best).

    The knees whose squared error is insignificantly above the best form the tied range [lo, hi]; the
    answer is the frame nearest its centre, kept inside the range's integer frames when it has any: a step
    between two samples ties every knee between them, giving the last open frame before a rise and the
    first open frame after a fall, also when the frames in between were not measured.

    Parameters
    ----------
    t, vals : ndarray, shape (M,)
        Frame indices and normalised values of the measured samples in the window.
    knee_lo, knee_hi : float
        Range of candidate knee instants (fractional frame indices).
    sigma : float
        Noise standard deviation; knees whose squared error is within a quarter of its square of the
        best count as tied.

    Returns
    -------
    int or None
        The knee frame: where the rise leaves (or the fall reaches) the open level; None for an empty range.
    """
    if knee_hi < knee_lo or t.size == 0:
        return None
    span = float(t.max() - t.min()) + 1.0
    fine = 0.05
    n_knees = int((knee_hi - knee_lo) / fine) + 1
    coarse_knees = np.linspace(knee_lo, knee_hi, min(60, n_knees))
    coarse_lengths = np.linspace(fine, span, 60)
    sse, best_len = _ramp_sse(t, vals, level, closed, coarse_knees, coarse_lengths, rising)
    i = int(sse.argmin())
    dk = coarse_knees[1] - coarse_knees[0] if coarse_knees.size > 1 else fine
    dl = coarse_lengths[1] - coarse_lengths[0]
    if n_knees <= 120:
        knees = np.linspace(knee_lo, knee_hi, n_knees)
    else:
        knees = np.arange(max(knee_lo, coarse_knees[i] - 3 * dk), min(knee_hi, coarse_knees[i] + 3 * dk) + 1e-9, fine)
    lengths = np.unique(np.concatenate([coarse_lengths, np.linspace(max(fine, best_len[i] - 2 * dl),
                                                                    best_len[i] + 2 * dl, 41)]))
    sse, _ = _ramp_sse(t, vals, level, closed, knees, lengths, rising)
    tied = knees[sse <= sse.min() + 0.25 * max(sigma, 0.01) ** 2]
    lo, hi = float(tied.min()), float(tied.max())
    frame = math.floor((lo + hi) / 2 + 0.5) if rising else math.ceil((lo + hi) / 2 - 0.5)
    if math.ceil(lo - 1e-6) <= math.floor(hi + 1e-6):
        frame = min(max(frame, math.ceil(lo - 1e-6)), math.floor(hi + 1e-6))
    return int(frame)


def segment_signal(values: Sequence[float], frames: Sequence[int] | None = None,
                   config: SegmentConfig | None = None) -> SegmentResult:
    """Find close-open cycles in a gripper signal.

    Parameters
    ----------
    values : sequence of float, shape (N,)
        Raw gripper readings (NaN = missing sample), mapped to 0 = open / 1 = closed with the config.
    frames : sequence of int, shape (N,), optional
        Strictly increasing frame numbers of the samples (gaps are missing samples). Default 0..N-1.
    config : SegmentConfig, optional

    Returns
    -------
    SegmentResult
        Segments with ``start``/``end`` in the given frame numbers (see the module docstring).
    """
    config = config or SegmentConfig()
    if config.open_value is None or config.closed_value is None:
        raise SignalError("fixed-threshold segmentation needs raw open_value and closed_value (or use levels: auto)")
    dense_raw, first_frame = _dense_signal(values, frames)
    if dense_raw is None:
        return SegmentResult()
    dense = normalise(dense_raw, config)
    sig = _fill_missing(dense)
    n = sig.size

    closed = _hysteresis(sig, config.close_threshold, config.open_threshold)
    # bridge short open spells inside a grasp (dropouts), then forget short closed spells (glitches)
    # spells are measured in measured samples: a missing sample is no evidence of opening or closing
    valid = np.isfinite(dense)
    for a, b in _runs(~closed):
        if a > 0 and b < n and int(valid[a:b].sum()) < config.min_frames:
            closed[a:b] = True
    result = SegmentResult()
    spells = []
    for a, b in _runs(closed):
        if int(valid[a:b].sum()) < config.min_frames and b < n:
            result.dropped.append((a + first_frame, "too_short"))
            closed[a:b] = False
        else:
            spells.append((a, b))

    open_mask = ~closed & valid & (sig <= config.open_threshold)
    both_open = (~closed[1:]) & (~closed[:-1]) & valid[1:] & valid[:-1]
    diffs = np.diff(sig)[both_open]
    sigma = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2) if diffs.size else 0.0
    result.noise_sigma = sigma
    level = _flat_level(sig[open_mask], 4.0 * sigma) if open_mask.any() else 0.0
    # noise band of the open gripper: 4 sigma (at least 2 % of the range: sigma from a few samples is unsure),
    # kept below the close threshold so a grasp always leaves it
    tol = min(max(4.0 * sigma, 0.02), 0.5 * max(config.close_threshold - level, 1e-3))
    result.open_level = level = _flat_level(sig[open_mask], tol) if open_mask.any() else 0.0
    floor = level + tol
    above = sig > floor

    prev_end = 0
    for k, (a, b) in enumerate(spells):
        if b >= n:
            result.dropped.append((a + first_frame, "not_reopened"))
            continue
        held = sig[a:b][valid[a:b]] if valid[a:b].any() else sig[a:b]
        closed_level = _flat_level(held, tol)
        plateau = closed_level - max(tol, 0.05 * closed_level)
        next_start = spells[k + 1][0] if k + 1 < len(spells) else n

        # -- start: walk back from the crossing to the last measured frame inside the open band
        t_open = a - 1
        while t_open >= prev_end and not (valid[t_open] and not above[t_open]):
            t_open -= 1
        truncated = t_open < 0
        t0 = t_open + 1  # first frame above the band
        top = a
        while top < b - 1 and sig[top] < plateau:
            top += 1  # first frame of the closed plateau
        if truncated:
            start = 0
        else:
            rise = top - t0 + 1
            lo = max(prev_end, t0 - 2 * rise - 2)
            window = np.arange(lo, min(b, top + rise + 2))
            # measured samples; on the plateau side only those at the plateau (a dropout there is no ramp)
            window = window[valid[window] & ((window <= top) | (sig[window] >= plateau))]
            t_meas = t0
            while t_meas < a and not valid[t_meas]:
                t_meas += 1  # first measured frame above the band: the rise left the open level before it
            knee = _ramp_knee(window, sig[window], level, closed_level, lo, t_meas - 0.05, rising=True, sigma=sigma)
            start = t0 if knee is None else int(min(t_meas - 1, max(lo, knee)))

        # -- end: first measured frame back inside the open band after release, refined on the falling edge
        e0 = b
        while e0 < next_start - 1 and not (valid[e0] and not above[e0]):
            e0 += 1
        e_last_above = e0 - 1
        while e_last_above > a and not (valid[e_last_above] and above[e_last_above]):
            e_last_above -= 1
        last_top = b - 1
        while last_top > a and sig[last_top] < plateau:
            last_top -= 1  # last frame of the closed plateau
        fall = e0 - last_top
        hi = min(next_start - 1, n - 1, e0 + 2 * fall + 2)
        window = np.arange(max(a, last_top - fall - 2), hi + 1)
        window = window[valid[window] & ((window >= last_top) | (sig[window] >= plateau))]
        knee = _ramp_knee(window, sig[window], level, closed_level, e_last_above + 0.05, hi, rising=False,
                          sigma=sigma)
        end = e0 if knee is None else int(max(e_last_above + 1, min(hi, knee)))

        empty = sig[a:b] >= config.empty_grasp_level
        dropped_mid = bool(closed_level < config.empty_grasp_level and empty[len(empty) // 2:].any()
                           and not empty[: max(1, len(empty) // 4)].any())
        result.segments.append(Segment(
            start=start + first_frame, end=end + first_frame, close_frame=a + first_frame,
            release_frame=b + first_frame, closed_level=closed_level, truncated_start=truncated,
            dropped_mid_grasp=dropped_mid))
        prev_end = end
    return result


# Auto levels: the smallest range (fraction of |closed_value - open_value|, or 8 noise sigmas) that counts as a
# gripper that moved at all; below it an episode has no grasp (a still gripper's noise is no cycle).
_MIN_RANGE_FRACTION = 0.05
# half-width of the median filter the turning points are found on, frames (a 1-2 frame spike is no turn)
_SMOOTH_HALF = 2


def _closedness_auto(raw: np.ndarray, config: SegmentConfig) -> tuple[np.ndarray, float]:
    """Raw samples -> closedness (larger = more closed, in raw units) and the raw scale of a full stroke.

    The polarity comes from the config's raw open/closed values; an ``auto`` (None) one is the side of the
    signal away from the other.
    """
    lo, hi = float(np.nanmin(raw)), float(np.nanmax(raw))
    if config.open_value is not None and config.closed_value is not None:
        sign = 1.0 if config.closed_value > config.open_value else -1.0
        scale = abs(config.closed_value - config.open_value)
    elif config.open_value is not None:  # closed = the extreme farthest from the open value
        sign = 1.0 if abs(hi - config.open_value) >= abs(lo - config.open_value) else -1.0
        scale = max(abs(hi - config.open_value), abs(lo - config.open_value))
    else:
        sign = -1.0 if abs(hi - config.closed_value) >= abs(lo - config.closed_value) else 1.0
        scale = max(abs(hi - config.closed_value), abs(lo - config.closed_value))
    return sign * raw, max(scale, 1e-12)


def _median_smooth(values: np.ndarray, half: int) -> np.ndarray:
    padded = np.pad(values, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    return np.median(windows, axis=1)


def _zigzag(values: np.ndarray, delta: float) -> list[tuple[int, str]]:
    """Turning points ``(index, "open"|"closed")`` of closedness ``values`` (a zig-zag indicator).

    Alternating extremes, each at least ``delta`` away from the one before; the extreme of the last leg ends
    the list. An extreme is the first sample of its plateau.
    """
    points: list[tuple[int, str]] = []
    direction = 0  # 0: no move of delta yet; +1: closing; -1: opening
    lo_i = hi_i = ext_i = 0
    for i in range(1, values.size):
        v = values[i]
        if direction == 0:
            hi_i = i if v > values[hi_i] else hi_i
            lo_i = i if v < values[lo_i] else lo_i
            if values[hi_i] - values[lo_i] >= delta:
                first, kind, direction, ext_i = (lo_i, "open", 1, hi_i) if hi_i > lo_i else (hi_i, "closed", -1, lo_i)
                points.append((first, kind))
        elif direction == 1:
            if v > values[ext_i]:
                ext_i = i
            elif values[ext_i] - v >= delta:
                points.append((ext_i, "closed"))
                direction, ext_i = -1, i
        else:
            if v < values[ext_i]:
                ext_i = i
            elif v - values[ext_i] >= delta:
                points.append((ext_i, "open"))
                direction, ext_i = 1, i
    if direction:
        points.append((ext_i, "closed" if direction == 1 else "open"))
    return points


def segment_levels(values: Sequence[float], frames: Sequence[int] | None = None,
                   config: SegmentConfig | None = None, commanded: Sequence[float] | None = None) -> SegmentResult:
    """Grasp segments from each episode's own gripper levels (see "Learned levels" in the module docstring).

    Parameters
    ----------
    values : sequence of float, shape (N,)
        Raw gripper readings (NaN = missing sample).
    frames : sequence of int, shape (N,), optional
        Strictly increasing frame numbers of the samples. Default 0..N-1.
    config : SegmentConfig, optional
        ``open_value`` / ``closed_value`` give the polarity (either may be None), ``prominence`` the size of a
        move that counts, ``min_frames`` the shortest closed spell.
    commanded : sequence of float, shape (N,), optional
        The commanded gripper in the same raw units (a teleoperation dataset's ``action``: the leader's
        gripper). A closed spell the fingers hold short of the command, by more than they do at rest, is a grasp
        even when its level is near the rest level (a thin object).

    Returns
    -------
    SegmentResult
        Grasp segments; closures on nothing (``empty_closure``), a spell still closed at the end
        (``not_reopened``) and spells shorter than ``min_frames`` (``too_short``) in ``dropped``.
    """
    config = config or SegmentConfig(levels="auto")
    dense_raw, first_frame = _dense_signal(values, frames)
    result = SegmentResult()
    if dense_raw is None:
        return result
    closedness, scale = _closedness_auto(_fill_missing(dense_raw), config)
    smooth = _median_smooth(closedness, _SMOOTH_HALF) if closedness.size > 2 * _SMOOTH_HALF else closedness
    diffs = np.diff(closedness)
    sigma = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2) if diffs.size else 0.0
    span = float(smooth.max() - smooth.min())
    result.noise_sigma = sigma / scale
    if span < max(_MIN_RANGE_FRACTION * scale, 8.0 * sigma):
        return result  # the gripper never moved: no cycle
    tol = max(4.0 * sigma, 0.03 * span)  # the band a sample may wander and still be "at" a level
    # how near the rest level a closure on nothing ends up: levels are medians of many samples, far surer than one
    # sample, so a few sigma suffice; 10 % of the range covers a rest that differs a little between spells
    margin = max(0.1 * span, 3.0 * sigma)
    points = _zigzag(smooth, config.prominence * span)

    def level_near(i: int, a: int, b: int) -> float:
        """Flat level of closedness[a:b] near sample i (1-D cluster of the samples within tol of it)."""
        window = closedness[a:b]
        return _flat_level(window[np.abs(window - smooth[i]) <= 2 * tol], tol) if window.size else float(smooth[i])

    # each turning point's flat level, from the samples between its neighbouring turning points
    levels: dict[int, float] = {}
    for k, (i, _) in enumerate(points):
        lo = points[k - 1][0] if k > 0 else 0
        hi = points[k + 1][0] + 1 if k + 1 < len(points) else closedness.size
        levels[i] = level_near(i, lo, hi)
    # closed spells: (pivot, index of the opening before or None, index of the opening after or None, level)
    spells = []
    for k, (i, kind) in enumerate(points):
        if kind == "closed":
            before = points[k - 1][0] if k > 0 else None
            after = points[k + 1][0] if k + 1 < len(points) else None
            spells.append((i, before, after, levels[i]))
    result.open_level = float(min((levels[i] for i, kind in points if kind == "open"),
                                  default=float(smooth.min())) / scale)
    top = float(smooth.max())

    def closed_level(level: float) -> float:
        """A closedness level on the module's 0 = open .. 1 = closed scale (raw values when both are known)."""
        if config.open_value is not None and config.closed_value is not None:
            sign = 1.0 if config.closed_value > config.open_value else -1.0
            return float(normalise(np.array([sign * level]), config)[0])
        return (level - result.open_level * scale) / max(top - result.open_level * scale, 1e-12)

    rest_levels = [level for _, before, after, level in spells if before is None or after is None]
    rest = max(rest_levels) if rest_levels else None
    dense_cmd = None
    if commanded is not None:
        if len(commanded) != len(values):
            raise SignalError(f"{len(commanded)} commanded gripper values for {len(values)} gripper values")
        dense_cmd, _ = _dense_signal(commanded, frames)
    blocked = _blocked_by_an_object(dense_cmd, config, closedness, smooth, spells, tol, span, sigma)

    for pivot, before, after, level in spells:
        frame = pivot + first_frame
        if before is None:
            continue  # closed from the first frame: the arm at rest, or a grasp whose start was not recorded
        if after is None:
            if rest is None or level < rest - margin:
                result.dropped.append((frame, "not_reopened"))
            continue
        if rest is not None and level >= rest - margin and not blocked.get(pivot, False):
            result.dropped.append((frame, "empty_closure"))
            continue
        open_before, open_after = levels[before], levels[after]
        start = pivot
        while start > before and smooth[start] > open_before + tol:  # the median-smoothed signal: a noise spike is no edge
            start -= 1
        end = pivot
        while end < after and smooth[end] > open_after + tol:
            end += 1
        mid_close = open_before + 0.5 * (level - open_before)
        close_frame = start + int(np.argmax(closedness[start:pivot + 1] >= mid_close))
        held = np.flatnonzero(np.abs(closedness[close_frame:end + 1] - level) <= max(tol, 0.25 * (level - open_after)))
        last_held = close_frame + int(held[-1]) if held.size else pivot
        release_frame = last_held + int(np.argmax(closedness[last_held:end + 1] <= open_after + 0.5 * (level - open_after)))
        if int(np.isfinite(dense_raw[close_frame:release_frame]).sum()) < config.min_frames:
            result.dropped.append((frame, "too_short"))
            continue
        result.segments.append(Segment(
            start=start + first_frame, end=end + first_frame, close_frame=close_frame + first_frame,
            release_frame=release_frame + first_frame,
            closed_level=closed_level(level)))
    return result


def _blocked_by_an_object(commanded: np.ndarray | None, config: SegmentConfig, closedness: np.ndarray,
                          smooth: np.ndarray, spells: list, tol: float, span: float, sigma: float) -> dict[int, bool]:
    """Per closed spell (by pivot): did something stop the fingers short of the command?

    On an empty closure, and at rest, the follower's gripper reaches what the leader commands (give or take a
    calibration offset, the same at rest as anywhere); on an object it stays short of it by the object's
    thickness. A spell counts as blocked when its median shortfall exceeds the rest spells' (or, with none, the
    episode's median shortfall) by ``max(4 % of the range, 4 noise sigma)``. Empty without a command.
    ``commanded`` is on the same dense grid as ``closedness`` (:func:`_dense_signal` of the same frames).
    """
    if commanded is None:
        return {}
    cmd_closedness, _ = _closedness_auto(_fill_missing(commanded), config)
    shortfall = cmd_closedness - closedness  # > 0: commanded more closed than the fingers are

    def held(pivot: int, before: int | None, after: int | None, level: float) -> float:
        a = before if before is not None else 0
        b = after + 1 if after is not None else closedness.size
        near = np.flatnonzero(np.abs(smooth[a:b] - level) <= tol) + a
        return float(np.median(shortfall[near] if near.size else shortfall[pivot:pivot + 1]))

    shortfalls = {p: held(p, bf, af, lv) for p, bf, af, lv in spells}
    rest = [shortfalls[p] for p, bf, af, _ in spells if bf is None or af is None]
    baseline = max(rest) if rest else float(np.median(shortfall))
    needed = max(0.04 * span, 4.0 * sigma)
    return {p: value - baseline >= needed for p, value in shortfalls.items()}


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
        raise SignalError(f"{path}: frame numbers must be strictly increasing; row {bad + 2} has frame "
                          f"{frames_arr[bad]} after {frames_arr[bad - 1]}")
    return frames_arr, np.asarray(values, dtype=float)
