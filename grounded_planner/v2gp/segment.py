"""V2GP stage 1, the rule: close-open gripper cycles (manipulation segments) of one gripper signal.

The paper's rule (V2GP stage 1): a segment runs from the frame where the gripper begins to close to the frame
where it is fully open again. The full specification (fixed thresholds, learned levels, what counts as a grasp,
empty closures, the commanded gripper) is in ``docs/v2gp.md``; the numerical tools live in
:mod:`grounded_planner.v2gp.levels`, the robot profiles in :mod:`grounded_planner.v2gp.profiles` and the
readers that find a dataset's gripper signal in :mod:`grounded_planner.v2gp.grippers`.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.v2gp.levels import (
    SignalError,
    dense_signal,
    edge_end,
    fill_missing,
    flat_level,
    hysteresis,
    median_smooth,
    noise_sigma,
    ramp_knee,
    runs,
    zigzag,
)

# the last three moved (profiles, grippers) and are served by __getattr__ below
__all__ = [
    "SEGMENT_RULE",
    "Segment",
    "SegmentConfig",
    "SegmentResult",
    "SignalError",
    "normalise",
    "segment",  # noqa: F822
    "segment_levels",
    "segment_signal",
    "DROP_REASONS",
    "config_for_robot",  # noqa: F822 - served by __getattr__ below
    "load_gripper_csv",  # noqa: F822
    "ROBOT_PROFILES",  # noqa: F822
]

# kept importable from here (docs/python_api.md): they live in the profiles and readers modules, which import this one
_MOVED = {"config_for_robot": "profiles", "ROBOT_PROFILES": "profiles", "load_gripper_csv": "grippers"}


def __getattr__(name: str):
    if name in _MOVED:
        return getattr(importlib.import_module(f"grounded_planner.v2gp.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class SegmentConfig:
    """Per-robot segmentation settings (``docs/v2gp.md``, "Stage 1")."""

    # normalised level at/above which the gripper counts as closed (0 = open, 1 = closed); levels "fixed" only
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
    # signal (segment_levels; open_value/closed_value then give the polarity and the stroke, None = learned)
    levels: str = "fixed"
    # auto levels: a closing or opening counts when it covers this fraction of the episode's learned range
    prominence: float = 0.25

    def __post_init__(self) -> None:
        if self.levels not in ("fixed", "auto"):
            raise InputError(f"SegmentConfig.levels must be 'fixed' or 'auto', got {self.levels!r}")
        if self.levels == "auto" and self.open_value is None and self.closed_value is None:
            raise InputError("auto levels need the polarity: give open_value or closed_value (a raw value)")
        if self.levels == "fixed" and (self.open_value is None or self.closed_value is None):
            raise InputError("fixed levels need both open_value and closed_value (raw values); use levels 'auto'")
        if not 0.05 <= float(self.prominence) <= 0.9:
            raise InputError(f"SegmentConfig.prominence must be in [0.05, 0.9], got {self.prominence}")
        for name in ("close_threshold", "open_threshold", "open_value", "closed_value", "empty_grasp_level"):
            if getattr(self, name) is None and name in ("open_value", "closed_value"):
                continue
            if not math.isfinite(float(getattr(self, name))):
                raise InputError(f"SegmentConfig.{name} must be finite, got {getattr(self, name)!r}")
        if not 0.0 < self.close_threshold <= 1.0:
            raise InputError(f"close_threshold must be in (0, 1], got {self.close_threshold}")
        if not 0.0 <= self.open_threshold < self.close_threshold:
            raise InputError(
                f"open_threshold must be in [0, close_threshold={self.close_threshold}), got {self.open_threshold}"
            )
        if int(self.min_frames) != self.min_frames or self.min_frames < 1:
            raise InputError(f"min_frames must be an integer >= 1, got {self.min_frames!r}")
        self.min_frames = int(self.min_frames)
        if self.open_value == self.closed_value:
            raise InputError(f"open_value and closed_value must differ, both are {self.open_value}")


@dataclass
class Segment:
    """One close-open cycle, in the signal's frame numbers (both ends inclusive)."""

    start: int  # frame where the gripper starts closing
    end: int  # frame where the gripper is fully open again
    close_frame: int  # first frame at/above close_threshold (auto levels: half way into the closing)
    release_frame: int  # first frame at/below open_threshold after the grasp (auto: half way into the opening)
    closed_level: float  # median normalised level while closed (about 1 for an empty grasp)
    truncated_start: bool = False  # already closed at the first frame: the real start is earlier
    dropped_mid_grasp: bool = False  # the fingers closed fully during the hold: the object slipped out
    hand: str = ""  # which gripper of a multi-gripper robot ("left", "right", ...); "" for a single one

    def to_list(self) -> list[int]:
        return [int(self.start), int(self.end)]


