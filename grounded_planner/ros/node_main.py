"""The one `main()` every node's console script runs: init, (lifecycle autostart), spin, clean exit."""

from __future__ import annotations

from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node


def run_node(make_node: Callable[[], Node], name: str, *, num_threads: int = 1, args=None) -> None:
    """Spin the node ``make_node()`` until Ctrl-C or an external shutdown.

    A lifecycle node whose ``autostart`` parameter is true is configured and activated first. A bad startup
    parameter (``ValueError`` from the node's checks) ends the process with one line naming the node, not a
    traceback. ``num_threads`` > 1 spins a multi-threaded executor (so that a slow callback, such as a VLM
    request, never blocks the others).
    """
    try:
        with rclpy.init(args=args):
            node = make_node()
            try:
                if isinstance(node, LifecycleNode) and node.has_parameter("autostart") \
                        and node.get_parameter("autostart").value \
                        and node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                    node.trigger_activate()
                executor = MultiThreadedExecutor(num_threads=num_threads) if num_threads > 1 else SingleThreadedExecutor()
                executor.add_node(node)
                executor.spin()
            finally:
                node.destroy_node()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except ValueError as exc:
        raise SystemExit(f"{name}: {exc}")
