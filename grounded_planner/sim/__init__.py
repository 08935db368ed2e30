"""Simulated MuJoCo workcell: scenario scenes, a D435-like RGB-D camera, the `sim` robot backend, success checks.

MuJoCo is imported lazily (inside the classes), so ``import grounded_planner.sim`` is cheap and works without it.
"""

import os

# Headless rendering: the GL backend must be chosen before MuJoCo is first imported anywhere in the process.
# EGL works on CPU-only machines with Mesa; set MUJOCO_GL=osmesa (with libosmesa6) where EGL is missing.
os.environ.setdefault("MUJOCO_GL", "egl")

from grounded_planner.sim.scenario import Scenario, ScenarioError, load_scenario  # noqa: E402


def __getattr__(name: str):
    # SimWorkcell / SimBackend pull in MuJoCo (and the execution layer): load them on first use only
    if name in ("SimWorkcell", "SimError"):
        # lazy: keeps 'import grounded_planner.sim' (scenario files) free of the MuJoCo modules
        from grounded_planner.sim import workcell

        return getattr(workcell, name)
    if name == "IKError":
        # lazy: keeps 'import grounded_planner.sim' (scenario files) free of the MuJoCo modules
        from grounded_planner.sim.robots import IKError

        return IKError
    if name in ("SimBackend", "SimBackendConfig"):
        # lazy: keeps 'import grounded_planner.sim' (scenario files) free of the MuJoCo modules
        from grounded_planner.sim import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'grounded_planner.sim' has no attribute {name!r}")


__all__ = ["Scenario", "ScenarioError", "load_scenario", "SimWorkcell", "SimError", "IKError", "SimBackend",
           "SimBackendConfig"]