#: why a closed spell (or a whole signal) gave no segment, in words (``SegmentResult.dropped`` reasons)
DROP_REASONS = {
    "not_reopened": "closes at frame {frame} and is not open again by the last frame",
    "closed_at_end": "closes at frame {frame} and stays closed to the last frame (a closed rest, or a grasp not "
    "released in the recording)",
    "empty_closure": "closes at frame {frame} on nothing (to its rest or fully closed level, not stopped by an object)",
    "too_short": "closes at frame {frame} for fewer than min_frames measured frames",
    "shallow": "closes only a little at frame {frame} (less than 40 % of its deepest closing) and opens again "
    "without holding",
    "closed_at_start": "is already closed at the first frame and opens at frame {frame} (a rest, or a grasp whose "
    "start was not recorded)",
    "no_motion": "does not move (range {detail})",
    "no_signal": "has no finite sample",
    "no_cycle": "moves (range {detail}) but never closes after being open and opens again",
}


@dataclass
class SegmentResult:
    """Segments plus what was left out and why (nothing is silently dropped)."""

    segments: list[Segment] = field(default_factory=list)
    # (frame, reason) of closed spells that are not segments (keys of DROP_REASONS)
    dropped: list[tuple[int, str]] = field(default_factory=list)
    open_level: float = 0.0
    noise_sigma: float = 0.0
    # details per reason (e.g. the range of a signal that does not move), for the explanation
    details: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"segments": [s.to_list() for s in self.segments]}

    def explain(self) -> str:
        """Why this signal has no (more) segments, in one line ("" when nothing was left out)."""
        parts = []
        for frame, reason in self.dropped:
            text = DROP_REASONS.get(reason, reason + " at frame {frame}")
            parts.append(text.format(frame=frame, detail=self.details.get(reason, "")))
        return "; ".join(dict.fromkeys(parts))


#: what a cached stage-1 result depends on besides the config (bumped when the rule changes)
SEGMENT_RULE = "paper-rule/3"


def segment(
    values: Sequence[float],
    frames: Sequence[int] | None = None,
    config: SegmentConfig | None = None,
    commanded: Sequence[float] | None = None,
) -> "SegmentResult":
    """Segments by the config's rule: :func:`segment_levels` for ``levels: auto`` (which also reads the
    ``commanded`` gripper when there is one), else :func:`segment_signal`."""
    config = config or SegmentConfig()
    if config.levels == "auto":
        return segment_levels(values, frames, config, commanded)
    return segment_signal(values, frames, config)


def normalise(raw: np.ndarray, config: SegmentConfig) -> np.ndarray:
    """Map raw gripper readings to 0 = open, 1 = closed (NaN stays NaN)."""
    return (np.asarray(raw, dtype=float) - config.open_value) / (config.closed_value - config.open_value)


