"""`grounded-planner bringup` in a child process, as a user runs it: started with a profile and parameter overrides,
stopped with Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any, Mapping

import pytest

from conftest import REPO

# the CLI of this venv, handling errors as its console script does (test_cli_main checks that)
CLI = [sys.executable, "-m", "grounded_planner.cli.main"]


def start_bringup(config: str, overrides: Mapping[str, Any]) -> subprocess.Popen:
    """`grounded-planner bringup --config CONFIG --set NODE.PARAM=VALUE ...` from the repository root; stdout and
    stderr in one text pipe (read it with :func:`stop_bringup`)."""
    sets = [arg for name, value in overrides.items() for arg in ("--set", f"{name}={value}")]
    return subprocess.Popen([*CLI, "bringup", "--config", config, *sets], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def stop_bringup(child: subprocess.Popen, timeout_s: float = 30.0) -> str:
    """Ctrl-C the bringup and return all it printed. One that does not stop within ``timeout_s`` is killed (never
    left behind for the next tests) and fails the test."""
    child.send_signal(signal.SIGINT)
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        pytest.fail(f"bringup did not stop within {timeout_s:g} s of Ctrl-C:\n{out[-3000:]}")
    return out
