"""Parameter tables for the nodes: every parameter declared with a default and a description, changes validated."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node

from grounded_planner.errors import InputError
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.geometry.extrinsics import Extrinsics

# A check returns None when the value is fine, else the reason it is not (shown to `ros2 param set`).
Check = Callable[[Any], "str | None"]


class ParameterError(InputError):
    """A node parameter refused at startup (wrong type, fails its check): the node would run unusable."""


@dataclass(frozen=True)
class Param:
    """One node parameter: its name, default (which fixes its type), description and optional check."""

    name: str
    default: Any
    description: str
    check: Check | None = None
    read_only: bool = False  # True: only settable at startup (--ros-args -p / YAML)


def positive(value: Any) -> str | None:
    return None if value > 0 else f"must be > 0, got {value}"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value}"


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"

    return check


def non_empty(value: Any) -> str | None:
    return None if str(value).strip() else "must not be empty"


def existing_file(value: Any) -> str | None:
    """'' (not used) or a path to an existing file (relative ones are looked up as :func:`resolve_data_path` does)."""
    if not value or Path(resolve_data_path(value)).is_file():
        return None
    return f"names no file: {value} (relative paths are looked up in the working directory, then in the package)"


def existing_path(value: Any) -> str | None:
    """'' (not used) or a path to an existing file or folder (a rosbag2 directory)."""
    if not value or Path(resolve_data_path(value)).exists():
        return None
    return f"names nothing that exists: {value} (relative paths are looked up in the working directory, then in the package)"


def one_line(text: Any) -> str:
    """``text`` on one line (YAML parser errors span several)."""
    return " ".join(str(text).split())


def extrinsics_file(value: Any) -> str | None:
    """'' (poses stay in the camera frame) or a readable camera->base calibration YAML."""
    reason = existing_file(value)
    if reason is None and value:
        try:
            Extrinsics.load(resolve_data_path(value))
        except InputError as exc:  # ExtrinsicsError: unreadable, not YAML, missing or malformed fields
            reason = f"is not a usable extrinsics file: {one_line(exc)}"
    return reason


def executor_config_file(value: Any) -> str | None:
    """'' (built-in defaults) or a readable executor YAML (safety envelope, speeds, backend options)."""
    reason = existing_file(value)
    if reason is None and value:
        try:
            ExecutorConfig.load(resolve_data_path(value))
        except InputError as exc:  # ConfigError: unreadable, not YAML, unknown or out-of-range fields
            reason = f"is not a usable executor config: {one_line(exc)}"
    return reason


def writable_folder(value: Any) -> str | None:
    """A folder that exists, or can be created, and can be written to (checked without creating anything)."""
    probe = Path(expand_path(str(value))).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"cannot be a folder: {probe} is a file"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"is not writable: this process cannot write into {probe}"
    return None


def all_of(*checks: Check) -> Check:
    """The first reason any of ``checks`` gives (checks later in the list may assume the earlier ones passed)."""

    def check(value: Any) -> str | None:
        for one in checks:
            reason = one(value)
            if reason is not None:
                return reason
        return None

    return check


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _kind(value: Any) -> str:
    """What a value is, in a user's words (for errors that say what was given)."""
    if value is None:
        return 'nothing (an empty YAML value; write "" for an empty string)'
    if isinstance(value, bool):
        return f"{value} (a boolean)"
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value} (a number)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, (list, tuple)):
        return f"{list(value)!r} (a list)"
    if isinstance(value, dict):
        return f"{value!r} (a mapping)"
    return f"{value!r} (a {type(value).__name__})"


def expected_type(default: Any) -> str:
    """The type a parameter with this default takes, in a user's words."""
    if isinstance(default, bool):
        return "a boolean (true or false)"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, list):
        return f"a list of {expected_type(default[0]).split(' ', 1)[1]}s" if default else "a list"
    return type(default).__name__


