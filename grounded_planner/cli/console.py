"""`grounded-planner console [--host H] [--port P] [--token T] [--rollouts-dir DIR] [--session DIR]`: the operator
console (console_node) in a process of its own, beside a running graph."""

from __future__ import annotations

import argparse

from grounded_planner.cli.main import CliError, add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "console",
        description="Serve the operator console: a web page to watch the camera and the plan, instruct, approve, "
        "stop and label. On 127.0.0.1 no token is needed; any other --host requires one (--token, or "
        "one generated and printed once at start).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on [127.0.0.1]")
    parser.add_argument("--port", type=int, default=8080, help="TCP port [8080] (0 = any free port)")
    parser.add_argument(
        "--token", default="", help="token required on a non-loopback host (>= 16 characters); '' = generate one"
    )
    parser.add_argument(
        "--rollouts-dir", default="rollouts", dest="rollouts_dir", help="the rollout logger's log_dir [rollouts]"
    )
    parser.add_argument(
        "--session",
        default="",
        dest="session_dir",
        metavar="DIR",
        help="a Spa-Bench scene-card folder to work through card by card",
    )
    parser.add_argument(
        "--executor-config",
        default="",
        dest="executor_config_file",
        metavar="YAML",
        help="the executor's config_file (its safety envelope judges the previewed steps)",
    )
    parser.set_defaults(func=_console)


def _console(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be 0-65535, got {args.port}")
    try:
        # lazy: a ROS command; the CLI runs without rclpy
        from grounded_planner.ros.console_node import run_console
    except ImportError as exc:
        raise CliError(f"console needs rclpy and the console extra (aiohttp): {exc}") from None
    run_console(
        {
            name: getattr(args, name)
            for name in ("host", "port", "token", "rollouts_dir", "session_dir", "executor_config_file")
        }
    )
    return 0
