"""The `grounded-planner` console script is installed and answers --help/--version."""

import subprocess
import sys
from pathlib import Path

import grounded_planner


def test_console_script_prints_version():
    exe = Path(sys.executable).with_name("grounded-planner")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert grounded_planner.__version__ in out.stdout


def test_no_command_prints_help_and_fails():
    out = subprocess.run([sys.executable, "-m", "grounded_planner.cli.main"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "usage: grounded-planner" in out.stdout
