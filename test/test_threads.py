"""Threads named for the operating system: what `top -H`, py-spy and bench_console.py's per-thread CPU read."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import httpx
import pytest

from grounded_planner.console.app import ConsoleApp
from grounded_planner.console.server import ConsoleServer
from grounded_planner.threads import name_native_thread
from helpers.console_stack import InstantGraph

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="task names in /proc are Linux's")


def task_names() -> dict[int, str]:
    tasks = Path(f"/proc/{os.getpid()}/task")
    names = {}
    for task in tasks.iterdir():
        try:
            names[int(task.name)] = (task / "comm").read_text().strip()
        except OSError:  # a thread that ended meanwhile
            pass
    return names


def named_in(name) -> str:
    """The kernel's name of a thread that named itself ``name`` (None: its Python name)."""
    seen = {}

    def run() -> None:
        name_native_thread(name)
        seen["comm"] = task_names()[threading.get_native_id()]

    thread = threading.Thread(target=run, name="py-name-of-the-thread")
    thread.start()
    thread.join()
    return seen["comm"]


def test_a_thread_names_itself_for_the_kernel_cut_to_fifteen_bytes():
    assert named_in("console-frames") == "console-frames"
    assert named_in(None) == "py-name-of-the-"  # its Python name, as much as the kernel keeps
    # the caller's own name is untouched
    assert task_names()[threading.get_native_id()] != "py-name-of-the-"


def test_the_consoles_threads_show_their_names_to_the_system(tmp_path):
    """The console's web server, frame and worker threads (each pool's), each under its own name in /proc (they all
    showed as "python", so the benchmark's CPU by thread could not say which of them took it)."""
    before = set(task_names())  # by thread id: an earlier test's console may have left threads of the same names
    server = ConsoleServer(ConsoleApp(InstantGraph(), rollouts_dir=tmp_path, note=lambda _: None), "127.0.0.1", 0)
    server.start()
    try:
        response = httpx.post(server.url + "api/plan", json={"instruction": "pick the cube"}, timeout=10.0)
        assert response.status_code == 200, response.text  # answered from a plan worker
        plan_id = response.json()["plan"]["id"]
        response = httpx.post(server.url + "api/decision", json={"plan_id": plan_id, "approve": False}, timeout=10.0)
        assert response.status_code == 200, response.text  # carried out by a decision worker
        response = httpx.get(server.url + "api/rollouts", timeout=10.0)
        assert response.status_code == 200, response.text  # listed from a general worker
        names = {name for tid, name in task_names().items() if tid not in before}
    finally:
        server.stop()
    assert {"console-http", "console-frames"} <= names, names
    assert any(name.startswith("console-plan_") for name in names), names  # the plan requests' own pool
    assert any(name.startswith("console-decide_") for name in names), names  # Approve/Reject's own pool
    assert any(name.startswith("console_") for name in names), names  # the pool for everything else