def _is_type(default: Any, value: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def coerce(param: "Param", value: Any) -> tuple[Any, str | None]:
    """``value`` as ``param``'s type (an integer is taken for a number, ``[]`` for the default list), or the reason not.

    ROS parameters are statically typed: a string for a number, 1.5 for an integer or a mapping for a string
    would otherwise end in an rclpy exception deep inside ``declare_parameter``.
    """
    default = param.default
    wrong = f"must be {expected_type(default)}, got {_kind(value)}"
    if isinstance(default, list):
        if not isinstance(value, (list, tuple)):
            return None, wrong
        if not value:
            return list(default), None
        if default and not all(_is_type(default[0], item) for item in value):
            return None, wrong
        value = [float(v) for v in value] if default and isinstance(default[0], float) else list(value)
        return value, None
    if not _is_type(default, value):
        return None, wrong
    if isinstance(default, bool):
        return value, None
    if isinstance(default, int) and not INT64_MIN <= value <= INT64_MAX:  # a ROS integer parameter is 64-bit
        return None, f"must be an integer within 64 bits, got {value}"
    if isinstance(default, float):
        try:
            value = float(value)
        except OverflowError:  # an integer too large for a float
            value = math.inf
        if not math.isfinite(value):
            return None, f"must be a finite number, got {value}"
    return value, None


def check_value(param: "Param", value: Any) -> tuple[Any, str | None]:
    """``value`` coerced to ``param``'s type and passed through its check: (value, None) or (None, reason)."""
    value, reason = coerce(param, value)
    if reason is None and param.check is not None:
        reason = param.check(value)
    return (None, reason) if reason is not None else (value, None)


def declare_all(node: Node, params: list[Param], on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Declare ``params`` on ``node``; reject startup values and later changes that fail their type or check.

    Raises
    ------
    ParameterError
        When a value given at startup (``-p name:=value`` or a YAML file) has the wrong type or fails its check.
    """
    table = {p.name: p for p in params}
    # rclpy keeps the startup values (--ros-args -p, --params-file, parameter_overrides) here and would raise
    # InvalidParameterTypeException from inside declare_parameter; read them first to refuse them in one line
    overrides = getattr(node, "_parameter_overrides", {}) or {}
    for p in params:
        value = p.default
        if p.name in overrides:
            value, reason = check_value(p, overrides[p.name].value)
            if reason is not None:
                raise ParameterError(f"{node.get_name()}: parameter {p.name!r} {reason}")
        elif p.check is not None and p.check(value) is not None:
            raise ParameterError(f"{node.get_name()}: parameter {p.name!r} {p.check(value)}")
        node.declare_parameter(
            p.name, value, ParameterDescriptor(description=p.description, read_only=p.read_only), ignore_override=True
        )

    def validate(changes) -> SetParametersResult:
        for change in changes:
            p = table.get(change.name)
            if p is None or p.check is None:
                continue
            reason = p.check(change.value)
            if reason is not None:
                return SetParametersResult(successful=False, reason=f"{change.name} {reason}")
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(validate)
    if on_change is not None:
        node.add_post_set_parameters_callback(lambda changes: on_change({c.name: c.value for c in changes}))


def values(node: Node, params: list[Param]) -> dict[str, Any]:
    """The current value of each parameter in ``params``, by name."""
    return {p.name: node.get_parameter(p.name).value for p in params}


def expand_path(path: str) -> str:
    """``~`` and ``~user`` expanded: launch files and YAML pass paths as text, and no shell expands them there."""

    return os.path.expanduser(path) if path else path


def resolve_data_path(path: str) -> str:
    """A relative config/calibration/bag path as given (``~`` expanded), or found under the package's data folders.

    YAML profiles name files relative to the project (``calibration/x.yaml``); that must work from the source
    tree, from another working directory, and from a colcon install (``share/grounded_planner``).
    Returns ``path`` unchanged when nothing matches, so the caller's error names what the user wrote.
    """
    path = expand_path(path)
    if not path or Path(path).is_absolute() or Path(path).exists():
        return path
    roots = [Path(__file__).resolve().parents[2]]  # the source tree (editable install)
    try:
        # lazy: ROS package (ament_index_python), absent without a ROS install
        from ament_index_python.packages import get_package_share_directory

        roots.append(Path(get_package_share_directory("grounded_planner")))
    except (ImportError, LookupError, ValueError, OSError):  # not installed by colcon, or no AMENT_PREFIX_PATH
        pass
    for root in roots:
        if (root / path).exists():
            return str(root / path)
    return path
