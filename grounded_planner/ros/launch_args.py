"""Launch arguments read and checked for launch/*.launch.py: every refusal names the argument (``rate:=fast``).

Plain Python (no launch, no rclpy), so that the rules are tested without a ROS install; the launch files only call
these functions and raise what they raise (``ros2 launch`` prints the message on one line).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from grounded_planner.errors import InputError
from grounded_planner.execution.config import BACKEND_NAMES as ROBOT_BACKENDS
from grounded_planner.ros.names import NamespaceError, normalize_namespace
from grounded_planner.vlm.config import BACKENDS as PLANNER_BACKENDS

TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
# where rollouts go unless log_dir:= says otherwise: beside ROS's own logs, never wherever `ros2 launch` happens to run
DEFAULT_LOG_DIR = "~/.ros/grounded_planner/rollouts"
# planner backends that cannot run without a model name (gemini has a default model; replay needs replay_file)
NEEDS_MODEL = {
    "openai": "the model name your OpenAI-compatible server serves, e.g. model:=Qwen/Qwen3-VL-8B-Instruct",
    "transformers": "a model folder or hub id, e.g. model:=/models/Qwen3-VL-8B-Instruct",
    "decoupled": "the language planner's model name, e.g. model:=Qwen/Qwen3-VL-8B-Instruct",
}
# robot -> its MoveIt config package, where one ships; a robot missing here needs moveit_config:= given
MOVEIT_CONFIGS = {"franka": ("franka_fr3_moveit_config", "fr3")}
# name, default, description of the planner's arguments, in both launch files' tables (checked by planner())
PLANNER_ARGUMENTS = [
    ("planner_backend", "openai", " | ".join(PLANNER_BACKENDS)),
    (
        "model",
        "",
        "VLM model name as the server knows it (required by openai, transformers and decoupled; "
        "gemini defaults to gemini-2.5-flash; replay needs none)",
    ),
    ("base_url", "http://localhost:8000/v1", "OpenAI-compatible server root including /v1"),
    ("replay_file", "", "JSONL of recorded plans for planner_backend:=replay (~ is expanded)"),
]
# the executor_backend argument's description (real.launch.py), with the names executor_backend() takes
EXECUTOR_BACKEND_HELP = f"override the backend the robot implies ({' | '.join(ROBOT_BACKENDS)})"
# name, default, description of the arguments that start the operator console, in both launch files' tables
CONSOLE_ARGUMENTS = [
    (
        "console",
        "false",
        "true: also start the operator console (console_node), a web page to watch, instruct, approve, stop and label",
    ),
    ("console_host", "127.0.0.1", "console: address to listen on (any but loopback requires a token)"),
    ("console_port", "8080", "console: TCP port"),
    ("console_token", "", "console: token for a non-loopback host ('' there = generated and printed once)"),
]
# the ROS package whose console scripts the launch files start (each node NAME is the executable NAME_node)
PACKAGE = "grounded_planner"


class LaunchArgumentError(InputError):
    """A launch argument with a value the launch cannot use; the message names it as ``name:=value``."""


def _shown(name: str, text: str) -> str:
    return f"{name}:={text}" if text else f"{name}:=''"


def boolean(name: str, text: str) -> bool:
    """``text`` as a boolean: true/false (also 1/0, yes/no, on/off, any case); anything else is refused."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise LaunchArgumentError(
        f"launch argument {_shown(name, text)} is not a boolean: use {name}:=true or {name}:=false"
    )


