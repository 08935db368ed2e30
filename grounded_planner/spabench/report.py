"""The Spa-Bench report from a run folder's ``trials.jsonl`` alone: the paper's tables (IV-IX), the failure-mode
composition (Fig. 11), matched McNemar tests, the blind baseline's chance interval, as JSON, text and HTML."""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from grounded_planner.fileio import write_text_atomic
from grounded_planner.rollout.stats import format_rate, mcnemar_exact, wilson_interval
from grounded_planner.rollout.taxonomy import FAILURE_MODES
from grounded_planner.spabench.errors import SpaBenchError
from grounded_planner.spabench.predicates import objects_in_bowl
from grounded_planner.spabench.trial import CONDITIONS, TASKS, TrialRecord, TrialSpec, paraphrase_original

TRIALS_FILE = "trials.jsonl"
# The relational-placement sector count: a direction chosen blindly among left/right/front/behind hits one in four.
DIRECTIONS = 4
# The paper's four non-relational no-intervention diagnostics (Table IX); relational placement uses the control.
GATING_TASKS = ("counting", "ordinal_position", "object_state", "referential_description")
# Relative size has no no-intervention condition (Table II).


class ReportError(SpaBenchError):
    """A trials file the report cannot read (missing, not JSON lines, a line without a field it needs)."""


# -- reading ----------------------------------------------------------------------------------------


def trials_path(folder: str | Path) -> Path:
    return Path(folder) / TRIALS_FILE


def load_trials(folder: str | Path) -> list[dict[str, Any]]:
    """Every trial line of ``folder/trials.jsonl``; a bad line is a :class:`ReportError` naming file and line."""
    path = trials_path(folder)
    if not Path(folder).is_dir():
        raise ReportError(f"{folder}: no such folder")
    if not path.is_file():
        raise ReportError(f"{path}: no such file (a `spabench run` or `spabench session` folder has one)")
    trials: list[dict[str, Any]] = []
    seen: set[str] = set()
    for where, rec in read_records(path, ReportError):
        if rec["trial_id"] in seen:
            raise ReportError(f"{where}: trial_id {rec['trial_id']!r} appears twice")
        seen.add(rec["trial_id"])
        trials.append(rec)
    return trials


def read_records(path: Path, error: type[SpaBenchError]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, line)`` of each trial-record line of a JSONL file (``trials.jsonl`` or ``cards.jsonl``), checked
    against the contract; a bad line raises ``error`` naming the file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(data, dict):
                raise error(f"{where}: expected a JSON object, got {type(data).__name__}")
            try:
                record = TrialRecord.from_dict(data, where=where).to_dict()
            except SpaBenchError as exc:
                raise error(str(exc)) from None
            yield where, {**data, **record}


# -- cells ------------------------------------------------------------------------------------------


