"""Entry point of the `grounded-planner` command: a table of commands, each registered by its module of this
package (``register(subparsers)``), which is imported only when its command runs."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import tempfile
import time
import traceback

import grounded_planner
from grounded_planner.errors import GroundedPlannerError, InputError, MissingDependencyError
from grounded_planner.install_hints import missing_module_hint


class CliError(GroundedPlannerError):
    """A user-facing failure: printed as one line on stderr, exit code ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# command -> (module of grounded_planner.cli that registers it, its line in `grounded-planner --help`), in the order
# of that listing. A command's module is imported only when that command runs: `grounded-planner --help` stays quick
# and no command loads what another one needs (MuJoCo, torch, Ray, LeRobot, rclpy, ...). A module that registers
# several commands lists them next to each other, in the order it registers them.
COMMANDS: dict[str, tuple[str, str]] = {
    "approve": ("approve", "approve the plan executor_node is holding (require_approval), or --reject it"),
    "bench": ("bench", "score, run and report GroundedPlanBench-style episodes"),
    "bringup": ("bringup", "run the nodes of a config profile in one process (multi-threaded executor)"),
    "console": ("console", "serve the operator console: watch, instruct, approve, stop and label in a browser"),
    "demo": ("demo", "run camera bag -> planner -> back-projection -> executor -> rollout on a sample scene"),
    "execute": ("execute", "execute a plan's 3D targets on a robot (or check them with --dry-run)"),
    "backproject": ("geometry", "3D targets of a plan from an aligned depth image, intrinsics and extrinsics"),
    "calibrate": (
        "geometry",
        "hand-eye calibration: ChArUco images, pose samples (easy_handeye2) or another tool's result",
    ),
    "plan": ("planner", "ask a VLM for a grounded plan of an image and an instruction"),
    "parse": ("planner", "read a raw model answer on stdin, print the canonical plan JSON"),
    "draw": ("planner", "draw a plan over its image (boxes, place crosses, step numbers)"),
    "replay": ("replay", "run the planner on frames+instructions recorded in bags; write (and score) predictions"),
    "rollouts": ("rollouts", "label, summarise, recover and export recorded rollouts"),
    "sim": ("sim", "the simulated MuJoCo workcell: export episodes, render scenarios"),
    "spabench": ("spabench", "Spa-Bench: run, report, scene cards, operator sessions, demonstrations"),
    "v2gp": ("v2gp", "V2GP: robot demonstrations -> grounded plans -> training JSONL"),
    "finetune": ("v2gp", "LoRA fine-tuning of a Qwen3-VL planner on V2GP training JSONL"),
}


def add_command(subparsers: argparse._SubParsersAction, name: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of command ``name`` (for a module's ``register``), with its help line from :data:`COMMANDS`."""
    return subparsers.add_parser(name, help=COMMANDS[name][1], **kwargs)


def command_of(argv: list[str]) -> str | None:
    """The command word of a command line: its first argument that is not an option (the options before the
    command take no value)."""
    args = iter(argv)
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-" or not arg.startswith("-"):
            return arg
    return None


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `grounded-planner`, complete for ``commands`` (every command when None); the other commands
    are listed with their help line only, and their modules are not imported."""
    parser = argparse.ArgumentParser(
        prog="grounded-planner",
        description="Spatially grounded plans from VLMs: plan, score, back-project, execute, replay.",
    )
    parser.add_argument("--version", action="version", version=f"grounded-planner {grounded_planner.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {module for name, (module, _) in COMMANDS.items() if commands is None or name in commands}
    registered: set[str] = set()
    for name, (module, help_line) in COMMANDS.items():
        if module not in wanted:
            subparsers.add_parser(name, help=help_line)
        elif module not in registered:
            registered.add(module)
            importlib.import_module(f"{__package__}.{module}").register(subparsers)
    return parser


# Exit status of a command whose output pipe was closed by its reader (`... | head`), as a shell reports SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13
# Exit codes of the command line, by exception class (docs/failure_behaviours.md lists them): an InputError (or a
# file that cannot be used) is bad input, any other error of the package a failure; anything else is a bug.
EXIT_INPUT = 2
EXIT_FAILURE = 1
EXIT_BUG = 1


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


def save_traceback(exc: BaseException) -> str:
    """Write ``exc``'s traceback to a new file in the temporary folder; its path ("" when it cannot be written)."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"grounded-planner-bug-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"grounded-planner {grounded_planner.__version__}, python {sys.version.split()[0]}\n")
            f.write(f"argv: {sys.argv!r}\n\n")
            f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return path
    except OSError:
        return ""


def describe_error(exc: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """(one line, exit code) for an exception that reached the command line: bad input (an :class:`InputError`,
    a file that cannot be read or is not UTF-8) exit 2; another error of the package or a missing optional
    package exit 1; anything else is a bug, exit 1, its traceback saved to a file the line names."""
    if isinstance(exc, UnicodeDecodeError):
        return (
            _undecodable_input(args) or f"an input is not UTF-8 text ({exc.reason} at offset {exc.start})"
        ), EXIT_INPUT
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot use {exc.filename}: {exc.strerror or exc}", EXIT_INPUT
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, InputError):
        return message, EXIT_INPUT
    if isinstance(exc, (GroundedPlannerError, MissingDependencyError)):
        return message, EXIT_FAILURE
    if isinstance(exc, ModuleNotFoundError) and exc.name and not exc.name.startswith("grounded_planner"):
        return f"the Python package '{exc.name}' is not installed ({missing_module_hint(exc.name)})", EXIT_FAILURE
    path = save_traceback(exc)
    where = f"its traceback is in {path}" if path else "--verbose prints the traceback"
    return f"unexpected {type(exc).__name__}: {message} (a bug worth reporting; {where})", EXIT_BUG


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
        argv = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser([command_of(argv) or ""])
        args = parser.parse_args(argv)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
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
    # `python -m grounded_planner.cli.main`: run the imported module's main, not this __main__ copy's, so that the
    # CliError the command modules raise (grounded_planner.cli.main.CliError) is the class main() catches
    from grounded_planner.cli.main import main as module_main

    sys.exit(module_main())
