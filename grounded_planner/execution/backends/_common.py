"""Small helpers the arm backends share: yaw arithmetic for a symmetric parallel gripper and option parsing."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from grounded_planner.execution.config import ConfigError
from grounded_planner.geometry.transforms import wrap_pi


def nearest_equivalent_yaw(yaw_rad: float, reference_rad: float) -> float:
    """Of ``yaw_rad`` and ``yaw_rad + pi`` (the same grasp for a parallel gripper), the one closest to
    ``reference_rad`` (usually the current yaw): the wrist turns the short way."""
    a = reference_rad + wrap_pi(yaw_rad - reference_rad)
    b = reference_rad + wrap_pi(yaw_rad + math.pi - reference_rad)
    return a if abs(a - reference_rad) <= abs(b - reference_rad) else b


def options(cls: type, data: Mapping[str, Any] | None, backend: str) -> Any:
    """Build a backend's dataclass config from the ``backends.<name>`` YAML section, rejecting unknown keys."""
    data = dict(data or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"backends.{backend}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}"
        )
    return cls(**data)


#: finger opening kept out of an "anything held" grasp window, m: libfranka's grasp fails a window reaching beyond
#: the hand's opening ("libfranka gripper: Command failed!", franky #58 / libfranka #202 with epsilon 1.0)
GRASP_WINDOW_MARGIN_M = 0.001


def grasp_window(
    expected_width_m: float | None, max_width_m: float, epsilon_inner_m: float, epsilon_outer_m: float
) -> tuple[float, float, float]:
    """``(width, epsilon_inner, epsilon_outer)`` of a libfranka ``Gripper::grasp`` (which succeeds when the fingers
    stop at ``width - epsilon_inner < d < width + epsilon_outer``), kept inside the hand's opening ``max_width_m``.

    With an expected object width: that width and the configured tolerances (clipped to ``[0, max_width_m]``).
    Without one (None): width 0 and a window up to just below the opening, so that whatever is held counts and
    the width read afterwards tells what it is.

    >>> grasp_window(0.03, 0.0787, 0.01, 0.01)
    (0.03, 0.01, 0.01)
    >>> [round(v, 4) for v in grasp_window(None, 0.0787, 0.01, 0.01)]
    [0.0, 0.0, 0.0777]
    """
    if expected_width_m is None:
        return 0.0, 0.0, max(0.0, max_width_m - GRASP_WINDOW_MARGIN_M)
    width = min(max(float(expected_width_m), 0.0), max_width_m)
    return width, min(epsilon_inner_m, width), max(0.0, min(epsilon_outer_m, max_width_m - width))


def grasp_failed_message(backend: str, closed_m: float, width_m: float, inner_m: float, outer_m: float) -> str:
    """What a :class:`GraspFailedError` says: where the fingers stopped, the window they missed and its settings."""
    return (
        f"{backend}: the fingers stopped at {closed_m * 1000:.1f} mm, outside the grasp tolerance around the "
        f"object's expected width {width_m * 1000:.1f} mm (-{inner_m * 1000:.1f}/+{outer_m * 1000:.1f} mm, "
        f"backends.{backend}.grasp_epsilon_inner_m/_outer_m): the gripper reports the grasp failed"
    )
