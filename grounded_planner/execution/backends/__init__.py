"""Robot backends by name: ``make_backend(name, config)``. Each backend module imports its SDK (franky, LeRobot,
MoveIt, MuJoCo) only when its backend is created, so importing them all here loads none of those SDKs."""

from __future__ import annotations

from grounded_planner.execution.backend import RobotBackend
from grounded_planner.execution.backends._common import options
from grounded_planner.execution.backends.franky_backend import FrankyBackend, FrankyConfig
from grounded_planner.execution.backends.lerobot_backend import LeRobotBackend, LeRobotConfig
from grounded_planner.execution.backends.moveit_backend import MoveItBackend, MoveItConfig
from grounded_planner.execution.config import BACKEND_NAMES, ConfigError, ExecutorConfig
from grounded_planner.sim.backend import SimBackend, SimBackendConfig


def make_backend(name: str, config: ExecutorConfig | None = None, **moveit_args) -> RobotBackend:
    """Create (not connect) backend ``name`` (``sim|franky|lerobot|moveit``) with ``config.backends[name]``
    settings and ``config.safety``. Raises :class:`ConfigError` for an unknown name or bad settings.

    ``moveit_args`` go to :class:`MoveItBackend` (``moveit_loader``, ``pose_stamped_type``, ``gripper_factory``,
    ``config_dict``): what a ROS install provides, passed in by the ROS layer (``ros/moveit.py``), since this
    layer imports no ROS module."""
    config = config or ExecutorConfig()
    opts = config.backend_options(name) if name in BACKEND_NAMES else {}
    if name == "franky":
        return FrankyBackend(options(FrankyConfig, opts, name), config.safety)
    if name == "lerobot":
        return LeRobotBackend(options(LeRobotConfig, opts, name), config.safety)
    if name == "moveit":
        return MoveItBackend(options(MoveItConfig, opts, name), config.safety, **moveit_args)
    if name == "sim":
        sim_opts = {"motion_timeout_s": config.safety.motion_timeout_s, **opts}
        try:
            return SimBackend(config=options(SimBackendConfig, sim_opts, name))
        except ValueError as exc:
            raise ConfigError(f"backends.sim: {exc}") from exc
    raise ConfigError(f"unknown backend {name!r}; expected one of {', '.join(BACKEND_NAMES)}")


__all__ = ["make_backend", "RobotBackend"]
