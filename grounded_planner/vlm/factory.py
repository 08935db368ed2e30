"""make_planner: the planner a PlannerConfig names (plain, replay or decoupled); its own module so that
``vlm.planner`` and ``vlm.decoupled`` (which builds on it) do not import each other."""

from __future__ import annotations

from grounded_planner.vlm.config import PlannerConfig
from grounded_planner.vlm.decoupled import make_decoupled_planner
from grounded_planner.vlm.planner import Planner, ReplayPlanner, make_backend


def make_planner(config: PlannerConfig) -> Planner:
    """Build the planner a config describes: ``openai``/``gemini``/``transformers``, ``replay`` or ``decoupled``."""
    if not isinstance(config, PlannerConfig):
        raise TypeError(f"make_planner needs a PlannerConfig, got {type(config).__name__}")
    if config.backend == "replay":
        return ReplayPlanner(config)
    if config.backend == "decoupled":
        return make_decoupled_planner(config)
    return Planner(config, make_backend(config))
