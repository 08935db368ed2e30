"""The outcome every executed (or dry-run) step ends with, as a string enum that is its own JSON value."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """How one plan step ended; ``value`` is what the ``execute`` JSON prints.

    Anything but ``OK`` aborts the plan: the steps after it are not run.
    """

    OK = "ok"  # every motion of the step finished and its check (e.g. grasp width) passed
    OUTSIDE_WORKSPACE = "outside_workspace"  # a target (or a derived waypoint) lies outside the safety envelope
    UNREACHABLE = "unreachable"  # inside the envelope, but no IK solution / no motion plan
    GRASP_FAILED = "grasp_failed"  # the gripper closed on nothing (width after closing below the minimum)
    TIMEOUT = "timeout"  # a motion or gripper command did not finish within its time limit
    CANCELLED = "cancelled"  # the caller cancelled; the arm was stopped
    FAULT = "fault"  # the backend reported an error (controller reflex, lost connection, driver exception)

    def __str__(self) -> str:  # so f-strings and logs show "ok", not "Outcome.OK"
        return self.value

    @property
    def is_ok(self) -> bool:
        return self is Outcome.OK


OUTCOME_VALUES = tuple(o.value for o in Outcome)
