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
        raise ConfigError(f"backends.{backend}: unknown key(s) {', '.join(unknown)}; expected some of "
                          f"{', '.join(sorted(known))}")
    return cls(**data)
