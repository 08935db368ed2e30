"""Start `franky-sim -s mujoco` (the libfranka protocol on a loopback address) for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

READY = re.compile(r"using '([^']+)' as the robot IP")


def franky_sim_executable() -> str | None:
    here = Path(sys.executable).parent / "franky-sim"
    return str(here) if here.exists() else shutil.which("franky-sim")


def _launch(cmd: list[str], timeout_s: float) -> tuple[subprocess.Popen, str | None]:
    """Start a franky-sim command; (its process, None) once it serves, or (the process, killed; its output's tail)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if READY.search(line):
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not ready.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
        pass
    if ready.is_set():
        return proc, None
    proc.kill()
    proc.wait(5)
    return proc, "".join(lines)[-2000:]


def start_franky_sim(host: str, timeout_s: float = 60.0) -> subprocess.Popen:
    """`franky-sim -s mujoco --hostname HOST` as a process, once it serves (a robot that comes back at the same
    address after it was killed); RuntimeError with its output when it does not come up."""
    proc, failed = _launch([franky_sim_executable() or "franky-sim", "-s", "mujoco", "--hostname", host], timeout_s)
    if failed is not None:
        raise RuntimeError(f"franky-sim did not come up on {host}: {failed}")
    return proc


@contextlib.contextmanager
def franky_sim_server(
    timeout_s: float = 60.0,
    cubes: list[tuple[float, float, float, float]] | None = None,
    state_path: str | None = None,
    processes: list | None = None,
    franky_sim_hand: bool = False,
) -> Iterator[str]:
    """Run a franky-sim server on a random 127.0.0.x (libfranka's ports are fixed, so each server needs its own
    address) and yield that address; the server is terminated on exit.

    Without ``cubes`` this is the plain `franky-sim -s mujoco` command; with them, :mod:`franky_sim_scene`
    (the same server plus free cubes whose centres it keeps writing to ``state_path``, and a Franka Hand that grasps
    as the real one does, or as franky-sim's own does with ``franky_sim_hand``). ``processes``, when
    given, receives the server's Popen (tests that kill the server mid-motion).
    """
    exe = franky_sim_executable()
    if exe is None:
        raise RuntimeError("franky-sim is not installed (pip install 'grounded_planner[execution]')")
    last_output = ""
    for _attempt in range(3):
        host = f"127.0.0.{random.randint(2, 250)}"
        if cubes:
            scene = str(Path(__file__).with_name("franky_sim_scene.py"))
            hand = ["--franky-sim-hand"] if franky_sim_hand else []
            cmd = [sys.executable, scene, *hand, host, str(state_path)] + [str(v) for cube in cubes for v in cube]
        else:
            cmd = [exe, "-s", "mujoco", "--hostname", host]
        proc, failed = _launch(cmd, timeout_s)
        if failed is None:
            if processes is not None:
                processes.append(proc)
            try:
                yield host
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            return
        last_output = failed
    raise RuntimeError(f"franky-sim did not come up: {last_output}")
