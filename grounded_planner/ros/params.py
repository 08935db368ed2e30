"""Parameter tables for the nodes: every parameter declared with a default and a description, changes validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node

# A check returns None when the value is fine, else the reason it is not (shown to `ros2 param set`).
Check = Callable[[Any], "str | None"]


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


def declare_all(node: Node, params: list[Param], on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Declare ``params`` on ``node``; reject startup values and later changes that fail their check.

    Raises
    ------
    ValueError
        When a value given at startup (``-p name:=value`` or a YAML file) fails its check.
    """
    table = {p.name: p for p in params}
    for p in params:
        node.declare_parameter(p.name, p.default, ParameterDescriptor(description=p.description, read_only=p.read_only))
        value = node.get_parameter(p.name).value
        reason = p.check(value) if p.check is not None else None
        if reason is not None:
            raise ValueError(f"{node.get_name()}: parameter {p.name!r} {reason}")

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


def resolve_data_path(path: str) -> str:
    """A relative config/calibration/bag path as given, or found under the package's data folders.

    YAML profiles name files relative to the project (``calibration/x.yaml``); that must work from the source
    tree, from another working directory, and from a colcon install (``share/grounded_planner``).
    Returns ``path`` unchanged when nothing matches, so the caller's error names what the user wrote.
    """
    from pathlib import Path

    if not path or Path(path).is_absolute() or Path(path).exists():
        return path
    roots = [Path(__file__).resolve().parents[2]]  # the source tree (editable install)
    try:
        from ament_index_python.packages import get_package_share_directory

        roots.append(Path(get_package_share_directory("grounded_planner")))
    except (ImportError, LookupError, ValueError, OSError):  # not installed by colcon, or no AMENT_PREFIX_PATH
        pass
    for root in roots:
        if (root / path).exists():
            return str(root / path)
    return path
