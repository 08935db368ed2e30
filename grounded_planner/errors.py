"""The package's exception root: every error grounded_planner raises derives from :class:`GroundedPlannerError`.

Three kinds, each with its exit code on the command line (``cli/main.py`` maps them in one place):

- :class:`InputError` (exit 2): the input is wrong (a file, a value, a plan, a launch argument). Also a
  ``ValueError``, so code written against "bad input is a ValueError" keeps working.
- :class:`RunFailure` (exit 1): the input was fine, but something went wrong at run time (a camera that stopped,
  a VLM server that cannot be reached, a robot in error). Also a ``RuntimeError``.
- :class:`MissingDependencyError` (exit 1): an optional package a feature needs is not installed; the message says
  what to install. Also an ``ImportError``.

Anything else that reaches the command line is a bug: its traceback is saved to a file the message names.

Callers catch these classes (or a layer's subclass), never a bare builtin: ``except ValueError`` would also catch a
numpy bug and report it to the user as bad input.
"""

from __future__ import annotations


class GroundedPlannerError(Exception):
    """Root of every exception of the package.

    Attributes
    ----------
    rule : str
        Short machine-readable name of the broken rule or failed check (``grasp_then_place``, ``no_valid_depth``,
        ...). Subclasses that take ``rule=`` set it per instance; the class default names the kind of error.
    """

    rule: str = "error"


class InputError(GroundedPlannerError, ValueError):
    """Bad input: names the input and what was expected. Exit code 2 on the command line."""

    rule = "input"


class RunFailure(GroundedPlannerError, RuntimeError):
    """Something that went wrong at run time although the input was valid. Exit code 1 on the command line."""

    rule = "failure"


class MissingDependencyError(GroundedPlannerError, ImportError):
    """An optional package a requested feature needs is not installed; the message says what to install."""

    rule = "missing_dependency"
