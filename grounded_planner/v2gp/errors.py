"""Typed errors of the V2GP pipeline (each names the input and what was expected)."""

from __future__ import annotations
import importlib

from grounded_planner import errors
from grounded_planner.errors import InputError, RunFailure


class V2GPError(RunFailure):
    """Base of V2GP failures a user can act on (bad dataset, missing dependency, bad training data)."""


class DatasetError(V2GPError, InputError):
    """A demonstration dataset that cannot be read: missing files, unknown layout, missing column."""


class VideoUnavailableError(DatasetError):
    """An episode's video that is missing or cannot be decoded: that episode is skipped, the others go on."""


class MissingDependencyError(V2GPError, errors.MissingDependencyError):
    """An optional package a requested feature needs is not installed (names the pip extra)."""


class TrainingDataError(V2GPError, InputError):
    """A training JSONL line that is not a usable chat sample (names the file and line)."""


def require(module: str, extra: str, feature: str, install: str = ""):
    """Import ``module`` or raise :class:`MissingDependencyError` naming what to install (``install``, else
    the project's ``extra``)."""

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = install or f"'grounded_planner[{extra}]'"
        raise MissingDependencyError(
            f"{feature} needs the Python package '{module.split('.')[0]}' (pip install {hint}): {exc}"
        ) from exc
