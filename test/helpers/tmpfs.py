"""A small tmpfs to fill, for full-disk tests: mounted in a user+mount namespace (`unshare -rm`), so no root is needed
where user namespaces are allowed; the test is skipped with the reason where they are not."""

from __future__ import annotations

import shutil
import subprocess
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
