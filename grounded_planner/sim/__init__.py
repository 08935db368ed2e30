"""Simulated MuJoCo workcell: scenario scenes, a D435-like RGB-D camera, the `sim` robot backend, success checks.

MuJoCo itself is imported inside the classes that use it, so ``import grounded_planner.sim`` works without it.
"""

import os

# Headless rendering: the GL backend must be chosen before MuJoCo is first imported anywhere in the process.
# EGL works on CPU-only machines with Mesa; set MUJOCO_GL=osmesa (with libosmesa6) where EGL is missing.
os.environ.setdefault("MUJOCO_GL", "egl")

from grounded_planner.sim.backend import SimBackend, SimBackendConfig  # noqa: E402
from grounded_planner.sim.robots import IKError  # noqa: E402
from grounded_planner.sim.scenario import Scenario, ScenarioError, load_scenario  # noqa: E402
from grounded_planner.sim.workcell import SimError, SimWorkcell  # noqa: E402

__all__ = [
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "SimWorkcell",
    "SimError",
    "IKError",
    "SimBackend",
    "SimBackendConfig",
]