def cell(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``k/n; rate (Wilson 95%)`` of the labelled records (success not null); unlabelled ones are counted apart."""
    k = n = unlabelled = 0
    for r in records:
        if r.get("success") is None:
            unlabelled += 1
            continue
        n += 1
        k += bool(r["success"])
    out: dict[str, Any] = {
        "k": k,
        "n": n,
        "rate": k / n if n else None,
        "ci95": list(wilson_interval(k, n)) if n else None,
        "cell": format_rate(k, n) if n else "-",
    }
    if unlabelled:
        out["unlabelled"] = unlabelled
    return out


def matched(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The labelled pairs of ``a`` and ``b`` sharing a ``pair_id``: concordance table and exact McNemar p."""
    by_pair_b = {r["pair_id"]: r for r in b if r.get("pair_id") and r.get("success") is not None}
    pairs = [(r, by_pair_b[r["pair_id"]]) for r in a if r.get("pair_id") in by_pair_b and r.get("success") is not None]
    table = Counter((bool(x["success"]), bool(y["success"])) for x, y in pairs)
    a_only, b_only = table[(True, False)], table[(False, True)]
    return {
        "pairs": len(pairs),
        "both": table[(True, True)],
        "a_only": a_only,
        "b_only": b_only,
        "neither": table[(False, False)],
        "mcnemar_exact_p": mcnemar_exact(a_only, b_only) if pairs else None,
        "a": [x for x, _ in pairs],
        "b": [y for _, y in pairs],
    }


def _pairs_out(m: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    return {"a": a, "b": b, **{k: v for k, v in m.items() if k not in ("a", "b")}}


# -- the blind baseline's chance ---------------------------------------------------------------------


def in_receptacle(rec: Mapping[str, Any], positions: Mapping[str, Sequence[float]]) -> list[str]:
    """Objects in the receptacle by Table I's rule (:func:`grounded_planner.spabench.predicates.objects_in_bowl`);
    none when the trial has no receptacle."""
    spec = TrialSpec.from_dict(rec.get("spec") or {})
    if not spec.receptacle or spec.receptacle_radius_m is None or spec.receptacle not in positions:
        return []
    return objects_in_bowl(spec, positions)


def movable_outside(rec: Mapping[str, Any]) -> list[str]:
    """Objects a counting policy can still put in the receptacle: neither it, nor in it, nor the reference."""
    spec = rec.get("spec") or {}
    positions = rec.get("initial_positions") or {}
    inside = set(in_receptacle(rec, positions))
    return sorted(o for o in positions if o not in inside and o not in (spec.get("receptacle"), spec.get("reference")))


def blind_candidates(rec: Mapping[str, Any]) -> list[str]:
    """The objects the blind policy draws its target from: the named category (the target and its same-category
    distractors; an instruction naming only "object" makes every object a distractor), never the reference."""
    spec = rec.get("spec") or {}
    named = {*(spec.get("distractors") or []), *([spec["target"]] if spec.get("target") else [])}
    return sorted(named - {spec.get("reference")})


def blind_success_probability(rec: Mapping[str, Any]) -> float:
    """Chance that the spatially blind policy succeeds on a trial, from the trial record alone.

    The policy (``--planner blind``) picks its object uniformly among :func:`blind_candidates` and ignores the
    spatial qualifier: it puts the pick in the receptacle; in relational placement it places the target on one of
    the four sides of the reference, drawn uniformly; in counting it puts a uniformly drawn number 0..m of the m
    objects outside the receptacle into it. It never withholds action for a spatial reason, so a no-intervention
    trial succeeds only by those draws (counting: drawing 0; relational control: drawing the side that holds), or
    when nothing of the named category is there to move.
    """
    spec = rec.get("spec") or {}
    task = rec["task"]
    if task == "counting":
        if spec.get("count") is None:
            return 0.0
        outside = len(movable_outside(rec))
        needed = int(spec["count"]) - len(in_receptacle(rec, rec.get("initial_positions") or {}))
        return 1.0 / (outside + 1) if 0 <= needed <= outside else 0.0
    candidates = blind_candidates(rec)
    if not candidates:  # nothing of the named category on the table: it does nothing
        return 0.0 if rec.get("expects_action", True) else 1.0
    if task == "relational_placement":
        return (1.0 / len(candidates) if spec.get("target") in candidates else 0.0) / DIRECTIONS
    if not rec.get("expects_action", True) or spec.get("target") not in candidates:
        return 0.0  # nothing to pick correctly: any object it moves is a failure
    return 1.0 / len(candidates)


def poisson_binomial_interval(probabilities: Sequence[float], level: float = 0.95) -> tuple[int, int]:
    """Central ``level`` interval [lo, hi] of the number of successes of independent Bernoulli(p_i) trials."""
    pmf = [1.0]
    for p in probabilities:
        nxt = [0.0] * (len(pmf) + 1)
        for k, mass in enumerate(pmf):
            nxt[k] += mass * (1 - p)
            nxt[k + 1] += mass * p
        pmf = nxt
    tail = (1 - level) / 2
    cdf, lo, hi = 0.0, None, len(pmf) - 1
    for k, mass in enumerate(pmf):
        cdf += mass
        if lo is None and cdf >= tail - 1e-12:
            lo = k
        if cdf >= 1 - tail - 1e-12:
            hi = k
            break
    return lo or 0, hi


def chance(
    records: Sequence[Mapping[str, Any]], probability: Callable[[Mapping[str, Any]], float] = blind_success_probability
) -> dict[str, Any] | None:
    """Expected blind successes of labelled ``records`` and their 95% chance interval; whether the observed lies
    inside it."""
    labelled = [r for r in records if r.get("success") is not None]
    if not labelled:
        return None
    ps = [probability(r) for r in labelled]
    lo, hi = poisson_binomial_interval(ps)
    k, n = sum(bool(r["success"]) for r in labelled), len(labelled)
    return {
        "k": k,
        "n": n,
        "expected": sum(ps),
        "expected_rate": sum(ps) / n,
        "interval_k": [lo, hi],
        "interval_rate": [lo / n, hi / n],
        "inside": lo <= k <= hi,
    }


# -- the tables ---------------------------------------------------------------------------------------


def column_of(rec: Mapping[str, Any], robots: int) -> str:
    """A policy column: the planner, with the robot when the folder mixes robots."""
    return f"{rec['planner']} ({rec.get('robot')})" if robots > 1 else str(rec["planner"])


def _select(records, **where) -> list[dict[str, Any]]:
    return [r for r in records if all(r.get(k) == v for k, v in where.items())]


def _column_report(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every table of one policy column."""
    out: dict[str, Any] = {}
    ids, oods, directs = (_select(records, condition=c) for c in ("id", "ood", "direct"))
    m = matched(oods, directs)
    out["aggregate"] = [
        {"row": "ID", **cell(ids)},
        {"row": "all OOD", **cell(oods)},
        {"row": "matched OOD", **cell(m["a"])},
        {"row": "matched direct", **cell(m["b"])},
    ]
    out["matched_ood_direct"] = _pairs_out(m, "ood", "direct")
    # Tables V-VII (and every other condition): task rows, condition columns
    out["by_task"] = {
        c: [
            {"task": t, **cell(_select(records, task=t, condition=c))}
            for t in TASKS
            if _select(records, task=t, condition=c)
        ]
        for c in CONDITIONS
        if _select(records, condition=c)
    }
    out["matched_by_task"] = []
    for t in TASKS:
        mt = matched(_select(oods, task=t), _select(directs, task=t))
        if mt["pairs"]:
            out["matched_by_task"].append(
                {"task": t, "ood": cell(mt["a"]), "direct": cell(mt["b"]), **_pairs_out(mt, "ood", "direct")}
            )
    # Table VIII: paraphrases and the originals they rewrite, per kind of original
    paraphrases = _select(records, condition="paraphrase")
    out["paraphrase"] = []
    for kind, label in (("direct", "direct"), ("ood", "OOD spatial")):
        para = [r for r in paraphrases if paraphrase_original(r["seed"]) == kind]
        if not para:
            continue
        mp = matched(_select(records, condition=kind), para)
        out["paraphrase"].append({"row": f"original {label}", **cell(mp["a"])})
        out["paraphrase"].append(
            {
                "row": f"paraphrased {label}",
                **cell(mp["b"]),
                **_pairs_out(mp, f"original {label}", f"paraphrased {label}"),
            }
        )
    # Table IX, top: the same ID behaviour with standard and with cross-task objects, on the tasks that have both
    cross = _select(records, condition="cross_task_object")
    cross_tasks = [t for t in TASKS if _select(cross, task=t)]
    out["cross_task"] = []
    if cross:
        standard = [r for r in ids if r["task"] in cross_tasks]
        n_tasks = len(cross_tasks)
        out["cross_task"] = [
            {"row": f"standard objects, {n_tasks}-task ID", "tasks": cross_tasks, **cell(standard)},
            {"row": f"cross-task objects, {n_tasks}-task ID", "tasks": cross_tasks, **cell(cross)},
        ]
    # Table IX, bottom: action gating (no intervention per task, their aggregate) and the relational control
    gating: list[dict[str, Any]] = []
    no_int = _select(records, condition="no_intervention")
    for t in TASKS:
        rows = _select(no_int, task=t)
        if rows:
            gating.append({"row": f"{t}: no intervention", "task": t, **cell(rows)})
    gating_tasks = [t for t in GATING_TASKS if _select(no_int, task=t)]
    if len(gating_tasks) > 1:
        gating.append(
            {
                "row": f"{len(gating_tasks)}-task no-intervention aggregate",
                "tasks": gating_tasks,
                **cell([r for r in no_int if r["task"] in gating_tasks]),
            }
        )
    control = _select(records, condition="relational_control")
    holds = [r for r in control if not r.get("expects_action", True)]
    needs = [r for r in control if r.get("expects_action", True)]
    if holds:
        gating.append({"row": "relational control: relation already holds", **cell(holds)})
    if needs:
        gating.append({"row": "relational control: needs correction", **cell(needs)})
    out["action_gating"] = gating
    mc = matched(holds, needs)
    out["relational_control_pairs"] = _pairs_out(mc, "already holds", "needs correction") if mc["pairs"] else None
    # Fig. 11 (and Fig. 14 for id): failure-mode composition per task, normalised within the task
    out["failure_modes"] = []
    for c in CONDITIONS:
        for t in TASKS:
            failed = [r for r in _select(records, task=t, condition=c) if r.get("success") is False]
            if not failed:
                continue
            counts = Counter(r.get("failure_mode") or "unlabelled_failure_mode" for r in failed)
            order = [*FAILURE_MODES, "unlabelled_failure_mode"]
            out["failure_modes"].append(
                {
                    "task": t,
                    "condition": c,
                    "failures": len(failed),
                    "counts": {f: counts[f] for f in order if counts[f]},
                    "fractions": {f: counts[f] / len(failed) for f in order if counts[f]},
                }
            )
    # the blind policy's chance interval, per task and condition and overall
    if {r["planner"] for r in records} == {"blind"}:
        per = []
        for c in CONDITIONS:
            for t in TASKS:
                ch = chance(_select(records, task=t, condition=c))
                if ch:
                    per.append({"task": t, "condition": c, **ch})
        out["chance"] = {"overall": chance(records), "by_task": per}
    return out


def build_report(trials: Sequence[dict[str, Any]], source: str = "") -> dict[str, Any]:
    """The ``spabench report --json`` object: one set of tables per policy column (planner, or planner (robot))."""
    if not trials:
        raise ReportError(f"{source or 'trials'}: no trials to report")
    robots = {r.get("robot") for r in trials}
    columns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in trials:
        columns[column_of(r, len(robots))].append(r)
    labelled = sum(r.get("success") is not None for r in trials)
    return {
        "source": source,
        "trials": len(trials),
        "labelled": labelled,
        "unlabelled": len(trials) - labelled,
        "robots": sorted(str(x) for x in robots),
        "columns": sorted(columns),
        "policies": {col: _column_report(columns[col]) for col in sorted(columns)},
    }


def report_folder(folder: str | Path) -> dict[str, Any]:
    """The report of a run or session folder."""
    return build_report(load_trials(folder), source=str(folder))


# -- text ---------------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def _p(m: Mapping[str, Any] | None) -> str:
    if not m or not m.get("pairs"):
        return ""
    return (
        f"{m['pairs']} pairs, only {m['a']}: {m['a_only']}, only {m['b']}: {m['b_only']}, "
        f"McNemar exact p = {m['mcnemar_exact_p']:.3g}"
    )


def format_report(report: Mapping[str, Any]) -> str:
    """Plain-text tables of :func:`build_report` output, the paper's shapes with one column per policy."""
    cols = report["columns"]
    pol = report["policies"]
    lines = [
        f"Spa-Bench report: {report['source']} - {report['trials']} trials ({report['unlabelled']} unlabelled); "
        f"robot(s) {', '.join(report['robots'])}",
        "",
    ]

    def rows_table(title: str, key: str, label: str = "row") -> None:
        names: list[str] = []
        for c in cols:
            for row in pol[c][key]:
                if row[label] not in names:
                    names.append(row[label])
        if not names:
            return
        lines.append(title)
        body = [[n, *(next((r["cell"] for r in pol[c][key] if r[label] == n), "-") for c in cols)] for n in names]
        lines.extend(_table(["", *cols], body))
        lines.append("")

    rows_table("Aggregate (Table IV)", "aggregate")
    for c in cols:
        if _p(pol[c]["matched_ood_direct"]):
            lines.append(f"  {c}: matched OOD vs direct: {_p(pol[c]['matched_ood_direct'])}")
    lines.append("")
    conditions = [k for k in CONDITIONS if any(k in pol[c]["by_task"] for c in cols)]
    titles = {
        "id": "ID spatial grounding (Table V)",
        "ood": "OOD spatial grounding (Table VI)",
        "direct": "matched direct manipulation (Table VII)",
    }
    for cond in conditions:
        tasks = [t for t in TASKS if any(r["task"] == t for c in cols for r in pol[c]["by_task"].get(cond, []))]
        lines.append(f"{titles.get(cond, cond)} by task")
        body = [
            [t, *(next((r["cell"] for r in pol[c]["by_task"].get(cond, []) if r["task"] == t), "-") for c in cols)]
            for t in tasks
        ]
        lines.extend(_table(["task", *cols], body))
        lines.append("")
    for c in cols:
        for m in pol[c]["matched_by_task"]:
            lines.append(f"  {c}: {m['task']}: OOD {m['ood']['cell']} vs direct {m['direct']['cell']}; {_p(m)}")
    lines.append("")
    rows_table("Paraphrase (Table VIII)", "paraphrase")
    for c in cols:
        for row in pol[c]["paraphrase"]:
            if _p(row):
                lines.append(f"  {c}: {_p(row)}")
    rows_table("Cross-task objects (Table IX, top)", "cross_task")
    rows_table("Action gating (Table IX, bottom)", "action_gating")
    for c in cols:
        if pol[c]["relational_control_pairs"]:
            lines.append(f"  {c}: relational control: {_p(pol[c]['relational_control_pairs'])}")
    for c in cols:
        fm = pol[c]["failure_modes"]
        if fm:
            lines.append(f"Failure-mode composition ({c}; Fig. 11 for ood), fraction of the failures")
            lines.extend(
                _table(
                    ["task", "condition", "failures", "modes"],
                    [
                        [
                            f["task"],
                            f["condition"],
                            str(f["failures"]),
                            ", ".join(f"{m} {n} ({100 * f['fractions'][m]:.0f}%)" for m, n in f["counts"].items()),
                        ]
                        for f in fm
                    ],
                )
            )
            lines.append("")
        ch = pol[c].get("chance")
        if ch:
            o = ch["overall"]
            lines.append(
                f"Blind baseline ({c}): chance 95% interval per task and condition (expected successes, "
                "observed, inside)"
            )
            body = [
                [
                    x["task"],
                    x["condition"],
                    f"{x['expected']:.2f}/{x['n']}",
                    f"{x['interval_k'][0]}-{x['interval_k'][1]}",
                    f"{x['k']}/{x['n']}",
                    "yes" if x["inside"] else "NO",
                ]
                for x in ch["by_task"]
            ]
            body.append(
                [
                    "all",
                    "",
                    f"{o['expected']:.2f}/{o['n']}",
                    f"{o['interval_k'][0]}-{o['interval_k'][1]}",
                    f"{o['k']}/{o['n']}",
                    "yes" if o["inside"] else "NO",
                ]
            )
            lines.extend(_table(["task", "condition", "expected", "chance 95%", "observed", "inside"], body))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report_json(report: Mapping[str, Any]) -> str:
    """The JSON text of a report (the trial records carried for pairing left out)."""
    return json.dumps(_drop_records(report), indent=2)


def _drop_records(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_records(v) for k, v in obj.items() if not (k in ("a", "b") and isinstance(v, list))}
    if isinstance(obj, list):
        return [_drop_records(v) for v in obj]
    return obj


# -- HTML ---------------------------------------------------------------------------------------------

PALETTE = ("#1f5fd6", "#e07b1e", "#1a9a3a", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d4ac0d")
MODE_COLOURS = {
    "no_action": "#7f8c8d",
    "wrong_object": "#c0392b",
    "wrong_instance": "#e67e22",
    "grasp_failure": "#8e44ad",
    "incorrect_spatial_outcome": "#1f5fd6",
    "premature_release": "#16a085",
    "refused": "#d4ac0d",
    "planner_error": "#2c3e50",
    "unlabelled_failure_mode": "#bdc3c7",
}
CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 12px}
td,th{border:1px solid #bbb;padding:3px 8px;text-align:right;font-size:13px}
th{background:#f1f1f1;text-align:center} td:first-child{text-align:left}
.note{color:#555;font-size:13px} .no{color:#c0392b;font-weight:bold} .yes{color:#1a9a3a}
svg{display:block;margin:6px 0 18px;max-width:100%}
"""


def _svg_bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, Mapping[str, Any] | None]]]], series: Sequence[str], title: str
) -> str:
    """Horizontal bars (rate in %) with Wilson 95% whiskers, one block of bars per group (a task or a row) and one
    bar per series (a condition or a policy): ``groups`` = [(label, [(series, cell)])]."""
    if not groups:
        return ""
    left, plot_w, bar_h, gap, group_gap, top = 230, 460, 14, 2, 10, 40
    block = len(series) * (bar_h + gap) - gap
    legend_h = 22 if len(series) > 1 else 0
    height = top + len(groups) * (block + group_gap) + 24 + legend_h
    width = left + plot_w + 140
    x = lambda rate: left + plot_w * rate  # noqa: E731 - a local scale
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-size="11" role="img" aria-label="{html.escape(title)}">',
        f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    axis_bottom = top + len(groups) * (block + group_gap) - group_gap + 4
    for pct in (0, 25, 50, 75, 100):
        xx = x(pct / 100)
        parts.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top - 6}" y2="{axis_bottom}" stroke="#ddd"/>'
            f'<text x="{xx:.1f}" y="{top - 10}" text-anchor="middle">{pct}%</text>'
        )
    for gi, (label, bars) in enumerate(groups):
        y0 = top + gi * (block + group_gap)
        parts.append(
            f'<text x="{left - 8}" y="{y0 + block / 2 + 4:.1f}" text-anchor="end">'
            f"{html.escape(label.replace('_', ' '))}</text>"
        )
        by_series = dict(bars)
        for si, name in enumerate(series):
            c = by_series.get(name)
            if not c or not c.get("n"):
                continue
            y = y0 + si * (bar_h + gap)
            colour = PALETTE[si % len(PALETTE)]
            rate, (lo, hi) = c["rate"], c["ci95"]
            parts.append(
                f'<rect x="{left}" y="{y}" width="{plot_w * rate:.1f}" height="{bar_h}" fill="{colour}">'
                f"<title>{html.escape(label)} - {html.escape(name)}: {html.escape(c['cell'])}</title></rect>"
            )
            cy = y + bar_h / 2
            parts.append(
                f'<path d="M{x(lo):.1f},{cy:.1f}H{x(hi):.1f}M{x(lo):.1f},{cy - 4:.1f}v8'
                f'M{x(hi):.1f},{cy - 4:.1f}v8" stroke="#111" stroke-width="1.2" fill="none"/>'
            )
            parts.append(
                f'<text x="{left + plot_w + 6}" y="{cy + 4:.1f}" fill="#333">{c["k"]}/{c["n"]} {100 * rate:.0f}%</text>'
            )
    ly = height - 8 - legend_h
    if legend_h:
        lx = left
        for si, name in enumerate(series):
            parts.append(
                f'<rect x="{lx}" y="{ly + 6}" width="10" height="10" fill="{PALETTE[si % len(PALETTE)]}"/>'
                f'<text x="{lx + 14}" y="{ly + 15}">{html.escape(name)}</text>'
            )
            lx += 14 + 7 * len(name) + 18
    parts.append(
        f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end" fill="#555">'
        "whiskers: Wilson 95% interval</text></svg>"
    )
    return "".join(parts)


def _svg_modes(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """Horizontal 100% stacked bars of failure-mode fractions, one per task, with n failures."""
    if not rows:
        return ""
    left, bar_h, gap, plot_w, top = 190, 18, 8, 520, 26
    modes = [m for m in MODE_COLOURS if any(m in r["counts"] for r in rows)]
    height = top + len(rows) * (bar_h + gap) + 24 + 16 * ((len(modes) + 2) // 3)
    width = left + plot_w + 70
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-size="11" role="img" aria-label="{html.escape(title)}">',
        f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, r in enumerate(rows):
        yy = top + i * (bar_h + gap)
        parts.append(
            f'<text x="{left - 6}" y="{yy + 13}" text-anchor="end">{html.escape(r["task"].replace("_", " "))}</text>'
        )
        x = float(left)
        for m in modes:
            frac = r["fractions"].get(m, 0.0)
            if frac:
                parts.append(
                    f'<rect x="{x:.1f}" y="{yy}" width="{plot_w * frac:.1f}" height="{bar_h}" '
                    f'fill="{MODE_COLOURS[m]}"><title>{m}: {r["counts"][m]} of {r["failures"]}</title></rect>'
                )
                x += plot_w * frac
        parts.append(f'<text x="{left + plot_w + 6}" y="{yy + 13}">n = {r["failures"]}</text>')
    ly = top + len(rows) * (bar_h + gap) + 8
    for j, m in enumerate(modes):
        lx, yy = 4 + (j % 3) * 230, ly + (j // 3) * 16
        parts.append(
            f'<rect x="{lx}" y="{yy}" width="10" height="10" fill="{MODE_COLOURS[m]}"/>'
            f'<text x="{lx + 14}" y="{yy + 9}">{m.replace("_", " ")}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(report: Mapping[str, Any], title: str = "Spa-Bench report") -> str:
    """A self-contained HTML page (no scripts, no network): the tables and SVG bar charts with Wilson whiskers."""
    cols, pol = report["columns"], report["policies"]
    esc = html.escape
    out = [
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style>'
        f'</head><body><h1>{esc(title)}</h1><p class="note">{esc(report["source"])}: {report["trials"]} trials '
        f"({report['unlabelled']} unlabelled), robot(s) {esc(', '.join(report['robots']))}. Each cell: successes/"
        "trials; rate (Wilson 95% interval). Matched comparisons: exact McNemar test on pairs sharing a "
        "pair_id.</p>"
    ]

    def rows_section(heading: str, key: str, chart_title: str) -> None:
        names: list[str] = []
        for c in cols:
            for row in pol[c][key]:
                if row["row"] not in names:
                    names.append(row["row"])
        if not names:
            return
        out.append(f"<h2>{esc(heading)}</h2>")
        out.append(
            _html_table(
                ["", *cols],
                [
                    [esc(n), *(esc(next((r["cell"] for r in pol[c][key] if r["row"] == n), "-")) for c in cols)]
                    for n in names
                ],
            )
        )
        groups = [(n, [(c, next((r for r in pol[c][key] if r["row"] == n), None)) for c in cols]) for n in names]
        out.append(_svg_bars(groups, cols, chart_title))

    rows_section("Aggregate (Table IV)", "aggregate", "Aggregate success")
    notes = [
        f"{esc(c)}: matched OOD vs direct: {esc(_p(pol[c]['matched_ood_direct']))}"
        for c in cols
        if _p(pol[c]["matched_ood_direct"])
    ]
    if notes:
        out.append('<p class="note">' + "<br>".join(notes) + "</p>")
    titles = {
        "id": "ID spatial grounding by task (Table V)",
        "ood": "OOD spatial grounding by task (Table VI)",
        "direct": "Matched direct manipulation by task (Table VII)",
    }
    conditions = [k for k in CONDITIONS if any(k in pol[c]["by_task"] for c in cols)]
    if conditions:
        out.append("<h2>By task and condition (Tables V-VII)</h2>")
    for cond in conditions:
        tasks = [t for t in TASKS if any(r["task"] == t for c in cols for r in pol[c]["by_task"].get(cond, []))]
        out.append(f"<h3>{esc(titles.get(cond, cond.replace('_', ' ') + ' by task'))}</h3>")
        out.append(
            _html_table(
                ["task", *cols],
                [
                    [
                        esc(t),
                        *(
                            esc(next((r["cell"] for r in pol[c]["by_task"].get(cond, []) if r["task"] == t), "-"))
                            for c in cols
                        ),
                    ]
                    for t in tasks
                ],
            )
        )
    for c in cols:
        shown = [k for k in ("id", "ood", "direct") if k in pol[c]["by_task"]] or conditions
        groups = [
            (t, [(k, next((r for r in pol[c]["by_task"].get(k, []) if r["task"] == t), None)) for k in shown])
            for t in TASKS
            if any(r["task"] == t for k in shown for r in pol[c]["by_task"].get(k, []))
        ]
        out.append(_svg_bars(groups, shown, f"{c}: success by task and condition"))
        mt = [
            f"{esc(m['task'])}: OOD {esc(m['ood']['cell'])} vs direct {esc(m['direct']['cell'])}; {esc(_p(m))}"
            for m in pol[c]["matched_by_task"]
        ]
        if mt:
            out.append(f'<p class="note"><b>{esc(c)}</b> matched pairs by task:<br>' + "<br>".join(mt) + "</p>")
    rows_section("Paraphrase (Table VIII)", "paraphrase", "Original and paraphrased instructions")
    rows_section("Cross-task objects (Table IX, top)", "cross_task", "Standard and cross-task objects")
    rows_section("Action gating (Table IX, bottom)", "action_gating", "Action gating")
    for c in cols:
        if pol[c]["relational_control_pairs"]:
            out.append(
                f'<p class="note">{esc(c)}: relational control: {esc(_p(pol[c]["relational_control_pairs"]))}</p>'
            )
    for c in cols:
        fm = pol[c]["failure_modes"]
        for cond in CONDITIONS:
            rows = [f for f in fm if f["condition"] == cond]
            if rows:
                fig = " (Fig. 11)" if cond == "ood" else " (Fig. 14)" if cond == "id" else ""
                out.append(f"<h2>Failure modes, {esc(c)}, {esc(cond)}{fig}</h2>")
                out.append(_svg_modes(rows, f"{c}: failure-mode composition, {cond} (normalised per task)"))
        ch = pol[c].get("chance")
        if ch:
            out.append(
                f'<h2>Blind baseline: chance interval ({esc(c)})</h2><p class="note">The spatially blind '
                "policy picks uniformly among the objects of the named category and ignores the spatial "
                "qualifier; its success count must lie in the central 95% interval of the number of successes "
                "it would get by chance on these very scenes.</p>"
            )
            rows_ = [
                [
                    esc(x["task"]),
                    esc(x["condition"]),
                    f"{x['expected']:.2f} / {x['n']}",
                    f"{x['interval_k'][0]}&ndash;{x['interval_k'][1]}",
                    f"{x['k']} / {x['n']}",
                    '<span class="yes">yes</span>' if x["inside"] else '<span class="no">NO</span>',
                ]
                for x in [*ch["by_task"], {"task": "all", "condition": "", **ch["overall"]}]
            ]
            out.append(_html_table(["task", "condition", "expected", "chance 95%", "observed", "inside"], rows_))
    out.append("</body></html>")
    return "".join(out)


def write_html(report: Mapping[str, Any], out: str | Path) -> Path:
    """Write the HTML report atomically (a failed write leaves no half file)."""
    path = Path(out)
    write_text_atomic(path, render_html(report))
    return path
