"""Executor and safety-envelope configuration: dataclasses loaded from YAML, every field checked on creation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from grounded_planner.errors import InputError
from grounded_planner.yamlfile import read_yaml

BACKEND_NAMES = ("sim", "franky", "lerobot", "moveit")


class ConfigError(InputError):
    """A configuration value or file that breaks a rule; the message names the field and what was expected."""


def _vec3(value: Any, name: str) -> tuple[float, float, float]:
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be 3 numbers [x, y, z] in metres, got {value!r}") from exc
    if len(out) != 3 or not all(math.isfinite(v) for v in out):
        raise ConfigError(f"{name} must be 3 finite numbers [x, y, z] in metres, got {value!r}")
    return out  # type: ignore[return-value]


def check_positive(obj: Any, names: tuple[str, ...], allow_zero: bool = False, where: str | None = None) -> None:
    """Raise :class:`ConfigError` naming ``<where>.<name>`` unless each field is a finite number > 0 (>= 0)."""
    for name in names:
        value = getattr(obj, name)
        if (
            not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
            or (value == 0 and not allow_zero)
        ):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(f"{where or type(obj).__name__}.{name} must be a finite number {bound}, got {value!r}")


def _check_fraction(obj: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, (int, float)) or not (0.0 < value <= 1.0):
            raise ConfigError(f"{type(obj).__name__}.{name} must be in (0, 1], got {value!r}")


def _from_mapping(cls: type, data: Mapping[str, Any] | None, where: str) -> Any:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys (a typo must not silently fall back)."""
    data = dict(data or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


@dataclass
class SafetyConfig:
    """The safety envelope. Every target and every waypoint derived from it is checked against it before
    the first motion of a step; a violation refuses the step with ``outside_workspace`` and moves nothing."""

    # Workspace box in the robot base frame, metres: the tool centre point (TCP) never leaves it.
    workspace_min_m: tuple[float, float, float] = (0.25, -0.45, 0.0)
    workspace_max_m: tuple[float, float, float] = (0.80, 0.45, 0.60)
    # Height of the support surface (table top) in the base frame, metres.
    support_surface_z_m: float = 0.0
    # The TCP stays at least this far above the support surface, metres: keeps the fingertips off the table.
    # Grasp/place heights below it are raised to it (and the step message says so); targets are not lowered.
    min_height_above_surface_m: float = 0.01
    # Upper bound on every motion's velocity scaling, fraction of the robot's maximum (0, 1]; step speeds
    # above it are capped to it.
    max_velocity_scale: float = 0.3
    # Upper bound on acceleration (and jerk) scaling, fraction of the robot's maximum (0, 1].
    max_acceleration_scale: float = 0.2
    # Joint position limits the IK must respect, radians, {joint_name: [lower, upper]}; empty = the URDF's limits.
    # Applied by backends that solve IK themselves (lerobot); franky/moveit keep the robot's own limits.
    joint_limits_rad: dict[str, tuple[float, float]] = field(default_factory=dict)
    # A motion that has not finished after this long is stopped and the step ends with ``timeout``, seconds.
    motion_timeout_s: float = 20.0
    # Cancel and stop return within this bound with the arm still, seconds (tests hold the backends to it).
    stop_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        self.workspace_min_m = _vec3(self.workspace_min_m, "safety.workspace_min_m")
        self.workspace_max_m = _vec3(self.workspace_max_m, "safety.workspace_max_m")
        for axis, lo, hi in zip("xyz", self.workspace_min_m, self.workspace_max_m):
            if not lo < hi:
                raise ConfigError(f"safety.workspace_min_m.{axis} ({lo}) must be below workspace_max_m.{axis} ({hi})")
        if not math.isfinite(self.support_surface_z_m):
            raise ConfigError(f"safety.support_surface_z_m must be finite, got {self.support_surface_z_m!r}")
        check_positive(self, ("min_height_above_surface_m",), allow_zero=True)
        _check_fraction(self, ("max_velocity_scale", "max_acceleration_scale"))
        check_positive(self, ("motion_timeout_s", "stop_timeout_s"))
        limits: dict[str, tuple[float, float]] = {}
        for joint, bounds in dict(self.joint_limits_rad or {}).items():
            try:
                lo, hi = (float(b) for b in bounds)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"safety.joint_limits_rad.{joint} must be [lower, upper] in rad, got {bounds!r}"
                ) from exc
            if not lo < hi:
                raise ConfigError(f"safety.joint_limits_rad.{joint}: lower {lo} must be below upper {hi}")
            limits[str(joint)] = (lo, hi)
        self.joint_limits_rad = limits

    @property
    def floor_z_m(self) -> float:
        """Lowest TCP height allowed, metres in the base frame."""
        return self.support_surface_z_m + self.min_height_above_surface_m

    def violation(self, position_xyz: Any) -> str | None:
        """None when ``position_xyz`` (m, base frame) is inside the envelope, else a sentence saying where it is not."""
        p = [float(v) for v in position_xyz]
        for axis, v, lo, hi in zip("xyz", p, self.workspace_min_m, self.workspace_max_m):
            if not lo <= v <= hi:
                return f"{axis}={v:.3f} m is outside the workspace [{lo:.3f}, {hi:.3f}] m"
        if p[2] < self.floor_z_m - 1e-9:
            return (
                f"z={p[2]:.3f} m is below the minimum height {self.floor_z_m:.3f} m "
                f"({self.min_height_above_surface_m:.3f} m above the support surface)"
            )
        return None


