"""`grounded-planner execute`: run (or dry-run) a grounded plan with its 3D targets on a robot backend."""

from __future__ import annotations

import argparse
import json
import select
import signal
import sys
import threading
from pathlib import Path

import yaml

from grounded_planner.cli.main import CliError, add_command
from grounded_planner.execution.backend import BackendError
from grounded_planner.execution.backends import make_backend
from grounded_planner.execution.config import BACKEND_NAMES, ConfigError, ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.execution.validate import ExecutionInputError, InvalidGoalError, check_goal
from grounded_planner.geometry.targets import TargetSet
from grounded_planner.plan import PlanError, load_plan

# shipped configs per backend when --config is not given
DEFAULT_CONFIGS = {"lerobot": "config/execution_so101.yaml"}
DEFAULT_CONFIG = "config/execution_franka.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    ex = add_command(
        subparsers,
        "execute",
        description='Print {"success": bool, "steps": [{"index", "type", "outcome", "message"}]}. Outcomes: ok, '
        "outside_workspace, unreachable, grasp_failed, timeout, cancelled, fault. Every target is "
        "checked against the safety envelope before the first motion; a failed step aborts the plan. "
        "Exit code 0 when every step is ok, 1 otherwise, 2 for bad input. Ctrl-C cancels (the arm stops).",
    )
    ex.add_argument("--plan", required=True, metavar="PLAN.json", help="canonical grounded plan JSON")
    ex.add_argument(
        "--targets",
        required=True,
        metavar="TARGETS.json",
        help="3D targets as printed by `grounded-planner backproject`, in the robot base frame",
    )
    ex.add_argument(
        "--backend", choices=BACKEND_NAMES, default=None, help="robot backend (default: executor.backend of the config)"
    )
    ex.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"executor/safety YAML (default: {DEFAULT_CONFIGS['lerobot']} for lerobot, {DEFAULT_CONFIG} otherwise)",
    )
    ex.add_argument(
        "-o",
        "--backend-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one backends.<backend> setting of the config, e.g. -o hostname=127.0.0.2 "
        "-o realtime=false (values in YAML syntax; repeatable)",
    )
    ex.add_argument(
        "--dry-run",
        action="store_true",
        help="check every target (workspace, reachability where the backend can tell offline) and "
        "report the motions; connects to nothing and moves nothing",
    )
    ex.add_argument("--compact", action="store_true", help="one-line JSON")
    ex.add_argument(
        "--confirm",
        action="store_true",
        help="show the checked plan and its motions, then move only after 'y' on the terminal; no answer "
        "within --confirm-timeout = rejected, nothing moved",
    )
    ex.add_argument(
        "--confirm-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds --confirm waits for an answer (default 60)",
    )
    ex.set_defaults(func=_execute)


def _load_config(args: argparse.Namespace):
    from grounded_planner.ros.params import resolve_data_path  # lazy: a ROS command; the CLI runs without rclpy

    path = args.config or DEFAULT_CONFIGS.get(args.backend or "", DEFAULT_CONFIG)
    try:
        config = ExecutorConfig.load(resolve_data_path(path))
    except ConfigError as exc:
        raise CliError(str(exc)) from exc
    if args.backend:
        config.backend = args.backend
    options = config.backends.setdefault(config.backend, {})
    for item in args.backend_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--backend-option must be KEY=VALUE, got {item!r}")
        try:
            options[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as exc:
            raise CliError(f"--backend-option {item!r}: the value is not valid YAML: {exc}") from exc
    return config


def _load_targets(path: str):
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read targets file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CliError(f"targets file {path} is not UTF-8 text (byte offset {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise CliError(f"targets file {path} is not JSON: {exc}") from exc
    try:
        return TargetSet.from_dict(data)  # PlanError naming the field for a wrong shape, as backproject prints it
    except ValueError as exc:  # PlanError / GeometryError: a field of the set or of one target
        raise CliError(f"targets file {path}: {exc}") from exc


def _confirmed(executor, plan, targets, timeout_s: float) -> bool:
    """Preview the checked plan on stderr and wait for 'y' on stdin; anything else, or silence, rejects."""
    if not timeout_s > 0:
        raise CliError(f"--confirm-timeout must be > 0 seconds, got {timeout_s}")
    preview = executor.execute(plan, targets, dry_run=True)
    for step in preview.steps:
        print(f"step {step.index} {step.type}: {step.outcome.value}: {step.message}", file=sys.stderr)
    if not preview.success:
        print(f"not run: {preview.message}", file=sys.stderr)
        return False
    print(
        f"move the robot through these {len(preview.steps)} steps? [y/N] (rejected after {timeout_s:g} s) ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    ready, _, _ = select.select([sys.stdin], [], [], timeout_s)
    answer = sys.stdin.readline().strip().lower() if ready else ""
    if answer in ("y", "yes"):
        return True
    reason = "no answer within the timeout" if not ready else f"answered {answer!r}"
    print(f"\nnot approved ({reason}): nothing moved", file=sys.stderr)
    print(json.dumps({"success": False, "approved": False, "message": f"not approved: {reason}", "steps": []}))
    return False


def _execute(args: argparse.Namespace) -> int:
    config = _load_config(args)
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        raise CliError(f"plan {args.plan}: {exc}") from exc
    targets = _load_targets(args.targets)
    try:
        # every check that needs no robot, before a backend exists: a bad file never connects an arm
        check_goal(plan, targets)
    except InvalidGoalError as exc:  # a NaN, a negative width, no frame
        raise CliError(f"targets {args.targets}: {exc}") from exc
    except ExecutionInputError as exc:
        raise CliError(f"plan {args.plan} and targets {args.targets} do not match: {exc}") from exc
    extra = {}
    if config.backend == "moveit":  # moveit_py, its goal messages and the gripper client: ROS installs only
        try:
            # lazy: a ROS command; the CLI runs without rclpy
            from grounded_planner.ros.moveit import moveit_backend_args
        except ImportError:  # no rclpy: a dry run still works, connecting says what is missing
            pass
        else:
            extra = moveit_backend_args()
    try:
        backend = make_backend(config.backend, config, **extra)
    except ConfigError as exc:
        raise CliError(str(exc)) from exc

    executor = Executor(backend, config)
    try:
        if args.dry_run:
            result = executor.execute(plan, targets, dry_run=True)
        elif args.confirm and not _confirmed(executor, plan, targets, args.confirm_timeout):
            return 1
        else:
            cancel = threading.Event()
            previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
            try:
                with backend:
                    result = executor.execute(plan, targets, cancel=cancel)
            finally:
                signal.signal(signal.SIGINT, previous)
    except BackendError as exc:  # connecting failed, or a dry-run reachability check could not run
        raise CliError(f"{config.backend}: {exc}", code=1) from exc
    print(json.dumps(result.to_dict(), indent=None if args.compact else 2))
    sys.stdout.flush()
    return 0 if result.success else 1
