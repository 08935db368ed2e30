"""`grounded-planner approve [--reject REASON]`: approve (or reject) the plan an executor node holds."""

from __future__ import annotations

import argparse
import logging

from grounded_planner.cli.main import CliError, add_command

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers,
        "approve",
        description="Calls NAMESPACE/grounded_planner/approve (std_srvs/SetBool): true approves, false rejects. "
        "Exit 0 when the executor took the answer, 1 when no plan was waiting, 2 when no executor answered.",
    )
    parser.add_argument("--reject", metavar="REASON", help="reject the plan; the reason is logged here")
    parser.add_argument(
        "--timeout", type=float, default=10.0, dest="timeout_s", help="seconds to wait for the service (default 10)"
    )
    parser.add_argument(
        "--namespace",
        default="",
        metavar="NS",
        help="the robot's namespace (its stack brought up with --namespace NS / namespace:=NS); "
        "default: the root namespace",
    )
    parser.set_defaults(func=_approve)


def _approve(args: argparse.Namespace) -> int:
    if not args.timeout_s > 0:
        raise CliError(f"--timeout must be > 0 seconds, got {args.timeout_s}")
    try:
        # lazy: a ROS command; the CLI runs without rclpy
        from grounded_planner.ros.approve_client import ApprovalError, send_approval
        from grounded_planner.ros.names import NamespaceError  # lazy: beside the ROS command it serves
    except ImportError as exc:
        raise CliError(f"approve needs rclpy and std_srvs (a ROS 2 install or the ros extra): {exc}") from None
    approved = args.reject is None
    if not approved:
        log.warning("rejecting the held plan: %s", args.reject)
    try:
        taken, message = send_approval(approved, timeout_s=args.timeout_s, namespace=args.namespace)
    except (ApprovalError, NamespaceError) as exc:
        raise CliError(str(exc)) from None
    print(message + ("" if approved or not taken else f" (reason: {args.reject})"))
    return 0 if taken else 1
