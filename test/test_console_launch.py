"""`console:=true` on the launch files, as `ros2 launch` starts them (the real LaunchService where a ROS install has
it, else the launch_ros 0.28 test double of helpers/launch_double.py, as test_ros_launch_real.py does): console_node
comes up on the port given, serves its page and lists the rollouts of the launch's log_dir."""

from __future__ import annotations

import json
import os
import socket
import urllib.request

import pytest

from conftest import requires_ros
from helpers.console_stack import write_workcell
from test_ros_launch_real import LAUNCHERS, Launched, _share

pytestmark = [requires_ros, pytest.mark.ros, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("launch_file", ["replay.launch.py", "real.launch.py"])
def test_console_true_starts_the_console_on_the_launch_log_dir(
    launcher, launch_file, tmp_path, ros_domain, monkeypatch
):
    pytest.importorskip("aiohttp")
    share = _share(launcher, tmp_path, monkeypatch)
    cell = write_workcell(tmp_path)
    (tmp_path / "rollouts" / "20260101T000000_001").mkdir(parents=True)  # a rollout folder the logger left earlier
    (tmp_path / "rollouts" / "20260101T000000_001" / "rollout.json").write_text(
        json.dumps({"instruction": "put the red cube on the table", "task": "pick", "success": True})
    )
    port = free_port()
    args = ["console:=true", f"console_port:={port}", f"log_dir:={tmp_path / 'rollouts'}"]
    if launch_file == "replay.launch.py":
        args += [f"bag:={cell.bag}", f"extrinsics_file:={cell.extrinsics}", "planner_backend:=replay"]
    else:
        args += ["robot:=so101", "planner_backend:=replay"]
    (tmp_path / "plans.jsonl").write_text("")
    args.append(f"replay_file:={tmp_path / 'plans.jsonl'}")
    launched = Launched(launcher, os.path.join(share, "launch", launch_file), 120, args, tmp_path)
    try:
        launched.wait_for(f"console on http://127.0.0.1:{port}/", 90.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200 and b"grounded_planner" in page.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/rollouts", timeout=10) as reply:
            listing = json.load(reply)
    finally:
        out = launched.stop()
    assert "20260101T000000_001" in json.dumps(listing), listing  # the console reads the logger's log_dir
    console_lines = [line for line in out.splitlines() if "[console_node-" in line]
    assert console_lines and not any("Traceback" in line or "process has died" in line for line in console_lines), out[
        -3000:
    ]  # the console's own output (the other nodes of a launch without a robot have their own say)
