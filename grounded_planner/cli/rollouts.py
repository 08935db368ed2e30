"""`grounded-planner rollouts label|summary|recover|export`: labelling, statistics and upkeep of rollout folders."""

from __future__ import annotations

import argparse
import json
import sys

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.rollout.export import ExportError, export_lerobot
from grounded_planner.rollout.label import label_rollouts
from grounded_planner.rollout.plot import plot_summary
from grounded_planner.rollout.record import IN_PROGRESS, RolloutError, find_rollouts, find_unfinished, recover_rollout
from grounded_planner.rollout.session import find_sessions, recover_session, session_status
from grounded_planner.rollout.stats import StatsError, format_summary, summarize


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "rollouts", description="Work on rollout folders (rollout.json + rollout.mcap, one per episode)."
    )
    sub = parser.add_subparsers(dest="rollouts_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _usage(parser))

    label = sub.add_parser("label", help="ask success and failure mode for each unlabelled rollout (terminal)")
    label.add_argument("dirs", nargs="+", metavar="DIR", help="rollout folders or folders holding them")
    label.add_argument("--relabel", action="store_true", help="also ask for rollouts that already have a label")
    label.set_defaults(func=_label)

    summary = sub.add_parser("summary", help="success rates (Wilson 95%% CI), failure modes, paired comparisons")
    summary.add_argument("dirs", nargs="+", metavar="DIR", help="rollout folders or folders holding them")
    summary.add_argument(
        "--by",
        default="task,condition",
        help="comma-separated grouping fields: task, condition, model, scene_id, config_hash, "
        "expects_action ('' = one group) [task,condition]",
    )
    summary.add_argument("--json", action="store_true", help="print the summary as JSON")
    summary.add_argument(
        "--plot", metavar="OUT.png", help="also write a plot (rates with Wilson whiskers, failure modes)"
    )
    summary.set_defaults(func=_summary)

    recover = sub.add_parser(
        "recover", help="finalise rollouts whose recorder was killed (bag footer, status cut_short)"
    )
    recover.add_argument("dirs", nargs="+", metavar="DIR", help="rollout folders or folders holding them")
    recover.set_defaults(func=_recover)

    export = sub.add_parser("export", help="export rollouts to a LeRobotDataset (needs lerobot installed)")
    export.add_argument("dirs", nargs="+", metavar="DIR", help="rollout folders or folders holding them")
    export.add_argument("--repo-id", required=True, help="dataset repo id, e.g. me/grounded_rollouts")
    export.add_argument("--root", required=True, help="local folder to write the dataset into (must not exist)")
    export.add_argument("--fps", type=int, default=15, help="frame rate the camera frames are stored at [15]")
    export.add_argument("--only-success", action="store_true", help="export labelled successes only")
    export.set_defaults(func=_export)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _records(dirs: list[str]):
    try:
        records = find_rollouts(dirs)
    except RolloutError as exc:
        raise CliError(str(exc)) from exc
    if not records:
        raise CliError(f"no rollout folders (with rollout.json) under {', '.join(dirs)}", 1)
    return records


def _label(args: argparse.Namespace) -> int:
    counts = label_rollouts(_records(args.dirs), sys.stdin, sys.stdout, relabel=args.relabel)
    print(
        f"labelled {counts.labelled}, skipped {counts.skipped}, already labelled {counts.already}"
        f"{' (stopped early)' if counts.quit else ''}"
    )
    return 0


def _summary(args: argparse.Namespace) -> int:
    by = [f.strip() for f in args.by.split(",") if f.strip()]
    records = _records(args.dirs)
    try:
        result = summarize([r.data for r in records], by)
    except StatsError as exc:
        raise CliError(str(exc)) from exc
    if args.plot:
        try:
            plot_summary(result, args.plot)
        except (ValueError, OSError) as exc:
            raise CliError(f"cannot write plot {args.plot}: {exc}") from exc
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_summary(result))
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def _recover(args: argparse.Namespace) -> int:
    failed = sessions = 0
    try:
        for session in find_sessions(args.dirs):  # a session's file first: its episodes read their windows from it
            if session_status(session) != IN_PROGRESS:
                continue
            try:
                index = recover_session(session)
            except RolloutError as exc:  # its recorder is still alive
                print(f"{session}: {exc}", file=sys.stderr)
                failed += 1
                continue
            except OSError as exc:  # a full disk: a failure at run time, try again later
                print(f"{session}: not recovered: {exc}", file=sys.stderr)
                failed += 1
                continue
            sessions += 1
            print(f"{session}: session recovered, {len(index['episodes'])} episodes, status {index['status']}")
        folders = find_unfinished(args.dirs)
    except RolloutError as exc:
        raise CliError(str(exc)) from exc
    if not folders and not sessions:
        print(f"nothing to recover under {', '.join(args.dirs)} (no rollout is in progress)")
        return 1 if failed else 0
    for folder in folders:
        try:
            fixed = recover_rollout(folder)
        except RolloutError as exc:  # the writer is still alive
            print(f"{folder}: {exc}", file=sys.stderr)
            failed += 1
            continue
        except OSError as exc:  # the folder could not be written (a full disk): a failure at run time, try again later
            print(f"{folder}: not recovered: {exc}", file=sys.stderr)
            failed += 1
            continue
        recovery = fixed.data.get("recovery") or {}
        print(
            f"{folder}: recovered {fixed.info.bag.messages} bag messages, status {fixed.status}: "
            f"{recovery.get('reason', 'already finished')}"
        )
    return 1 if failed else 0


def _export(args: argparse.Namespace) -> int:
    records = _records(args.dirs)
    if args.only_success:
        records = [r for r in records if r.success]
    try:
        info = export_lerobot(records, args.repo_id, args.root, fps=args.fps)
    except ExportError as exc:
        raise CliError(str(exc), exc.code) from exc
    print(json.dumps(info, indent=2))
    return 0