def positive_number(name: str, text: str) -> float:
    """``text`` as a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise LaunchArgumentError(f"launch argument {_shown(name, text)} must be a number > 0 (e.g. {name}:=1.0)")
    return value


def choice(name: str, text: str, choices) -> str:
    if text not in choices:
        raise LaunchArgumentError(f"launch argument {_shown(name, text)} must be one of {' | '.join(choices)}")
    return text


def namespace(text: str) -> str:
    """The ``namespace`` argument as the launch passes it to every node (``''``: the root namespace). A relative
    one stays relative, so that launch_ros puts it under a namespace an including launch file pushed
    (``PushRosNamespace('fleet')`` + ``namespace:=robot1`` -> ``/fleet/robot1``); an absolute one stays absolute."""
    try:
        ns = normalize_namespace(text)
    except NamespaceError as exc:
        raise LaunchArgumentError(f"launch argument namespace:={text}: {exc}") from None
    if ns == "/":
        return ""
    return ns if text.strip().startswith("/") else ns[1:]


def existing_file(name: str, text: str, what: str) -> str:
    """``text`` (``~`` expanded) when it is a file; a missing one is refused, never replaced by defaults."""
    path = os.path.expanduser(text)
    if not text or not os.path.isfile(path):
        raise LaunchArgumentError(f"launch argument {_shown(name, text)}: no such file ({what})")
    return os.path.abspath(path)


def log_dir(text: str) -> str:
    """``log_dir`` with ``~`` expanded; a relative one is relative to the working directory of ``ros2 launch``."""
    return os.path.abspath(os.path.expanduser(text or DEFAULT_LOG_DIR))


def planner(backend: str, model: str, replay_file: str) -> dict[str, str]:
    """The planner's backend, model and replay file checked together: a backend that needs a model gets one here,
    not on its first request (which named the CLI's --model flag, not model:=)."""
    choice("planner_backend", backend, PLANNER_BACKENDS)
    if backend in NEEDS_MODEL and not model.strip():
        raise LaunchArgumentError(
            f"launch argument model:= is required with planner_backend:={backend}: "
            f"{NEEDS_MODEL[backend]} (or planner_backend:=replay replay_file:=PLANS.jsonl, "
            "which needs no model)"
        )
    if backend == "replay":  # checked here, passed on as given (the node expands ~ and relative paths itself)
        existing_file("replay_file", replay_file, "JSONL of recorded plans, needed by planner_backend:=replay")
    return {"backend": backend, "model": model, "replay_file": replay_file}


def executor_backend(text: str) -> str:
    """The robot backend the executor runs: one of the execution layer's registered backends."""
    return choice("executor_backend", text, ROBOT_BACKENDS)


def moveit_config(robot: str, package: str, robot_name: str) -> tuple[str, str]:
    """The MoveIt config package and robot name for ``robot``: ``''`` means the robot's own (franka:
    franka_fr3_moveit_config, fr3). A robot with no known MoveIt config (so101) must name one: a Franka config
    would plan for the wrong arm."""
    if package:
        return package, robot_name or robot
    if robot not in MOVEIT_CONFIGS:
        raise LaunchArgumentError(
            f"executor_backend:=moveit with robot:={robot} needs moveit_config:=PACKAGE (and "
            f"moveit_robot_name:=NAME): no MoveIt config ships for the {robot}, and the Franka "
            "one would plan for another arm"
        )
    default_package, default_name = MOVEIT_CONFIGS[robot]
    return default_package, robot_name or default_name


def moveit_missing(exc: ImportError) -> LaunchArgumentError:
    """The error for ``executor_backend:=moveit`` where MoveIt is not installed, with what to install."""
    distro = os.environ.get("ROS_DISTRO", "<distro>")
    return LaunchArgumentError(
        f"executor_backend:=moveit needs MoveIt 2 ({exc}): on a ROS install run "
        f"`sudo apt install ros-{distro}-moveit ros-{distro}-moveit-py ros-{distro}-moveit-configs-utils` "
        "(or `rosdep install --from-paths src -y`), then source /opt/ros/" + distro + "/setup.bash again; "
        "MoveIt is not on PyPI, so a venv without ROS cannot run it: use executor_backend:=franky there"
    )


def extrinsics_beside_bag(bag: str) -> str:
    """The calibration stored beside a recording: ``BAG/extrinsics.yaml`` (a rosbag2 folder), else
    ``extrinsics.yaml`` or ``calibration/extrinsics.yaml`` in the folder that holds the bag (the demo's layout:
    out/demo/scene + out/demo/calibration/extrinsics.yaml). Raises when there is none: back-projecting a recording
    with another cell's calibration puts every target centimetres off without a word."""
    path = Path(os.path.expanduser(bag))
    folder = path if path.is_dir() else path.parent
    candidates = (
        [
            folder / "extrinsics.yaml",
            folder.parent / "extrinsics.yaml",
            folder.parent / "calibration" / "extrinsics.yaml",
        ]
        if path.is_dir()
        else [folder / "extrinsics.yaml", folder / "calibration" / "extrinsics.yaml"]
    )
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.resolve())
    raise LaunchArgumentError(
        f"launch argument extrinsics_file:= is required for bag:={bag}: no calibration is stored beside it (looked "
        f"for {', '.join(str(c) for c in candidates)}); pass the recorded cell's camera -> base calibration"
    )


def nodes(namespace: str, config: str, overrides: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The keyword arguments of launch_ros's ``Node`` for each of our nodes in ``overrides`` (node name -> the
    parameters the launch arguments set, over ``config``, the parameters file every node reads), in that order:
    executable ``NAME_node`` of this package, node name ``NAME``, in ``namespace``, output on the screen."""
    return [
        {
            "package": PACKAGE,
            "executable": f"{name}_node",
            "name": name,
            "namespace": namespace,
            "output": "screen",
            "parameters": [config, dict(values)] if values else [config],
        }
        for name, values in overrides.items()
    ]


def console(arguments: Mapping[str, str], rollouts_dir: str) -> dict[str, dict[str, Any]]:
    """``{"console": its parameters}`` when ``console:=true``, else ``{}``: the operator console's address, port and
    token from ``console_host:=``, ``console_port:=`` and ``console_token:=``, and the folder of the rollouts it
    shows (the logger's ``log_dir``): the arguments of ``CONSOLE_ARGUMENTS``, which both launch files declare."""
    if not boolean("console", arguments["console"]):
        return {}
    return {
        "console": {
            "host": arguments["console_host"],
            "port": int(positive_number("console_port", arguments["console_port"])),
            "token": arguments["console_token"],
            "rollouts_dir": rollouts_dir,
        }
    }
