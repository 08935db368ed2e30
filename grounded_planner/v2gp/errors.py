"""Typed errors of the V2GP pipeline (each names the input and what was expected)."""

from __future__ import annotations


class V2GPError(RuntimeError):
    """Base of V2GP failures a user can act on (bad dataset, missing dependency, bad training data)."""


class DatasetError(V2GPError, ValueError):
    """A demonstration dataset that cannot be read: missing files, unknown layout, missing column."""


class MissingDependencyError(V2GPError, ImportError):
    """An optional package a requested feature needs is not installed (names the pip extra)."""


class TrainingDataError(V2GPError, ValueError):
    """A training JSONL line that is not a usable chat sample (names the file and line)."""


def require(module: str, extra: str, feature: str):
    """Import ``module`` or raise :class:`MissingDependencyError` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the Python package '{module.split('.')[0]}' "
            f"(pip install 'grounded_planner[{extra}]'): {exc}") from exc
