"""Terminal labelling of rollouts by a person: success and failure mode per unlabelled rollout.

Runs in the ``grounded-planner rollouts label`` command only (never inside a node, which must not
block on a terminal). Input and output are streams, so a test (or a script) can feed answers on stdin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TextIO

from grounded_planner.rollout.record import RolloutRecord
from grounded_planner.rollout.taxonomy import FAILURE_MODES

_MODES = list(FAILURE_MODES)


@dataclass
class LabelCounts:
    """What a labelling session did."""

    labelled: int = 0
    skipped: int = 0
    already: int = 0
    quit: bool = False


def _describe(record: RolloutRecord) -> list[str]:
    d = record.data
    lines = [f"rollout {record.episode_id}  ({record.directory})"]
    meta = ", ".join(
        f"{k}={d[k]}" for k in ("task", "condition", "scene_id", "trial", "model") if d.get(k) not in ("", None)
    )
    if meta:
        lines.append(f"  {meta}")
    lines.append(f"  instruction: {d.get('instruction') or '(none recorded)'}")
    if not d.get("expects_action", True):
        lines.append("  no-intervention trial: success means the robot does NOT move")
    if record.cut_short:
        lines.append(f"  CUT SHORT: the recording never finished (status {record.status})")
    elif d.get("status") == "aborted":
        lines.append(f"  aborted: {d.get('error') or 'no error recorded'}")
    plan = d.get("plan")
    if d.get("planner_error"):
        lines.append(f"  planner error: {d['planner_error']}")
    elif plan is not None:
        acts = plan.get("actions") or []
        if acts:
            lines.append(
                "  plan: "
                + "; ".join(
                    f"{a['type']} {a.get('object', '')}{' -> ' + a['target'] if a.get('target') else ''}".strip()
                    for a in acts
                )
            )
        else:
            lines.append(f"  plan: empty ({plan.get('reason') or 'no reason'})")
    for s in d.get("steps") or []:
        lines.append(
            f"  step {s.get('index')}: {s.get('type')} -> {s.get('outcome')}"
            f"{': ' + s['message'] if s.get('message') else ''}"
        )
    if d.get("notes"):
        lines.append(f"  notes: {d['notes']}")
    return lines


def _ask(prompt: str, stdin: TextIO, stdout: TextIO) -> str | None:
    stdout.write(prompt)
    stdout.flush()
    line = stdin.readline()
    if line == "":  # end of input: stop as if the user quit
        return None
    return line.strip()


def label_rollouts(
    records: Sequence[RolloutRecord], stdin: TextIO, stdout: TextIO, relabel: bool = False
) -> LabelCounts:
    """Ask success/failure mode/notes for each unlabelled rollout (all of them with ``relabel``).

    Rollouts the stack labelled itself (refusals, failed grasps, empty plans) count as labelled.

    Answers: ``y``/``n`` for success, ``s`` to skip, ``q`` to quit; the failure mode by number or name
    (an automatic suggestion, if any, is taken with an empty answer); notes free text (empty keeps them).
    Each label is written to rollout.json as soon as it is complete, so quitting loses nothing.
    """
    counts = LabelCounts()
    menu = "\n".join(f"    {i + 1}. {m}: {FAILURE_MODES[m]}" for i, m in enumerate(_MODES))
    for record in records:
        if record.labelled and not relabel:
            counts.already += 1
            continue
        if record.writer_alive():
            stdout.write(f"rollout {record.episode_id} is still being recorded; skipped\n")
            counts.skipped += 1
            continue
        stdout.write("\n".join(_describe(record)) + "\n")
        suggestion = record.failure_mode
        if record.success is not None:
            stdout.write(
                f"  label so far ({record.data.get('label_source') or 'unknown source'}): "
                f"{'success' if record.success else 'failure'}{' (' + suggestion + ')' if suggestion else ''}\n"
            )
        while True:
            answer = _ask("  success? [y]es / [n]o / [s]kip / [q]uit: ", stdin, stdout)
            if answer is None or answer.lower() in ("q", "quit"):
                counts.quit = True
                return counts
            if answer.lower() in ("y", "yes", "n", "no", "s", "skip"):
                break
            stdout.write(f"  please answer y, n, s or q (got {answer!r})\n")
        if answer.lower().startswith("s"):
            counts.skipped += 1
            continue
        success = answer.lower().startswith("y")
        mode = None
        if not success:
            stdout.write("  failure modes:\n" + menu + "\n")
            while True:
                default = f" [{suggestion}]" if suggestion else ""
                answer = _ask(f"  failure mode (1-{len(_MODES)} or name){default}: ", stdin, stdout)
                if answer is None:
                    counts.quit = True
                    return counts
                if answer == "" and suggestion:
                    mode = suggestion
                elif answer.isdigit() and 1 <= int(answer) <= len(_MODES):
                    mode = _MODES[int(answer) - 1]
                elif answer in FAILURE_MODES:
                    mode = answer
                if mode:
                    break
                stdout.write(f"  not a failure mode: {answer!r}\n")
        notes = _ask("  notes (empty keeps them): ", stdin, stdout)
        record.save_label(success, mode, notes=notes or None, source="human")
        counts.labelled += 1
        stdout.write(f"  saved: {'success' if success else 'failure, ' + str(mode)}\n\n")
    return counts
