"""Reading the layer's YAML files (camera info, extrinsics, board specs) with typed errors naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grounded_planner.geometry.errors import GeometryError


def read_yaml(path: str | Path, what: str, error: type[GeometryError], **error_kwargs: Any) -> Any:
    """The parsed content of a YAML file; ``error`` (e.g. ExtrinsicsError) when unreadable or not YAML.

    ``what`` names the file's role in messages ("extrinsics file", "camera info file").
    """
    import yaml

    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}", **error_kwargs) from exc
    except yaml.YAMLError as exc:
        raise error(f"{what} {path} is not valid YAML: {exc}", **error_kwargs) from exc
