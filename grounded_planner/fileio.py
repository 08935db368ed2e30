"""Atomic file writes: a crash (or a concurrent writer) leaves the old file or the new one, never half of one; and
the one append the JSONL logs share (trials.jsonl's three writers)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str, *, fsync: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder and a rename.

    The temporary name holds the process and thread, so concurrent writers of one path never share it.
    ``fsync``: force the bytes to disk before the rename (survives power loss, costs a disk flush).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any, *, indent: int | None = 2, fsync: bool = False) -> Path:
    """``data`` as JSON (non-ASCII kept, a final newline), written atomically."""
    text = json.dumps(data, indent=indent, ensure_ascii=False)
    return write_text_atomic(path, text + "\n" if indent is not None else text, fsync=fsync)


def write_jsonl_atomic(path: str | Path, records: list[Any]) -> Path:
    """One JSON object per line, written atomically."""
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def append_line(path: str | Path, line: str) -> int:
    """Append ``line`` and a newline to ``path`` (created if missing), flushed to disk; the bytes written. A file whose
    last line has no newline (an editor that strips it) gets one first, so the new line never runs into it. A write
    the file system cuts short (a full disk takes what fits, then refuses) raises its OSError with the file as it
    was: the part written is truncated away, so no half line is left for the next reader."""
    data = (line + "\n").encode("utf-8")
    with open(path, "a+b", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        if size > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        try:
            view = memoryview(data)
            while view:  # write(2) may take part of it: the rest follows, or the refusal comes
                view = view[f.write(view) :]
            os.fsync(f.fileno())
        except OSError as exc:
            f.truncate(size)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc  # a write's error names no file
    return len(data)
