"""Entry point of the `grounded-planner` command: every module in this package that defines
``register(subparsers)`` contributes its subcommands (kept cheap to import: heavy imports go
inside the handlers)."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

import grounded_planner
import grounded_planner.cli as cli_pkg


class CliError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grounded-planner",
        description="Spatially grounded plans from VLMs: plan, score, back-project, execute, replay.",
    )
    parser.add_argument("--version", action="version", version=f"grounded-planner {grounded_planner.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cli_pkg.__path__), key=lambda m: m.name):
        if info.name == "main":
            continue
        module = importlib.import_module(f"{cli_pkg.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except CliError as exc:
        print(f"grounded-planner {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
