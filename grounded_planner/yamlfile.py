"""Reading a project YAML file (configs, profiles, calibrations) with one typed error that names the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
import yaml


def read_yaml(path: str | Path, what: str, error: Callable[..., Exception], **error_kwargs: Any) -> Any:
    """The parsed content of the YAML file ``path``; raises ``error(message, **error_kwargs)`` when the file
    cannot be read or is not YAML.

    ``what`` names the file's role in messages ("extrinsics file", "executor config", "profile").
    """

    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}", **error_kwargs) from exc
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte offset {exc.start})", **error_kwargs) from exc
    except yaml.YAMLError as exc:
        raise error(yaml_error_line(path, what, exc), **error_kwargs) from exc


def yaml_error_line(path: str | Path, what: str, exc: yaml.YAMLError) -> str:
    """PyYAML's error (five lines of parser context) as one line naming ``file:line:column`` (1-based, as editors
    and compilers count) and the problem: ``profile.yaml:3:1: profile is not valid YAML: expected ',' or ']', but got
    '<stream end>' (while parsing a flow sequence started at 2:30)``."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        started = f" started at {context_mark.line + 1}:{context_mark.column + 1}" if context_mark is not None else ""
        problem = f"{problem} ({context}{started})"
    return " ".join(f"{where}: {what} is not valid YAML: {problem}".split())
