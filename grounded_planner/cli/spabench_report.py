"""`grounded-planner spabench report DIR [--json] [--html OUT]`: the Spa-Bench tables of a run or session folder."""

from __future__ import annotations

import argparse
import sys

from grounded_planner.cli.main import CliError
from grounded_planner.spabench.report import ReportError, format_report, report_folder, report_json, write_html


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The Spa-Bench report of DIR/trials.jsonl: aggregate "
        "(Table IV), per task and condition (V-VII), paraphrase (VIII), cross-task and "
        "action gating (IX), failure-mode composition (Fig. 11), each cell k/n; rate "
        "(Wilson 95%), McNemar on matched pairs; the blind baseline's chance interval.",
    )
    parser.add_argument("dir", metavar="DIR", help="a `spabench run` or `spabench session` folder (DIR/trials.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--html", metavar="OUT", help="also write a self-contained HTML report (bar charts with Wilson whiskers) to OUT"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    try:
        report = report_folder(args.dir)
        if args.html:
            path = write_html(report, args.html)
            print(f"wrote {path}", file=sys.stderr)
    except ReportError as exc:
        raise CliError(str(exc)) from None
    print(report_json(report) if args.json else format_report(report), end="" if not args.json else "\n")
    return 0
