"""Ground truth of the AgileX Piper episodes of github.com/chenfei-source/ACT-robot-manipulation (LeRobot v3.0,
`robot_type: piper`, 15 fps, "Put the grape on the white plate.", 55 episodes; not kept in this repository: it
states no licence) by the paper's rule, from the raw signal. It imports nothing of grounded_planner, so the
truth does not come from the code it checks; it was written and run before the segmenter was run on this data.

Run: python truth_piper_act.py DATASET > piper_act_truth.json   (DATASET = the repository's `dataset/` folder)

The paper's rule (V2GP stage 1): a segment runs from the frame where the gripper begins to close to the frame
where it is fully open again.

s = observation.state `gripper.pos` (element 6; the jaw opening, larger = more open; the closed rest reads about
    0.8 in every episode); c = the smallest value of the whole dataset (the closed rest); each episode scaled to
    u = (s - c) / (its largest value - c); sm = 5-frame running median of u.
holds = stretches of frames within 0.06 of a local minimum of sm (the bottom of its stretch), not touching the
     first or last frame (a rest at either end is not a hold), at least 8 frames long (0.5 s), with the gripper at
     least 0.15 more open somewhere before it (since the previous hold) and somewhere after it (up to the next);
     two such stretches with no frame 0.15 above both between them are one closure (a closing in stages);
     h0 / h1 = the first / last frame of the hold within 0.04 of its level L.
c0 = the last frame before h0 within 0.03 of the most open level between the previous hold (or the start) and
     h0 (the last open frame before the closing); P2 = the first frame after h1 within 0.03 of the most open level
     between h1 and the next hold (or the end): fully open again.
A segment is right when its start lies in [c0 - 3, h0 + 3] and its end in [h1 - 3, P2 + 3] (3 frames' tolerance)
and the episode has exactly these segments.
Flags kept per segment, not used to drop any: `blocked` = the median of state minus the commanded gripper
(action element 5) over the hold is at least 2 (the object holds the jaws open); `near_closed` = L lies within a
tenth of the open level above the closed rest. A segment both near_closed and not blocked is `optional`: the jaws
shut almost fully with nothing holding them open, which may be a closure on nothing (not a grasp, as issue #26
says) or a squashed grape (no video here to tell): it is right either found or not found.
"""

import glob
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def median5(x):
    p = np.pad(x, 2, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(p, 5), axis=1)


def holds(sm, min_len=8):
    n = len(sm)
    found = []
    for i in range(1, n - 1):
        if not (sm[i] <= sm[i - 1] and sm[i] <= sm[i + 1]):
            continue
        lvl = sm[i]
        a = i
        while a > 0 and abs(sm[a - 1] - lvl) <= 0.06:
            a -= 1
        b = i
        while b < n - 1 and abs(sm[b + 1] - lvl) <= 0.06:
            b += 1
        if sm[a : b + 1].min() < lvl - 1e-9 or a == 0 or b == n - 1 or b - a + 1 < min_len:
            continue
        if (a, b) not in [(x[0], x[1]) for x in found]:
            found.append((a, b, float(lvl)))
    found.sort()
    # keep those opened clearly before and after (bounded by neighbours); merge those with no opening between
    merged = []
    for h in found:
        if merged and sm[merged[-1][1] + 1 : h[0]].max(initial=-1) < max(merged[-1][2], h[2]) + 0.15:
            a, b, lvl = merged[-1]
            merged[-1] = (a, max(b, h[1]), min(lvl, h[2]))
        else:
            merged.append(h)
    out = []
    for k, (a, b, lvl) in enumerate(merged):
        lo = merged[k - 1][1] + 1 if k else 0
        hi = merged[k + 1][0] if k + 1 < len(merged) else n
        if sm[lo:a].max(initial=-1) >= lvl + 0.15 and sm[b + 1 : hi].max(initial=-1) >= lvl + 0.15:
            out.append((a, b, lvl, lo, hi))
    return out


def truth(s, cmd, c):
    u = (s - c) / (s.max() - c)
    sm = median5(u)
    segments = []
    for a, b, lvl, lo, hi in holds(sm):
        idx = np.flatnonzero(sm[a : b + 1] <= lvl + 0.04) + a
        h0, h1 = int(idx[0]), int(idx[-1])
        top_before = sm[lo:h0].max()
        c0 = lo + int(np.flatnonzero(sm[lo:h0] >= top_before - 0.03)[-1])
        top_after = sm[h1:hi].max()
        p2 = h1 + int(np.argmax(sm[h1:hi] >= top_after - 0.03))
        segments.append(
            {
                "start": [max(0, c0 - 3), h0 + 3],
                "end": [h1 - 3, p2 + 3],
                "hold_level_raw": round(float(c + lvl * (s.max() - c)), 2),
                "open_before_raw": round(float(c + top_before * (s.max() - c)), 2),
                "blocked": bool(np.median(s[h0 : h1 + 1] - cmd[h0 : h1 + 1]) >= 2.0),
                "near_closed": bool(lvl < 0.1 * top_before),
            }
        )
        segments[-1]["optional"] = segments[-1]["near_closed"] and not segments[-1]["blocked"]
    return {"segments": segments}


if __name__ == "__main__":
    table = pa.concat_tables(
        [pq.read_table(f) for f in sorted(glob.glob(sys.argv[1] + "/data/chunk-*/file-*.parquet"))]
    )
    state = np.array(table.column("observation.state").to_pylist(), dtype=float)
    action = np.array(table.column("action").to_pylist(), dtype=float)
    episode = np.array(table.column("episode_index").to_pylist())
    frames = np.array(table.column("frame_index").to_pylist())
    c = float(state[:, 6].min())
    out = {"method": __doc__, "hand": "", "closed_rest_raw": round(c, 3), "episodes": {}}
    for e in sorted(set(episode.tolist())):
        rows = np.flatnonzero(episode == e)
        rows = rows[np.argsort(frames[rows])]
        out["episodes"][str(e)] = truth(state[rows, 6], action[rows, 5], c)
    json.dump(out, sys.stdout, indent=1)
    print()
