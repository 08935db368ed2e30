"""On-disk cache of raw model answers keyed by backend, model, prompt and image, so re-runs cost nothing."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from grounded_planner.errors import InputError
from grounded_planner.fileio import write_json_atomic

log = logging.getLogger(__name__)


def cache_key(**parts: Any) -> str:
    """Stable SHA-256 of the request's parts (backend, model, messages, image hash, sampling settings)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """One small JSON file per answer under ``root/ab/abcdef....json``; writes are atomic.

    A corrupt or unreadable entry counts as a miss (logged), never as an error: the cache only saves time.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            text = entry["response"]
            if not isinstance(text, str):
                raise InputError("response is not text")
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            self.misses += 1
            return None
        self.hits += 1
        return text

    def put(self, key: str, response: str, meta: dict[str, Any] | None = None) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # concurrent writers of one key (bench run --concurrency) never share a temp file
            write_json_atomic(path, {"response": response, "meta": meta or {}}, indent=None)
        except OSError as exc:
            log.warning("cannot write cache entry %s: %s", path, exc)
