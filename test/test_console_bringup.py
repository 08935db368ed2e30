"""The console in a bringup runs in a process of its own beside the other nodes (so that its HTTP, JSON and camera
work never waits for, or holds up, the planner's under one GIL): it serves, it ends with the bringup's Ctrl-C and
when the bringup is killed, and a port that is taken ends the bringup with one line naming the address."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import requires_ros
from helpers.bringup import start_bringup, stop_bringup
from helpers.console_stack import CONSOLE_URL, Output

pytestmark = [requires_ros, pytest.mark.ros, pytest.mark.timeout(180)]


def children(pid: int) -> dict[int, str]:
    """The child processes of ``pid`` (Linux /proc) with their command lines."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                out[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except FileNotFoundError:  # ended in between
                pass
    return out


def gone(pid: int, timeout_s: float) -> bool:
    """True once ``pid`` no longer runs (a zombie left for a parent that died counts as ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def console_only(tmp_path: Path, **params) -> str:
    profile = tmp_path / "console.yaml"
    lines = "".join(f"    {k}: {v!r}\n" if isinstance(v, str) else f"    {k}: {v}\n" for k, v in params.items())
    profile.write_text(f"/**/console:\n  ros__parameters:\n{lines}")
    return str(profile)


def test_the_console_serves_from_a_process_of_its_own_that_ends_with_the_bringup(rclpy_context, tmp_path):
    import rclpy

    child = start_bringup(console_only(tmp_path, rollouts_dir=str(tmp_path / "rollouts")), {})
    output = Output(child)
    try:
        url = output.wait_for(CONSOLE_URL, 90).group(1)
        console_pid = int(output.wait_for(re.compile(r"bringup: console in a process of its own \(pid (\d+)\)"), 30)[1])
        assert "grounded_planner.ros.console_node" in children(child.pid)[console_pid]
        with urllib.request.urlopen(url + "api/state", timeout=10) as reply:
            assert reply.status == 200
        # one node called console on the graph: the process's node-name remap does not rename its plan client too
        probe = rclpy.create_node("console_probe", context=rclpy_context)
        try:
            deadline = time.monotonic() + 20
            while ("console_plan_client", "/") not in (names := probe.get_node_names_and_namespaces()):
                assert time.monotonic() < deadline, names
                time.sleep(0.2)
            assert names.count(("console", "/")) == 1, names
        finally:
            probe.destroy_node()
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        output.join()
    assert child.returncode == 0, output.text()[-3000:]
    assert gone(console_pid, 5), "the console outlived the bringup's Ctrl-C"
    assert "Traceback" not in output.text(), output.text()


def test_a_killed_bringup_leaves_no_console_behind(ros_domain, tmp_path):
    child = start_bringup(console_only(tmp_path, rollouts_dir=str(tmp_path / "rollouts")), {})
    output = Output(child)
    try:
        output.wait_for(CONSOLE_URL, 90)
        (console_pid,) = [pid for pid, cmd in children(child.pid).items() if "grounded_planner.ros.console_node" in cmd]
    finally:
        child.kill()
        child.wait(timeout=30)
    assert gone(console_pid, 10), "the console kept running after its bringup was killed"


def test_a_taken_port_ends_the_bringup_with_one_line_naming_the_address(ros_domain, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # console=False: the profile's own port, not the helper's free one
        profile = console_only(tmp_path, port=port, rollouts_dir=str(tmp_path / "rollouts"))
        child = start_bringup(profile, {}, console=False)
        try:
            out, _ = child.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            stop_bringup(child)
            raise
    assert child.returncode == 1, out[-3000:]
    assert f"cannot listen on 127.0.0.1:{port}" in out.strip().splitlines()[-1], out[-3000:]
    assert "Traceback" not in out, out
