"""Entry point of the `grounded-planner` command: every module in this package that defines
``register(subparsers)`` contributes its subcommands (kept cheap to import: heavy imports go
inside the handlers)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
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


# Exit status of a command whose output pipe was closed by its reader (`... | head`), as a shell reports SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13
# Exceptions that say an input is bad (a file, a value, a format): one line naming it, exit 2. The library
# raises them with the reason (every *Error of this package that is a ValueError, plus OSError for files).
INPUT_ERRORS = (ValueError, OSError, OverflowError)


def _input_paths(args: argparse.Namespace) -> list[str]:
    """Every argument value that names an existing file (to say which input a decoding error came from)."""
    paths = []
    for value in vars(args).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item and os.path.isfile(item):
                paths.append(item)
    return paths


def _undecodable_input(args: argparse.Namespace) -> str:
    for path in _input_paths(args):
        try:
            with open(path, encoding="utf-8") as f:
                f.read()
        except UnicodeDecodeError as exc:
            return f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        except OSError:
            continue
    return ""


def describe_error(exc: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """(one line, exit code) for an exception that reached the command line."""
    if isinstance(exc, UnicodeDecodeError):
        return (_undecodable_input(args) or f"an input is not UTF-8 text ({exc.reason} at offset {exc.start})"), 2
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot use {exc.filename}: {exc.strerror or exc}", 2
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, INPUT_ERRORS):
        return message, 2
    if type(exc).__module__.startswith("grounded_planner."):  # a typed failure of ours (camera, VLM, robot, ...)
        return message, 1
    return (f"unexpected {type(exc).__name__}: {message} (a bug worth reporting; "
            "--verbose prints the traceback)"), 1


def _quiet_broken_pipe() -> int:
    # The reader went away: whatever is still buffered must not end in a second error at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    """Run one command. No traceback for bad input: typed errors become one line ``error: ...`` on stderr
    (exit 2 for a bad input, 1 for a failure), a closed output pipe ends quietly, Ctrl-C exits 130."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except CliError as exc:
        print(f"grounded-planner {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except Exception as exc:  # noqa: BLE001 - the command line's last word: one line, never a traceback
        message, code = describe_error(exc, args)
        if args.verbose:
            logging.getLogger("grounded_planner.cli").exception("%s failed", args.command)
        print(f"grounded-planner {args.command}: error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
