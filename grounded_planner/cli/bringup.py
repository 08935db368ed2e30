"""`grounded-planner bringup`: the nodes of a config profile in one process (no ROS install or launch needed)."""

from __future__ import annotations

import argparse

from grounded_planner.cli.main import CliError, add_command


def register(subparsers) -> None:
    parser = add_command(
        subparsers,
        "bringup",
        description="Start every node a profile (a ROS 2 parameters file: config/real.yaml, config/replay.yaml) "
        "names, in this process, until Ctrl-C. Nodes: camera, bag_player, planner, backprojection, "
        "executor, rollout_logger.",
    )
    parser.add_argument("--config", required=True, help="profile YAML, e.g. config/replay.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        help="override a parameter (repeatable), e.g. --set planner.backend=openai",
    )
    parser.add_argument(
        "--namespace",
        default="",
        metavar="NS",
        help="run every node in namespace NS (a second robot beside another on one graph: its plan "
        "service is /NS/grounded_planner/plan, its camera topics /NS/camera/camera/...); "
        "default: the root namespace",
    )
    parser.set_defaults(func=_bringup)


def _bringup(args: argparse.Namespace) -> int:
    from grounded_planner.ros.bringup import run  # lazy: a ROS command; the CLI runs without rclpy
    from grounded_planner.ros.params import one_line  # lazy: a ROS command; the CLI runs without rclpy

    try:
        return run(args.config, args.overrides, namespace=args.namespace)
    except ValueError as exc:  # ProfileError, BagFileError, a parameter value or file a node refused
        raise CliError(one_line(exc), 2) from exc
