"""Node processes keep freed image buffers instead of faulting every frame's pages in again (ros/malloc.py).

Each case runs in a child process: malloc thresholds are per process and cannot be undone. A "frame" allocates,
fills and frees two 1280x720 rgb8 buffers, as a subscriber's deserialisation does; the kernel's count of minor
page faults says whether the memory was handed back and faulted in again.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

FRAMES = r"""
import resource
import numpy as np
N = 1280 * 720 * 3
def faults_per_frame():
    def frames(n):
        for _ in range(n):
            a = np.empty(N, np.uint8); a.fill(1)
            b = np.empty(N, np.uint8); b[:] = a
            del a, b
    frames(5)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    frames(40)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40
"""

PAGES_PER_FRAME = 2 * 1280 * 720 * 3 // 4096  # 1350: every page of both buffers faulted in again


def _run(body: str, env: dict | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", FRAMES + body], env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _faults(stdout: str) -> float:
    return float(stdout.strip().splitlines()[-1])


def test_glibc_defaults_fault_every_frame_in_again():
    """The problem the thresholds solve, on this machine: without them each frame's pages fault in again."""
    assert _faults(_run("print(faults_per_frame())")) > PAGES_PER_FRAME / 2


def test_keep_image_buffers_stops_the_faults():
    out = _run(
        "from grounded_planner.ros.malloc import keep_image_buffers\n"
        "print(keep_image_buffers())\nprint(faults_per_frame())"
    )
    assert "mmap 32 MiB, trim 128 MiB" in out
    assert _faults(out) < 20


def test_a_node_started_by_run_node_keeps_image_buffers(ros_domain):
    """run_node (every node's main) sets the thresholds before rclpy starts; measured from inside make_node."""
    out = _run(
        "from grounded_planner.ros.node_main import run_node\n"
        "def make_node():\n"
        "    print(faults_per_frame(), flush=True)\n"
        "    raise KeyboardInterrupt  # measured: end the process as Ctrl-C would\n"
        "run_node(make_node, 'memory_probe')\n"
    )
    assert _faults(out) < 20


def test_a_users_own_malloc_settings_win():
    """MALLOC_TRIM_THRESHOLD_ set by the user: the process keeps it (here the glibc default value, so faults)."""
    out = _run(
        "from grounded_planner.ros.malloc import keep_image_buffers\n"
        "print(keep_image_buffers())\nprint(faults_per_frame())",
        env={"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_MMAP_THRESHOLD_": "131072"},
    )
    assert "left as the environment sets them" in out
    assert _faults(out) > PAGES_PER_FRAME / 2
