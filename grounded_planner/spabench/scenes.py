"""Scene generation for the six Spa-Bench tasks under every condition (seeded, within the robot's reach)."""

from __future__ import annotations

from grounded_planner.spabench.errors import GenerationError
from grounded_planner.spabench.trial import CONDITIONS, ROBOTS, TASK_CONDITIONS, TASKS, Trial, check_name


def generate_trial(task: str, condition: str, seed: int, robot: str = "so101") -> Trial:
    """One trial of ``task`` under ``condition`` drawn from ``seed`` for ``robot`` (``so101`` | ``gp5`` | ``fr3``).

    The same arguments give the same trial. Raises :class:`~grounded_planner.spabench.errors.SpaBenchError` for
    unknown names or a condition the task does not have (``TASK_CONDITIONS``), and
    :class:`~grounded_planner.spabench.errors.GenerationError` naming the task and seed when no scene fits the
    robot's reach in a bounded number of draws.
    """
    check_name(task, TASKS, "task")
    check_name(condition, CONDITIONS, "condition")
    check_name(robot, ROBOTS, "robot")
    if condition not in TASK_CONDITIONS[task]:
        raise GenerationError(f"task {task!r} has no condition {condition!r} (it has {', '.join(TASK_CONDITIONS[task])})")
    raise GenerationError(f"{task}/{condition}/{seed}: scene generation is not implemented yet")
