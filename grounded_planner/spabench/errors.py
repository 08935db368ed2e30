"""Spa-Bench's errors: bad benchmark input (names, config files, records) and scenes that cannot be generated."""

from __future__ import annotations

from grounded_planner.errors import InputError


class SpaBenchError(InputError):
    """Bad Spa-Bench input; the message is one line naming the file and field (or the task and seed).

    An :class:`~grounded_planner.errors.InputError` (hence a ``ValueError``): the CLI maps it to exit code 2.
    """


class TrialRecordError(SpaBenchError):
    """A trial record (a line of ``trials.jsonl`` or ``cards.jsonl``) that breaks the contract."""


class ConfigError(SpaBenchError):
    """``config/spabench/inventory.yaml`` or ``matrix.yaml`` is malformed or inconsistent."""


class GenerationError(SpaBenchError):
    """No scene for a task and seed could be drawn within the robot's reach in the bounded number of draws."""
