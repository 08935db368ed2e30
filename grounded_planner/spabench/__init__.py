"""Spa-Bench on our stack: the six spatial-grounding tasks of Spa-Bench (its Table I) under every condition of its
Table II, generated as simulator scenes, scored with Table I's success predicates, and written as trial records.

- :mod:`.trial`: the trial record of ``trials.jsonl`` / ``cards.jsonl`` and the benchmark's names;
- :func:`generate_trial` (:mod:`.scenes`): one seeded trial of a task and condition for a robot.
"""

from grounded_planner.spabench.errors import ConfigError, GenerationError, SpaBenchError, TrialRecordError
from grounded_planner.spabench.scenes import generate_trial
from grounded_planner.spabench.trial import (
    CONDITIONS,
    DIRECTIONS,
    FAILURE_MODES,
    ROBOTS,
    TASK_CONDITIONS,
    TASKS,
    MatrixCell,
    Trial,
    TrialObject,
    TrialRecord,
    TrialSpec,
)

__all__ = [
    "CONDITIONS",
    "DIRECTIONS",
    "FAILURE_MODES",
    "ROBOTS",
    "TASKS",
    "TASK_CONDITIONS",
    "ConfigError",
    "GenerationError",
    "MatrixCell",
    "SpaBenchError",
    "Trial",
    "TrialObject",
    "TrialRecord",
    "TrialRecordError",
    "TrialSpec",
    "generate_trial",
]
