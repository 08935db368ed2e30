"""VLM backends, prompts per model family, and parsing of raw model text into plans.

Entry points (see docs/python_api.md): ``parse_plan`` / ``ParseError`` (vlm.parse), ``PlannerConfig``
(vlm.config), ``make_planner`` (vlm.factory), ``Planner`` (vlm.planner), errors in vlm.errors. Submodules are imported
lazily so ``import grounded_planner.vlm`` stays cheap.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "parse_plan": "grounded_planner.vlm.parse",
    "ParseError": "grounded_planner.vlm.parse",
    "render_plan": "grounded_planner.vlm.conventions",
    "PlannerConfig": "grounded_planner.vlm.config",
    "make_planner": "grounded_planner.vlm.factory",
    "Planner": "grounded_planner.vlm.planner",
    "VLMError": "grounded_planner.vlm.errors",
    "VLMUnavailableError": "grounded_planner.vlm.errors",
    "VLMResponseError": "grounded_planner.vlm.errors",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - a list; the names load lazily through __getattr__


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'grounded_planner.vlm' has no attribute {name!r}")
