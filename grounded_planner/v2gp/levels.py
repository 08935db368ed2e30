"""V2GP stage 1, level estimation: a gripper signal on a dense frame grid, its noise, its flat levels, its turning
points and the fitted knee of a ramp (the numerical tools :mod:`grounded_planner.v2gp.segment`'s rule is built on).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from grounded_planner.errors import InputError


class SignalError(InputError):
    """A gripper signal that cannot be segmented (bad file, bad column, bad values)."""


def dense_signal(values: Sequence[float], frames: Sequence[int] | None) -> tuple[np.ndarray | None, int]:
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
            raise SignalError(
                f"frame numbers must be strictly increasing; row {bad} has frame {frames_arr[bad]} "
                f"after {frames_arr[bad - 1]}"
            )
    if raw.size == 0 or not np.isfinite(raw).any():
        return None, 0
    first_frame = int(frames_arr[0])
    dense = np.full(int(frames_arr[-1]) - first_frame + 1, np.nan)
    dense[frames_arr.astype(np.int64) - first_frame] = raw
    return dense, first_frame


def fill_missing(values: np.ndarray) -> np.ndarray:
    """Linear interpolation over NaN samples, edges held (for detection only)."""
    good = np.isfinite(values)
    if good.all():
        return values
    idx = np.arange(values.size)
    return np.interp(idx, idx[good], values[good])


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) index ranges where ``mask`` is True."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    diff = np.diff(padded)
    return list(zip(np.flatnonzero(diff == 1).tolist(), np.flatnonzero(diff == -1).tolist()))


def hysteresis(values: np.ndarray, close_threshold: float, open_threshold: float) -> np.ndarray:
    closed = np.zeros(values.size, dtype=bool)
    state = False
    for i, v in enumerate(values):
        if not state and v >= close_threshold:
            state = True
        elif state and v <= open_threshold:
            state = False
        closed[i] = state
    return closed


def flat_level(values: np.ndarray, tol: float) -> float:
    """Level of the flat part of ``values``: starting at the median, twice the median of the values within
    ``tol`` of it, so the ramp samples of a slow gripper do not drag the level toward the other state."""
    level = float(np.median(values))
    for _ in range(2):
        near = values[np.abs(values - level) <= max(tol, 1e-3)]
        if not near.size:
            break
        level = float(np.median(near))
    return level


def _ramp_sse(
    t: np.ndarray, vals: np.ndarray, level: float, closed: float, knees: np.ndarray, lengths: np.ndarray, rising: bool
) -> tuple[np.ndarray, np.ndarray]:
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


def ramp_knee(
    t: np.ndarray,
    vals: np.ndarray,
    level: float,
    closed: float,
    knee_lo: float,
    knee_hi: float,
    rising: bool,
    sigma: float,
) -> int | None:
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
    lengths = np.unique(
        np.concatenate([coarse_lengths, np.linspace(max(fine, best_len[i] - 2 * dl), best_len[i] + 2 * dl, 41)])
    )
    sse, _ = _ramp_sse(t, vals, level, closed, knees, lengths, rising)
    tied = knees[sse <= sse.min() + 0.25 * max(sigma, 0.01) ** 2]
    lo, hi = float(tied.min()), float(tied.max())
    frame = math.floor((lo + hi) / 2 + 0.5) if rising else math.ceil((lo + hi) / 2 - 0.5)
    if math.ceil(lo - 1e-6) <= math.floor(hi + 1e-6):
        frame = min(max(frame, math.ceil(lo - 1e-6)), math.floor(hi + 1e-6))
    return int(frame)


def median_smooth(values: np.ndarray, half: int) -> np.ndarray:
    padded = np.pad(values, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    return np.median(windows, axis=1)


def zigzag(values: np.ndarray, delta: float) -> list[tuple[int, str]]:
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


def noise_sigma(values: np.ndarray) -> float:
    """Sample noise standard deviation from the median absolute frame-to-frame difference (robust to the steps)."""
    diffs = np.diff(values)
    if not diffs.size:
        return 0.0
    return 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)


def edge_end(values: np.ndarray, frm: int, stop: int, step: int, tol: float, settle: int) -> int:
    """Where a monotone move that passes ``frm`` comes to rest, walking in direction ``step`` (-1: back to where
    a rise began, +1: forward to where a fall ends) over ``values`` in which the move goes *down* that way.

    The walk goes on while the signal keeps falling by more than ``tol`` within the next ``settle`` frames and
    stops at the first plateau: the frame where the move reaches its flat level. A later (earlier) plateau a
    little lower is not reached: an open level that steps by a few percent is no part of the move.
    Never passes ``stop`` (inclusive).
    """
    t = frm
    n = values.size
    while True:
        lo = t + step
        hi = t + step * settle
        if step < 0:
            lo, hi = max(stop, hi), t - 1
        else:
            lo, hi = t + 1, min(stop, hi)
        if hi < lo or lo < 0 or hi >= n:
            return t
        window = values[lo : hi + 1]
        k = int(np.argmin(window))
        if window[k] >= values[t] - tol:
            # settled: the last (first) frame of the move still above the plateau's band is t; the plateau
            # starts at the nearest frame within tol of the level reached
            return t
        # jump to the lowest frame of the window that lies nearest in time to t among those below by tol
        below = np.flatnonzero(window < values[t] - tol)
        t = lo + int(below[0] if step > 0 else below[-1])
