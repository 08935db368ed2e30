"""The ROS-install path: `colcon build` of both packages (named by path, as the README says) works, and the
installed workspace imports the interfaces and offers every console script to `ros2 run`."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, requires_ros

pytestmark = [requires_ros, pytest.mark.slow]

COPY_IGNORE = shutil.ignore_patterns(".venv", "build", "install", "log", ".git", "__pycache__", "*.egg-info", "out")


def console_scripts() -> list[str]:
    text = (REPO / "setup.py").read_text()
    block = text[text.index('"console_scripts"') :]
    block = block[: block.index("]")]
    return re.findall(r'"\s*([\w.-]+)\s*=', block)


def test_colcon_builds_both_packages(tmp_path):
    colcon = Path(sys.executable).with_name("colcon")
    if not colcon.exists():
        pytest.skip("colcon not installed in this venv (the `test` extra installs it)")
    src = tmp_path / "src" / "grounded_planner"
    shutil.copytree(REPO, src, ignore=COPY_IGNORE)
    venv = Path(sys.prefix)
    env = dict(
        os.environ,
        AMENT_PREFIX_PATH=str(venv),
        CMAKE_PREFIX_PATH=str(venv),
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
    )
    build = subprocess.run(
        [
            str(colcon),
            "build",
            "--base-paths",
            str(src),
            str(src / "grounded_planner_interfaces"),
            "--cmake-args",
            "-DBUILD_TESTING=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert "2 packages finished" in build.stdout

    check = subprocess.run(
        [
            "bash",
            "-c",
            "source install/setup.bash && cd / && python -c "
            "'import grounded_planner, grounded_planner_interfaces.srv, grounded_planner_interfaces.action; "
            "print(grounded_planner.__file__)'",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    assert str(tmp_path / "install" / "grounded_planner") in check.stdout

    scripts = tmp_path / "install" / "grounded_planner" / "lib" / "grounded_planner"
    missing = [name for name in console_scripts() if not (scripts / name).exists()]
    assert not missing, f"`ros2 run grounded_planner` would not find: {missing}"
    share = tmp_path / "install" / "grounded_planner" / "share" / "grounded_planner"
    assert (share / "package.xml").exists()
    assert (
        tmp_path
        / "install"
        / "grounded_planner_interfaces"
        / "share"
        / "grounded_planner_interfaces"
        / "msg"
        / "GroundedPlan.msg"
    ).exists()