@dataclass
class ClosedLoopConfig:
    """Budgets and thresholds of closed-loop execution (``execution.closed_loop``): each step is checked from
    what the robot and camera tell, and a failed check is recovered by re-grounding or replanning."""

    # Tries of one step: the first plus the retries after re-grounding it on a fresh frame.
    max_attempts_per_step: int = 3
    # How often the rest of the plan may be replanned from a fresh frame in one episode.
    max_replans: int = 2
    # Wall-clock budget of one episode, seconds: no new attempt or replan starts after it.
    time_budget_s: float = 300.0
    # Grasp check: a pixel of the grasp box "changed" when its depth moved by more than this, metres.
    grasp_depth_change_m: float = 0.01
    # Grasp check: the object left its place when at least this fraction of the box's valid pixels changed.
    grasp_changed_fraction: float = 0.25
    # Place check: the object re-observed at most this far (horizontally) from the place target, metres.
    place_tolerance_m: float = 0.06
    # Open/close check: the handle must have moved at least this far along the surface normal, metres.
    handle_min_travel_m: float = 0.03

    def __post_init__(self) -> None:
        for name in ("max_attempts_per_step", "max_replans"):
            value = getattr(self, name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < (1 if name == "max_attempts_per_step" else 0)
            ):
                raise ConfigError(
                    f"closed_loop.{name} must be an integer >= "
                    f"{1 if name == 'max_attempts_per_step' else 0}, got {value!r}"
                )
        check_positive(
            self,
            ("time_budget_s", "grasp_depth_change_m", "place_tolerance_m", "handle_min_travel_m"),
            where="closed_loop",
        )
        _check_fraction(self, ("grasp_changed_fraction",))


