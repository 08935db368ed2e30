"""Conversions between the plan model and ROS messages, and the rclpy nodes (the only layer that imports rclpy)."""

import os as _os
import signal as _signal
import sys as _sys
import threading as _threading

# A node's console script (or `python -m grounded_planner.ros.<node>`) imports this package first, then rclpy, numpy
# and the node's modules: a second or two. A Ctrl-C, or the SIGINT ros2 launch sends when it stops early, that lands
# in those imports raised KeyboardInterrupt out of an import (a traceback, exit -2 under ros2 launch). Nothing is
# open yet, so such a process just ends, exit 0; run_node installs the real handler before rclpy starts.
_NODE_SCRIPTS = {
    "camera_node",
    "bag_player_node",
    "planner_node",
    "backprojection_node",
    "rollout_logger_node",
    "executor_node",
    "console_node",
}


def _end_while_starting(signum, frame) -> None:
    _os._exit(0)


def _started_as_node() -> bool:
    """This process is one of the node scripts: ``.../executor_node ...`` or ``python -m grounded_planner.ros.X``
    (while the package imports, ``sys.argv[0]`` is still ``-m``: the interpreter's own command line says it)."""
    argv = list(getattr(_sys, "orig_argv", None) or _sys.argv)
    names = {_os.path.splitext(_os.path.basename(arg))[0] for arg in argv[:2]}
    names |= {argv[i + 1].rsplit(".", 1)[-1] for i, arg in enumerate(argv[:-1]) if arg == "-m"}
    return bool(names & _NODE_SCRIPTS)


if _started_as_node() and _threading.current_thread() is _threading.main_thread():
    _signal.signal(_signal.SIGINT, _end_while_starting)
