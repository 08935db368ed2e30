"""`grounded-planner spabench SUBCOMMAND ...`: a table of subcommands, each in its own module of this package that
is imported only when that subcommand runs (the runner loads MuJoCo; the report needs nothing of the kind)."""

from __future__ import annotations

import argparse
import importlib

from grounded_planner.cli.main import CliError, add_command

# subcommand -> (module of grounded_planner.cli with build_parser(prog) and main(args), its help line), in listing
# order. Only the module of the subcommand being run is imported.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("spabench_run", "run Spa-Bench trials in the simulator: render, plan, back-project, execute, score"),
    "report": ("spabench_report", "the paper's tables, McNemar tests and failure modes of a run or session folder"),
    "cards": ("spabench_cards", "scene cards (PNG + printable HTML) to stage trials on a real arm"),
    "session": ("spabench_session", "run a cards folder on the live ROS graph, the operator confirming outcomes"),
    "demos": ("spabench_demos", "the oracle's executions of ID trials as a LeRobotDataset (V2GP demonstrations)"),
}


def register(subparsers) -> None:
    listing = "\n".join(f"  {name:<9} {help_line}" for name, (_, help_line) in SUBCOMMANDS.items())
    parser = add_command(
        subparsers,
        "spabench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Spa-Bench (six spatial-grounding tasks, seven conditions) on this stack.",
        epilog=f"subcommands:\n{listing}\n\n`grounded-planner spabench SUBCOMMAND --help` for its options.",
    )
    parser.add_argument("spabench_command", metavar="SUBCOMMAND", nargs="?", help=", ".join(SUBCOMMANDS))
    parser.add_argument("spabench_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=lambda args: _dispatch(args, parser))


def subcommand_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    """The parser and module of subcommand ``name`` (imports that module only)."""
    if name not in SUBCOMMANDS:
        raise CliError(f"unknown subcommand {name!r} (expected one of {', '.join(SUBCOMMANDS)})")
    module_name, help_line = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(f"{__package__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{module_name}":
            raise
        raise CliError(f"spabench {name} is not part of this version of grounded_planner") from None
    parser = module.build_parser(f"grounded-planner spabench {name}")
    parser.description = parser.description or help_line
    return parser, module


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.spabench_command:
        parser.print_help()
        return 2
    sub, module = subcommand_parser(args.spabench_command)
    sub_args = sub.parse_args(args.spabench_args)
    sub_args.verbose = args.verbose
    return int(module.main(sub_args) or 0)
