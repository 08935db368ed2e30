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
        raise error(f"{what} {path} is not valid YAML: {exc}", **error_kwargs) from exc
