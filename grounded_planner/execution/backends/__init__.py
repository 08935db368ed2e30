"""Robot backends by name: ``make_backend(name, config)`` imports only the SDK of the backend asked for."""

from __future__ import annotations

from grounded_planner.execution.backend import RobotBackend
from grounded_planner.execution.backends._common import options
from grounded_planner.execution.config import BACKEND_NAMES, ConfigError, ExecutorConfig


def make_backend(name: str, config: ExecutorConfig | None = None, **moveit_args) -> RobotBackend:
    """Create (not connect) backend ``name`` (``sim|franky|lerobot|moveit``) with ``config.backends[name]``
    settings and ``config.safety``. Raises :class:`ConfigError` for an unknown name or bad settings.

    ``moveit_args`` go to :class:`MoveItBackend` (``moveit_loader``, ``pose_stamped_type``, ``gripper_factory``,
    ``config_dict``): what a ROS install provides, passed in by the ROS layer (``ros/moveit.py``), since this
    layer imports no ROS module."""
    config = config or ExecutorConfig()
    opts = config.backend_options(name) if name in BACKEND_NAMES else {}
    if name == "franky":
        # lazy: the registry loads only the backend asked for (sim at top: import cycle via sim.robots)
        from grounded_planner.execution.backends.franky_backend import FrankyBackend, FrankyConfig

        return FrankyBackend(options(FrankyConfig, opts, name), config.safety)
    if name == "lerobot":
        # lazy: the registry loads only the backend asked for (sim at top: import cycle via sim.robots)
        from grounded_planner.execution.backends.lerobot_backend import LeRobotBackend, LeRobotConfig

        return LeRobotBackend(options(LeRobotConfig, opts, name), config.safety)
    if name == "moveit":
        # lazy: the registry loads only the backend asked for (sim at top: import cycle via sim.robots)
        from grounded_planner.execution.backends.moveit_backend import MoveItBackend, MoveItConfig

        return MoveItBackend(options(MoveItConfig, opts, name), config.safety, **moveit_args)
    if name == "sim":
        # lazy: the registry loads only the backend asked for (sim at top: import cycle via sim.robots)
        from grounded_planner.sim.backend import SimBackend, SimBackendConfig

        sim_opts = {"motion_timeout_s": config.safety.motion_timeout_s, **opts}
        try:
            return SimBackend(config=options(SimBackendConfig, sim_opts, name))
        except ValueError as exc:
            raise ConfigError(f"backends.sim: {exc}") from exc
    raise ConfigError(f"unknown backend {name!r}; expected one of {', '.join(BACKEND_NAMES)}")


__all__ = ["make_backend", "RobotBackend"]