def segment_signal(
    values: Sequence[float], frames: Sequence[int] | None = None, config: SegmentConfig | None = None
) -> SegmentResult:
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
    dense_raw, first_frame = dense_signal(values, frames)
    if dense_raw is None:
        return SegmentResult()
    dense = normalise(dense_raw, config)
    sig = fill_missing(dense)
    n = sig.size

    closed = hysteresis(sig, config.close_threshold, config.open_threshold)
    # bridge short open spells inside a grasp (dropouts), then forget short closed spells (glitches)
    # spells are measured in measured samples: a missing sample is no evidence of opening or closing
    valid = np.isfinite(dense)
    for a, b in runs(~closed):
        if a > 0 and b < n and int(valid[a:b].sum()) < config.min_frames:
            closed[a:b] = True
    result = SegmentResult()
    spells = []
    for a, b in runs(closed):
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
    level = flat_level(sig[open_mask], 4.0 * sigma) if open_mask.any() else 0.0
    # noise band of the open gripper: 4 sigma (at least 2 % of the range: sigma from a few samples is unsure),
    # kept below the close threshold so a grasp always leaves it
    tol = min(max(4.0 * sigma, 0.02), 0.5 * max(config.close_threshold - level, 1e-3))
    result.open_level = level = flat_level(sig[open_mask], tol) if open_mask.any() else 0.0
    floor = level + tol
    above = sig > floor

    prev_end = 0
    for k, (a, b) in enumerate(spells):
        if b >= n:
            result.dropped.append((a + first_frame, "not_reopened"))
            continue
        held = sig[a:b][valid[a:b]] if valid[a:b].any() else sig[a:b]
        closed_level = flat_level(held, tol)
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
            knee = ramp_knee(window, sig[window], level, closed_level, lo, t_meas - 0.05, rising=True, sigma=sigma)
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
        knee = ramp_knee(window, sig[window], level, closed_level, e_last_above + 0.05, hi, rising=False, sigma=sigma)
        end = e0 if knee is None else int(max(e_last_above + 1, min(hi, knee)))

        empty = sig[a:b] >= config.empty_grasp_level
        dropped_mid = bool(
            closed_level < config.empty_grasp_level
            and empty[len(empty) // 2 :].any()
            and not empty[: max(1, len(empty) // 4)].any()
        )
        result.segments.append(
            Segment(
                start=start + first_frame,
                end=end + first_frame,
                close_frame=a + first_frame,
                release_frame=b + first_frame,
                closed_level=closed_level,
                truncated_start=truncated,
                dropped_mid_grasp=dropped_mid,
            )
        )
        prev_end = end
    return result


# Auto levels: the smallest range (fraction of the stroke |closed_value - open_value|, or 8 noise sigmas) that
# counts as a gripper that moved at all; below it an episode has no grasp (a still gripper's noise is no cycle).
_MIN_RANGE_FRACTION = 0.1
# half-width of the median filter the turning points are found on, frames (a 1-2 frame spike is no turn)
_SMOOTH_HALF = 2
# a closing that ends within this share of the stroke (or 3 noise sigmas) of the closed end met nothing
_FULLY_CLOSED_SHARE = 0.03
# a spell that starts or ends the episode closed is a rest *on nothing* only this near the closed end; a rest
# further open (a humanoid hand resting half open) says nothing about what a closure on nothing looks like
_REST_CLOSED_SHARE = 0.15
# an opening between two closings releases the object when it gives back at least this share of the closing;
# a smaller one (the fingers adjusting on the object) leaves both closings in one grasp: not fully open again
_RELEASE_SHARE = 0.5
# the walk to the start (end) goes past a pause that is still this share of the closing from the open level
_PAUSE_SHARE = 0.25
# frames a move may pause and still be one move (the look-ahead of the edge walk)
_SETTLE = 4
# the edge walk stops where the signal creeps by less than this share of the range within _SETTLE frames: the
# level is reached (a gripper easing into its end position is there, for the eye and for the paper's rule)
_EDGE_SHARE = 0.05
# ... and the level counts as reached within this share of the range (or 3 noise sigmas) of it
_NEAR_SHARE = 0.03
# a closing shallower than this share of the episode's deepest closing between two openings, and not held for
# _HELD_FRAMES, is a hesitation of the hand (it closes a little and opens again), not a grasp; a shallow closing
# that is held is one (a big object beside a small one)
_SHALLOW_SHARE = 0.4
_HELD_FRAMES = 15
# ... or one that moves the gripper by less than this share of its stroke, held or not (a hand settling at rest)
_SMALL_STROKE = 0.15
# a pause this long (frames) near the open level is the open level (drifted), not a pause of the closing
_LONG_PAUSE = 12


def _closedness_auto(raw: np.ndarray, config: SegmentConfig) -> tuple[np.ndarray, float, float | None]:
    """Raw samples -> closedness (larger = more closed, in raw units), the raw stroke and the closed end.

    The polarity comes from the config's raw open/closed values; an ``auto`` (None) one is the side of the
    signal away from the other. The closed end (in closedness units) is None when it is not known.
    """
    lo, hi = float(np.nanmin(raw)), float(np.nanmax(raw))
    if config.open_value is not None and config.closed_value is not None:
        sign = 1.0 if config.closed_value > config.open_value else -1.0
        scale = abs(config.closed_value - config.open_value)
        limit = sign * config.closed_value
    elif config.open_value is not None:  # closed = the extreme farthest from the open value
        sign = 1.0 if abs(hi - config.open_value) >= abs(lo - config.open_value) else -1.0
        scale = max(abs(hi - config.open_value), abs(lo - config.open_value))
        limit = None
    else:
        sign = -1.0 if abs(hi - config.closed_value) >= abs(lo - config.closed_value) else 1.0
        scale = max(abs(hi - config.closed_value), abs(lo - config.closed_value))
        limit = sign * config.closed_value
    return sign * raw, max(scale, 1e-12), limit


def _walk(
    smooth: np.ndarray, frm: int, stop: int, step: int, tol: float, open_level: float, depth: float, near: float
) -> int:
    """From a frame inside a closing (step -1) or an opening (step +1), the frame where the move meets the open
    level: the edge walk of :func:`levels.edge_end`, going on past brief pauses (an operator closing in steps)
    and stopping at a long one near the open level (an open level that drifted a little is not the closing)."""
    t = edge_end(smooth, frm, stop, step, tol, _SETTLE)
    while t != stop and smooth[t] > open_level + tol:
        nxt = next((i for i in range(t + step, stop + step, step) if smooth[i] < smooth[t] - tol), None)
        if nxt is None:
            break
        if smooth[t] <= open_level + _PAUSE_SHARE * depth and abs(nxt - t) >= _LONG_PAUSE:
            break
        t = edge_end(smooth, nxt, stop, step, tol, _SETTLE)
    # a flat stretch of _LONG_PAUSE frames near the open level, nearer the move than the level the walk reached,
    # is where the gripper was open last (an open level that drifted by less than the walk's tolerance)
    flat = near
    i = frm + step
    while (t - i) * step > 0 and 0 <= i + step * (_LONG_PAUSE - 1) < smooth.size:
        a, b = sorted((i, i + step * (_LONG_PAUSE - 1)))
        if smooth[i] <= open_level + _PAUSE_SHARE * depth and float(np.ptp(smooth[a : b + 1])) <= flat:
            t = i
            break
        i += step
    # the level is reached at the frame nearest the move that lies within `near` of it: the last open frame
    # before a closing, the first fully open frame after an opening
    level = smooth[t]
    while t - step != frm and 0 <= t - step < smooth.size and smooth[t - step] <= level + near:
        t -= step
    return t


def _closing_start(
    smooth: np.ndarray, before: int, pivot: int, open_level: float, depth: float, tol: float, near: float
) -> int:
    """The frame a closing from the open turning point ``before`` to the closed one ``pivot`` begins: walked back
    from half way into the closing to the last open frame (:func:`_walk`)."""
    mid = open_level + 0.5 * depth
    m = before + int(np.argmax(smooth[before : pivot + 1] >= mid))
    return _walk(smooth, m, before, -1, tol, open_level, depth, near)


def segment_levels(
    values: Sequence[float],
    frames: Sequence[int] | None = None,
    config: SegmentConfig | None = None,
    commanded: Sequence[float] | None = None,
) -> SegmentResult:
    """Grasp segments from each episode's own gripper levels (``docs/v2gp.md``, "Learned levels").

    Parameters
    ----------
    values : sequence of float, shape (N,)
        Raw gripper readings (NaN = missing sample), any units and polarity.
    frames : sequence of int, shape (N,), optional
        Strictly increasing frame numbers of the samples. Default 0..N-1.
    config : SegmentConfig, optional
        ``open_value`` / ``closed_value`` give the polarity and the stroke (either may be None),
        ``prominence`` the size of a move that counts, ``min_frames`` the shortest closed spell.
    commanded : sequence of float, shape (N,), optional
        The commanded gripper in the same raw units (a teleoperation dataset's ``action``: the leader's
        gripper). A closed spell the fingers hold short of the command, by more than they do at rest, is a grasp
        even when its level is near the rest level (a thin object).

    Returns
    -------
    SegmentResult
        Grasp segments; what is not one is in ``dropped`` with its reason (:data:`DROP_REASONS`).
    """
    config = config or SegmentConfig(levels="auto")
    dense_raw, first_frame = dense_signal(values, frames)
    result = SegmentResult()
    if dense_raw is None:
        result.dropped.append((int(frames[0]) if frames is not None and len(frames) else 0, "no_signal"))
        return result
    closedness, scale, limit = _closedness_auto(fill_missing(dense_raw), config)
    smooth = median_smooth(closedness, _SMOOTH_HALF) if closedness.size > 2 * _SMOOTH_HALF else closedness.copy()
    sigma = noise_sigma(closedness)
    span = float(smooth.max() - smooth.min())
    result.noise_sigma = sigma / scale
    if span < max(_MIN_RANGE_FRACTION * scale, 8.0 * sigma):
        raw_lo, raw_hi = float(np.nanmin(dense_raw)), float(np.nanmax(dense_raw))
        result.details["no_motion"] = (
            f"{raw_lo:.4g}..{raw_hi:.4g}, less than {max(_MIN_RANGE_FRACTION * scale, 8.0 * sigma):.3g}"
        )
        result.dropped.append((first_frame, "no_motion"))
        return result
    tol = max(4.0 * sigma, 0.03 * span)  # the band a sample may wander and still be "at" a level
    # how near the rest level a closure on nothing ends up: levels are medians of many samples, far surer than one
    # sample, so a few sigma suffice; 10 % of the range covers a rest that differs a little between spells
    margin = max(0.1 * span, 3.0 * sigma)
    edge_tol = max(3.0 * sigma, _EDGE_SHARE * span)
    near_tol = max(3.0 * sigma, _NEAR_SHARE * span)
    points = zigzag(smooth, config.prominence * span)

    def level_near(i: int, a: int, b: int) -> float:
        """Flat level of closedness[a:b] near sample i (1-D cluster of the samples within tol of it)."""
        window = closedness[a:b]
        return flat_level(window[np.abs(window - smooth[i]) <= 2 * tol], tol) if window.size else float(smooth[i])

    levels: dict[int, float] = {}
    for k, (i, _) in enumerate(points):
        lo = points[k - 1][0] if k > 0 else 0
        hi = points[k + 1][0] + 1 if k + 1 < len(points) else closedness.size
        levels[i] = level_near(i, lo, hi)
    # closed spells between openings; two closings whose opening in between gives back less than half of the
    # closing are one grasp (the gripper was never fully open again in between)
    spells: list[dict] = []
    for k, (i, kind) in enumerate(points):
        if kind != "closed":
            continue
        before = points[k - 1][0] if k > 0 else None
        after = points[k + 1][0] if k + 1 < len(points) else None
        prev = spells[-1] if spells else None
        if (
            prev is not None
            and before is not None
            and after is not None
            and prev["before"] is not None
            and prev["after"] == before
        ):
            depth = prev["level"] - levels[prev["before"]]
            if levels[before] > prev["level"] - _RELEASE_SHARE * depth:
                prev.update(after=after, last=i, level_last=levels[i], pivots=prev["pivots"] + [i])
                continue
        spells.append(
            {
                "pivot": i,
                "last": i,
                "before": before,
                "after": after,
                "level": levels[i],
                "level_last": levels[i],
                "pivots": [i],
            }
        )
    result.open_level = float(
        min((levels[i] for i, kind in points if kind == "open"), default=float(smooth.min())) / scale
    )
    top = float(smooth.max())

    def closed_level(level: float) -> float:
        """A closedness level on the module's 0 = open .. 1 = closed scale (raw values when both are known)."""
        if config.open_value is not None and config.closed_value is not None:
            sign = 1.0 if config.closed_value > config.open_value else -1.0
            return float(normalise(np.array([sign * level]), config)[0])
        return (level - result.open_level * scale) / max(top - result.open_level * scale, 1e-12)

    # the rest level says what a closure on nothing looks like only where the rest is closed (near the closed end)
    rest_levels = [
        s["level"] if s["before"] is None else s["level_last"]
        for s in spells
        if s["before"] is None or s["after"] is None
    ]
    rest = max(rest_levels) if rest_levels else None
    if rest is not None:
        if limit is not None:
            rest_closed = rest >= limit - _REST_CLOSED_SHARE * scale
        else:
            rest_closed = rest >= max(s["level"] for s in spells) - margin
        rest = rest if rest_closed else None
    fully_closed = None if limit is None else limit - max(_FULLY_CLOSED_SHARE * scale, 3.0 * sigma)
    dense_cmd = None
    if commanded is not None:
        if len(commanded) != len(values):
            raise SignalError(f"{len(commanded)} commanded gripper values for {len(values)} gripper values")
        dense_cmd, _ = dense_signal(commanded, frames)
    blocked = _blocked_by_an_object(
        dense_cmd,
        config,
        closedness,
        smooth,
        [(s["pivot"], s["before"], s["after"], s["level"]) for s in spells],
        tol,
        span,
        sigma,
    )

    deepest = max(
        (s["level"] - levels[s["before"]] for s in spells if s["before"] is not None and s["after"] is not None),
        default=0.0,
    )
    for s in spells:
        pivot, before, after, level = s["pivot"], s["before"], s["after"], s["level"]
        frame = pivot + first_frame
        if before is None:
            if after is not None and (rest is None or level < rest - margin):
                result.dropped.append((after + first_frame, "closed_at_start"))
            continue
        if after is None:
            # the frame the closing begins (the segment's start by the paper's rule), not its deepest point
            began = _closing_start(smooth, before, pivot, levels[before], level - levels[before], edge_tol, near_tol)
            if rest is None or s["level_last"] < rest - margin:
                result.dropped.append((began + first_frame, "not_reopened"))
            elif not result.segments:  # after a grasp, a closed rest; alone, the episode's only closing
                result.dropped.append((began + first_frame, "closed_at_end"))
            continue
        on_rest = rest is not None and level >= rest - margin
        on_nothing = fully_closed is not None and max(level, s["level_last"]) >= fully_closed
        if (on_rest or on_nothing) and not blocked.get(pivot, False):
            result.dropped.append((frame, "empty_closure"))
            continue
        open_before, open_after = levels[before], levels[after]
        depth_before, depth_after = level - open_before, s["level_last"] - open_after
        held = int(np.sum(np.abs(smooth[before : after + 1] - level) <= tol))
        if depth_before < _SHALLOW_SHARE * deepest and (held < _HELD_FRAMES or depth_before < _SMALL_STROKE * scale):
            result.dropped.append((frame, "shallow"))
            continue
        mid_close = open_before + 0.5 * depth_before
        start = _closing_start(smooth, before, pivot, open_before, depth_before, edge_tol, near_tol)
        last = s["last"]
        mid_open = open_after + 0.5 * depth_after
        m2 = last + int(np.argmax(smooth[last : after + 1] <= mid_open))
        end = _walk(smooth, m2, after, 1, edge_tol, open_after, depth_after, near_tol)
        close_frame = start + int(np.argmax(closedness[start : pivot + 1] >= mid_close))
        release_frame = m2
        if int(np.isfinite(dense_raw[close_frame:release_frame]).sum()) < config.min_frames:
            result.dropped.append((frame, "too_short"))
            continue
        result.segments.append(
            Segment(
                start=start + first_frame,
                end=end + first_frame,
                close_frame=close_frame + first_frame,
                release_frame=release_frame + first_frame,
                closed_level=closed_level(max(level, s["level_last"])),
            )
        )
    if not result.segments and not result.dropped:
        raw_lo, raw_hi = float(np.nanmin(dense_raw)), float(np.nanmax(dense_raw))
        result.details["no_cycle"] = f"{raw_lo:.4g}..{raw_hi:.4g}"
        result.dropped.append((first_frame, "no_cycle"))
    return result


def _blocked_by_an_object(
    commanded: np.ndarray | None,
    config: SegmentConfig,
    closedness: np.ndarray,
    smooth: np.ndarray,
    spells: list,
    tol: float,
    span: float,
    sigma: float,
) -> dict[int, bool]:
    """Per closed spell (by pivot): did something stop the fingers short of the command?

    On an empty closure, and at rest, the follower's gripper reaches what the leader commands (give or take a
    calibration offset, the same at rest as anywhere); on an object it stays short of it by the object's
    thickness. A spell counts as blocked when its median shortfall exceeds the rest spells' (or, with none, the
    episode's median shortfall) by ``max(4 % of the range, 4 noise sigma)``. Empty without a command.
    ``commanded`` is on the same dense grid as ``closedness`` (:func:`dense_signal` of the same frames).
    """
    if commanded is None:
        return {}
    cmd_closedness, _, _ = _closedness_auto(fill_missing(commanded), config)
    shortfall = cmd_closedness - closedness  # > 0: commanded more closed than the fingers are

    def held(pivot: int, before: int | None, after: int | None, level: float) -> float:
        a = before if before is not None else 0
        b = after + 1 if after is not None else closedness.size
        near = np.flatnonzero(np.abs(smooth[a:b] - level) <= tol) + a
        return float(np.median(shortfall[near] if near.size else shortfall[pivot : pivot + 1]))

    shortfalls = {p: held(p, bf, af, lv) for p, bf, af, lv in spells}
    rest = [shortfalls[p] for p, bf, af, _ in spells if bf is None or af is None]
    baseline = max(rest) if rest else float(np.median(shortfall))
    needed = max(0.04 * span, 4.0 * sigma)
    return {p: value - baseline >= needed for p, value in shortfalls.items()}
