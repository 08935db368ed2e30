"""A Python child that says "ready" and is then killed with a real SIGKILL (crash tests of recorders)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kill_when_ready(code: str, *args: str, timeout_s: float = 60.0) -> None:
    """Run ``python -c code args...``; once it prints ``ready``, SIGKILL it and wait for it to be gone."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=timeout_s) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
