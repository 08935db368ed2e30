"""A small tmpfs to fill, for full-disk tests: mounted in a user+mount namespace (`unshare -rm`), so no root is needed
where user namespaces are allowed; the test is skipped with the reason where they are not."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def require_tmpfs_mount(where: Path) -> None:
    """Skip the calling test, naming the reason, unless `unshare -rm` may mount a tmpfs at ``where``."""
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` here: cannot mount a small tmpfs to fill")
    probe = subprocess.run(
        ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"mounting a tmpfs in a user namespace is not permitted here: {probe.stderr.strip()}")


def run_in_namespace(script: str, where: Path, *args: str) -> tuple[dict, str]:
    """Run the Python ``script`` in a user+mount namespace of its own (where it may mount tmpfs under ``where``, its
    first argument; ``args`` follow), from the repository's root; the test is skipped with the reason where the mount
    is not permitted. (The JSON the script printed on its last line starting ``REPORT ``, its stderr.)"""
    require_tmpfs_mount(where)
    proc = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", script, str(where), *args],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    return json.loads(lines[-1][len("REPORT ") :]), proc.stderr
