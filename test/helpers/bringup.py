"""`grounded-planner bringup` in a child process, as a user runs it: started with a profile and parameter overrides,
stopped with Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any, Mapping

import pytest

from conftest import REPO

# the CLI of this venv, handling errors as its console script does (test_cli_main checks that)
CLI = [sys.executable, "-m", "grounded_planner.cli.main"]


def start_bringup(config: str, overrides: Mapping[str, Any], console: bool = True) -> subprocess.Popen:
    """`grounded-planner bringup --config CONFIG --set NODE.PARAM=VALUE ...` from the repository root (the console on
    a free port unless ``console.port`` is given; ``console=False``: no console unless CONFIG has one); stdout and
    stderr in one text pipe (read it with :func:`stop_bringup`)."""
    if console:  # the profiles start the operator console on port 8080: tests take any free port, never meeting
        overrides = {"console.port": 0, **overrides}
    sets = [arg for name, value in overrides.items() for arg in ("--set", f"{name}={value}")]
    return subprocess.Popen(
        [*CLI, "bringup", "--config", config, *sets],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_running(child: subprocess.Popen, timeout_s: float = 60.0) -> str:
    """Read the bringup's output until its "running" line (every node configured and active) and return what it
    printed so far; :func:`stop_bringup` returns the rest. A node shows in the ROS graph before it is configured,
    and a Ctrl-C during configure ends the bringup quietly, as it should: a test that stops the bringup after
    seeing it in the graph alone may find nothing printed (seen in CI). Fails the test if the bringup exits or
    ``timeout_s`` passes first."""
    import os
    import select

    fd = child.stdout.fileno()
    printed = b""
    deadline = time.monotonic() + timeout_s
    while b" running" not in printed:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            child.communicate()
            pytest.fail(f"bringup did not say it was running within {timeout_s:g} s:\n{printed.decode()[-3000:]}")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:  # the bringup exited
                child.wait()
                pytest.fail(f"bringup exited ({child.returncode}) before it was running:\n{printed.decode()[-3000:]}")
            printed += chunk
    return printed.decode()


def stop_bringup(child: subprocess.Popen, timeout_s: float = 30.0, again_after_s: float | None = None) -> str:
    """Ctrl-C the bringup (or any child) and return all it printed; ``again_after_s``: a second SIGINT that long
    after the first, as ros2 launch forwards one after a terminal's Ctrl-C. One that does not stop within
    ``timeout_s`` is killed (never left behind for the next tests) and fails the test."""
    child.send_signal(signal.SIGINT)
    if again_after_s is not None:
        time.sleep(again_after_s)
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        pytest.fail(f"bringup did not stop within {timeout_s:g} s of Ctrl-C:\n{out[-3000:]}")
    return out


def start_replay_bringup(tmp_path, vlm_base_url: str) -> subprocess.Popen:
    """The replay profile on the tabletop scene (helpers.tabletop) as a bag in ``tmp_path``, its extrinsics, the
    planner asking the VLM server at ``vlm_base_url``, rollouts under ``tmp_path/rollouts``."""
    from grounded_planner.ros.bags import write_bag
    from helpers.tabletop import EXTRINSICS, scene_messages

    color, depth, info = scene_messages(stamp_s=1_700_000_000)  # stamped: the player moves stamps to playback time
    topics = (
        "/camera/camera/color/image_raw",
        "/camera/camera/aligned_depth_to_color/image_raw",
        "/camera/camera/color/camera_info",
    )
    bag = write_bag(
        tmp_path / "bag", [(t, i * 100_000_000, m) for i in range(3) for t, m in zip(topics, (color, depth, info))]
    )
    (tmp_path / "extrinsics.yaml").write_text(EXTRINSICS)
    return start_bringup(
        "config/replay.yaml",
        {
            "bag_player.bag": bag,
            "planner.base_url": vlm_base_url,
            "planner.model": "qwen3-vl-test",
            "planner.extrinsics_file": tmp_path / "extrinsics.yaml",
            "planner.timeout_s": 10,
            "rollout_logger.log_dir": tmp_path / "rollouts",
        },
    )