@dataclass
class ExecutorConfig:
    """How each primitive moves. Heights are relative to the target point, metres; speeds are fractions of the
    robot's maximum, capped by ``safety.max_velocity_scale``."""

    # Backend used when the caller names none: sim | franky | lerobot | moveit.
    backend: str = "sim"
    # The safety envelope (see SafetyConfig).
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    # Pre-grasp / pre-place height above the target, metres: the arm travels at this height, clear of objects.
    approach_height_m: float = 0.12
    # Height above the target the arm lifts to after a grasp or place, metres.
    retreat_height_m: float = 0.15
    # TCP height relative to the grasp target point at the moment of closing, metres (negative = deeper, e.g.
    # to grasp a box below its top face).
    grasp_height_offset_m: float = -0.01
    # TCP height above the place point when the gripper opens, metres: the held object is released this high.
    place_clearance_m: float = 0.03
    # Free-space speed (travel at approach height), fraction of the robot's maximum (0, 1].
    travel_speed_scale: float = 0.3
    # Speed of the last centimetres towards and away from objects (descend, lift, pull), fraction (0, 1].
    fine_speed_scale: float = 0.1
    # Opening before a grasp, metres between the fingers; None opens fully. Also the opening for release.
    gripper_open_width_m: float | None = None
    # Gripping force, newtons; None uses the backend's default.
    grasp_force_n: float | None = 20.0
    # A closed gripper narrower than this holds nothing: the step ends with ``grasp_failed``, metres.
    min_grasp_width_m: float = 0.004
    # Articulated objects (open/close): stand-off from the handle along the surface normal before grasping it, m.
    handle_approach_distance_m: float = 0.08
    # How far `open` pulls the handle out along the surface normal, metres.
    open_pull_distance_m: float = 0.12
    # How far `close` pushes the handle in against the surface normal, metres.
    close_push_distance_m: float = 0.12
    # After an aborted step the arm rises this far above where it stopped (capped at the workspace top), metres.
    abort_retreat_height_m: float = 0.08
    # Per-backend settings, {backend name: {key: value}}; each backend checks its own keys.
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Closed-loop budgets and step-check thresholds (used when running closed loop; see ClosedLoopConfig).
    closed_loop: ClosedLoopConfig = field(default_factory=ClosedLoopConfig)

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_NAMES:
            raise ConfigError(f"executor.backend must be one of {', '.join(BACKEND_NAMES)}, got {self.backend!r}")
        if isinstance(self.safety, Mapping):
            self.safety = _from_mapping(SafetyConfig, self.safety, "safety")
        if not isinstance(self.safety, SafetyConfig):
            raise ConfigError(f"executor.safety must be a SafetyConfig or a mapping, got {type(self.safety).__name__}")
        check_positive(
            self,
            (
                "approach_height_m",
                "retreat_height_m",
                "min_grasp_width_m",
                "handle_approach_distance_m",
                "open_pull_distance_m",
                "close_push_distance_m",
                "abort_retreat_height_m",
            ),
        )
        check_positive(self, ("place_clearance_m",), allow_zero=True)
        if not math.isfinite(self.grasp_height_offset_m) or abs(self.grasp_height_offset_m) > 0.1:
            raise ConfigError(
                f"executor.grasp_height_offset_m must be within +-0.1 m, got {self.grasp_height_offset_m!r}"
            )
        _check_fraction(self, ("travel_speed_scale", "fine_speed_scale"))
        if self.gripper_open_width_m is not None:
            check_positive(self, ("gripper_open_width_m",))
        if self.grasp_force_n is not None:
            check_positive(self, ("grasp_force_n",))
        if not isinstance(self.backends, Mapping):
            raise ConfigError(f"executor.backends must map backend names to settings, got {self.backends!r}")
        unknown = sorted(set(self.backends) - set(BACKEND_NAMES))
        if unknown:
            raise ConfigError(
                f"executor.backends: unknown backend(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(BACKEND_NAMES)}"
            )
        self.backends = {k: dict(v or {}) for k, v in self.backends.items()}
        if isinstance(self.closed_loop, Mapping):
            self.closed_loop = _from_mapping(ClosedLoopConfig, self.closed_loop, "closed_loop")
        if not isinstance(self.closed_loop, ClosedLoopConfig):
            raise ConfigError(f"executor.closed_loop must be a ClosedLoopConfig or a mapping, got {self.closed_loop!r}")

    def speed(self, requested: float) -> float:
        """``requested`` speed fraction capped by the safety envelope's velocity scaling."""
        return min(float(requested), self.safety.max_velocity_scale)

    def backend_options(self, name: str) -> dict[str, Any]:
        """The settings for backend ``name`` (empty when the file has none)."""
        return dict(self.backends.get(name, {}))

    # -- YAML -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "config") -> "ExecutorConfig":
        """Build from ``{"executor": {...}, "safety": {...}, "backends": {...}, "closed_loop": {...}}`` (each
        section optional)."""
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{where}: expected a mapping with executor/safety/backends sections, got {type(data).__name__}"
            )
        unknown = sorted(set(data) - {"executor", "safety", "backends", "closed_loop"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown section(s) {', '.join(unknown)}; expected executor, safety, backends, closed_loop"
            )
        executor = dict(data.get("executor") or {})
        if "safety" in executor or "backends" in executor or "closed_loop" in executor:
            raise ConfigError(f"{where}: put safety, backends and closed_loop at the top level, not under executor")
        executor["safety"] = _from_mapping(SafetyConfig, data.get("safety"), f"{where}: safety")
        executor["backends"] = data.get("backends") or {}
        executor["closed_loop"] = _from_mapping(ClosedLoopConfig, data.get("closed_loop"), f"{where}: closed_loop")
        return _from_mapping(cls, executor, f"{where}: executor")

    @classmethod
    def load(cls, path: str | Path) -> "ExecutorConfig":
        """Load a YAML file such as ``config/execution_franka.yaml``."""
        path = Path(path)
        data = read_yaml(path, "executor config", ConfigError) or {}
        return cls.from_dict(data, where=str(path))
