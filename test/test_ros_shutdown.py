"""Ctrl-C while a node is busy: a node ends without a traceback, every time, and within a bound."""

from __future__ import annotations

import pytest

from conftest import requires_ros, spawn_python
from helpers.ros_wait import spin_until, stop_process

pytestmark = [requires_ros, pytest.mark.ros]
COLOR = "/camera/camera/color/image_raw"


def test_bag_player_ends_quietly_on_ctrl_c_mid_playback(tmp_path, rclpy_context):
    """Seen before: about 1 Ctrl-C in 6 printed "publisher's context is invalid" from the playback thread."""
    import numpy as np
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image

    from grounded_planner.ros.bags import write_bag
    from grounded_planner.ros.convert import numpy_to_image

    frame = numpy_to_image(np.zeros((120, 160, 3), np.uint8), "rgb8")
    bag = write_bag(tmp_path / "bag", [(COLOR, i * 1_000_000, frame) for i in range(50)])  # 1 kHz recorded
    node = rclpy.create_node("shutdown_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    got: list = []
    node.create_subscription(Image, COLOR, got.append, QoSProfile(depth=10))
    outputs = []
    try:
        for _ in range(6):
            got.clear()
            child = spawn_python(
                ["-m", "grounded_planner.ros.bag_player_node", "--ros-args", "-p", f"bag:={bag}", "-p", "loop:=true"]
            )
            try:
                spin_until(executor, lambda: len(got) >= 20, 30.0, "the player to be publishing")
            finally:
                outputs.append(stop_process(child))  # SIGINT, like Ctrl-C, while the playback thread publishes
    finally:
        node.destroy_node()
    for out in outputs:
        assert "Traceback" not in out and "context is invalid" not in out, out


def test_a_callback_that_never_returns_does_not_hold_the_shutdown(rclpy_context):
    """rclpy's MultiThreadedExecutor.shutdown joins its worker threads with no limit (its timeout_sec does not
    bound that): shutdown_executor (run_node, bringup) waits for a running callback only as long as it is told to."""
    import threading
    import time

    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from grounded_planner.ros.shutdown import shutdown_executor

    node = rclpy.create_node("stuck_callback_probe", context=rclpy_context)
    started, release = threading.Event(), threading.Event()

    def stuck() -> None:
        started.set()
        release.wait(60.0)

    timer = node.create_timer(0.01, stuck)
    executor = MultiThreadedExecutor(num_threads=2, context=rclpy_context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 10.0
        while not started.is_set() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert started.is_set(), "the timer callback never ran"
        timer.cancel()
        t0 = time.monotonic()
        stuck_threads = shutdown_executor(executor, 0.5)
        waited = time.monotonic() - t0
        assert len(stuck_threads) == 1, stuck_threads
        assert waited < 5.0  # bounded by its 0.5 s, not by the callback's 60 s
    finally:
        release.set()
        node.destroy_node()


def test_sigint_stops_a_node_started_with_sigint_ignored(ros_domain, tmp_path):
    """A background job of a non-interactive shell (`bringup ... &` in a script, CI) starts with SIGINT ignored;
    rclpy kept it ignored, so Ctrl-C / `kill -INT` / ros2 launch's SIGINT never stopped bringup or a node."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    profile = tmp_path / "one_node.yaml"
    profile.write_text("backprojection:\n  ros__parameters:\n    depth_registered: false\n")

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    for command in (
        ["-m", "grounded_planner.ros.backprojection_node"],
        ["-m", "grounded_planner.cli.main", "bringup", "--config", str(profile)],
    ):
        child = subprocess.Popen(
            [sys.executable, *command],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=ignore_sigint,
        )
        try:
            time.sleep(3.0)  # up and spinning
            assert child.poll() is None, child.communicate()[0]
            child.send_signal(signal.SIGINT)
            out, _ = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        assert child.returncode == 0, (command, out)
        assert "Traceback" not in out, out


def test_ctrl_c_ends_the_planner_node_while_a_vlm_request_hangs(rclpy_context):
    """A VLM server that takes the connection and never answers holds a plan request until the planner's
    timeout_s (120 s here). Ctrl-C used to wait for it: the executor joined its worker threads with no limit, and
    the process went on for as long as the request did. It now ends within CALLBACK_WAIT_S, naming the callback
    it left behind."""
    import signal
    import socket
    import threading
    import time

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.convert import numpy_to_image
    from grounded_planner.ros.shutdown import CALLBACK_WAIT_S
    from grounded_planner_interfaces.srv import GetGroundedPlan
    from helpers.ros_wait import reach

    import numpy as np

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted: list = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    child = spawn_python(
        [
            "-m",
            "grounded_planner.ros.planner_node",
            "--ros-args",
            "-p",
            "backend:=openai",
            "-p",
            f"base_url:=http://127.0.0.1:{server.getsockname()[1]}/v1",
            "-p",
            "model:=m",
            "-p",
            "timeout_s:=120.0",
            "-p",
            "max_retries:=0",
        ]
    )
    node = rclpy.create_node("hung_vlm_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        client = node.create_client(GetGroundedPlan, "/grounded_planner/plan")
        assert client.wait_for_service(timeout_sec=30.0), "planner_node never served /grounded_planner/plan"
        reach(executor, node, "/grounded_planner/plan", 30.0)
        request = GetGroundedPlan.Request(instruction="pick up the cube", backproject=False)
        request.image = numpy_to_image(np.zeros((48, 64, 3), np.uint8), "rgb8")
        client.call_async(request)
        spin_until(executor, lambda: bool(accepted), 30.0, "the plan request to reach the hung server")
        time.sleep(0.5)  # the handler is now waiting for the answer
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        out = child.communicate(timeout=CALLBACK_WAIT_S + 30.0)[0]
        took = time.monotonic() - started
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        node.destroy_node()
        server.close()
    assert child.returncode == 0, out
    assert took < CALLBACK_WAIT_S + 10.0, f"Ctrl-C took {took:.1f} s with a VLM request in flight"
    assert "left behind" in out and "Traceback" not in out, out


def test_a_shutdown_stuck_in_a_c_call_that_holds_the_gil_still_ends_within_the_bound():
    """exit_watchdog's Python timer cannot run while a C library call hangs with the GIL held (no Python thread
    can); faulthandler's backstop, a C thread, still ends the process with exit 1 and every thread's stack.
    A CI run saw a camera node live on for 40 s after Ctrl-C with no word: nothing bounded it then."""
    import time

    from grounded_planner.ros.shutdown import BACKSTOP_S

    code = (
        "import ctypes\n"
        "from grounded_planner.ros.shutdown import exit_watchdog\n"
        "exit_watchdog(0.5, 'probe')\n"
        "print('stuck', flush=True)\n"
        "ctypes.PyDLL(None).sleep(60)\n"  # libc sleep through PyDLL: the GIL stays held, as a hung SDK call holds it
        "print('not stopped', flush=True)\n"
    )
    started = time.monotonic()
    child = spawn_python(["-c", code])
    try:
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 1, out
    assert time.monotonic() - started < 0.5 + BACKSTOP_S + 10, out
    assert "stuck" in out and "not stopped" not in out
    assert "Timeout" in out and "most recent call first" in out, out  # faulthandler's dump: where it hung


def test_a_cancelled_exit_watchdog_lets_the_process_live_on():
    code = (
        "import time\n"
        "from grounded_planner.ros.shutdown import exit_watchdog\n"
        "exit_watchdog(0.3, 'probe').cancel()\n"
        "time.sleep(3.0)\n"  # past the Python timer and faulthandler's backstop
        "print('lived on', flush=True)\n"
    )
    child = spawn_python(["-c", code])
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 0 and "lived on" in out, out


def _spawn_until_spinning(code: str):
    """A child running ``code``, once it has printed ``spinning``."""
    child = spawn_python(["-c", code])
    early = []
    while (line := child.stdout.readline()) and line.strip() != "spinning":
        early.append(line)
    if not line:
        child.kill()
        child.communicate()
    assert line, "".join(early)
    return child


def _output_once_ended(child, timeout_s: float) -> str:
    """All the child printed, once it ended; one still running after ``timeout_s`` is killed (never left behind)."""
    try:
        return child.communicate(timeout=timeout_s)[0]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def test_ctrl_c_ends_a_node_whose_interpreter_exit_hangs_and_says_where():
    """The node shut down cleanly, but the interpreter's exit waits on a thread that does not end (a device SDK's
    thread, a finalizer): the process still ends, EXIT_LIMIT_S later (1 s here), with exit 1 and every thread's
    stack. A camera node in CI lived on for 40 s after Ctrl-C, printing nothing: the watchdog had been cancelled
    once the nodes were down, so nothing bounded the exit."""
    import signal
    import time

    code = (
        "import threading, time\n"
        "import rclpy\n"
        "from grounded_planner.ros import shutdown\n"
        "from grounded_planner.ros.node_main import run_node\n"
        "shutdown.EXIT_LIMIT_S = 1.0\n"
        "def make_node():\n"
        "    threading.Thread(target=time.sleep, args=(120,), name='never_ends').start()\n"
        "    node = rclpy.create_node('exit_probe')\n"
        "    node.create_timer(0.2, lambda: print('spinning', flush=True))\n"
        "    return node\n"
        "run_node(make_node, 'exit_probe')\n"
        "print('run_node returned', flush=True)\n"
    )
    child = _spawn_until_spinning(code)
    child.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out = _output_once_ended(child, 60)
    took = time.monotonic() - sent
    assert child.returncode == 1, out
    assert "run_node returned" in out and "Timeout" in out and "most recent call first" in out, out
    assert took < 1.0 + 10.0, f"the exit took {took:.1f} s"


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_ctrl_c_ends_a_spin_whose_executor_woke_before_rclpy_shut_the_context_down(ros_domain, signame):
    """rclpy's signal thread wakes the executors first and shuts the contexts down after: an executor that woke in
    between found its context still up and waited again, for ever (a console node under ros2 launch in CI: killed
    10 s after SIGINT, its main thread in rcl_wait with no timeout). Here the child plays that thread's part with
    the pause between its two steps made long (300 ms): test double of rclpy 9.1's deferred signal handler
    (signal_handler.cpp: ``trigger_guard_conditions(); rclpy::shutdown_contexts();``, for SIGINT and SIGTERM alike),
    told of the signal through Python's wakeup fd as rclpy's is through a semaphore; rclpy's own handlers are
    uninstalled so that the timing is the test's. The node has nothing that would wake its executor by itself (no
    timer after the first). SIGTERM (docker stop, systemd) ends the node as Ctrl-C does: before, run_node left it to
    rclpy's handler alone, with the same race."""
    import signal
    import time

    code = (
        "import os, signal, threading, time\n"
        "import rclpy\n"
        "from grounded_planner.ros import node_main\n"
        "executors = []\n"
        "class Recorded(node_main.SingleThreadedExecutor):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        "        executors.append(self)\n"
        "node_main.SingleThreadedExecutor = Recorded\n"
        "told, tell = os.pipe()\n"
        "os.set_blocking(tell, False)\n"
        "def rclpy_signal_thread():\n"
        "    os.read(told, 1)\n"
        "    executors[0]._sigint_gc.trigger()  # trigger_guard_conditions()\n"
        "    time.sleep(0.3)  # a loaded machine: the thread waits for a CPU\n"
        "    rclpy.get_default_context().handle.shutdown()  # rclpy::shutdown_contexts(): rcl_shutdown only\n"
        "def make_node():\n"
        "    rclpy.signals.uninstall_signal_handlers()\n"
        "    signal.set_wakeup_fd(tell)\n"
        "    threading.Thread(target=rclpy_signal_thread, daemon=True).start()\n"
        "    node = rclpy.create_node('race_probe')\n"
        "    def once():\n"
        "        first.cancel()\n"
        "        print('spinning', flush=True)\n"
        "    first = node.create_timer(0.1, once)\n"
        "    return node\n"
        "node_main.run_node(make_node, 'race_probe')\n"
        "print('run_node returned', flush=True)\n"
    )
    child = _spawn_until_spinning(code)  # it spins, with nothing left to wake it
    try:
        time.sleep(0.2)
        child.send_signal(getattr(signal, signame))
        sent = time.monotonic()
        out, _ = child.communicate(timeout=20)
    except Exception:
        child.kill()
        out, _ = child.communicate()
        pytest.fail(f"the node did not end within 20 s of {signame}:\n{out}")
    took = time.monotonic() - sent
    assert child.returncode == 0 and "run_node returned" in out, out
    assert took < 5.0, f"the node took {took:.1f} s to end"


def test_a_sigterm_during_a_stuck_shutdown_prints_where_and_ends_the_node():
    """ros2 launch follows its SIGINT with SIGTERM after 5 s and SIGKILL 5 s later. A node whose shutdown hangs (here
    its destroy_node) now answers the SIGTERM with every thread's stack and ends as SIGTERM ends a process; before,
    rclpy's handler took it and did nothing, and launch's SIGKILL ended the node without a word about where."""
    import signal
    import time

    code = (
        "import time\n"
        "import rclpy\n"
        "from rclpy.node import Node\n"
        "from grounded_planner.ros.node_main import run_node\n"
        "class Stuck(Node):\n"
        "    def __init__(self):\n"
        "        super().__init__('stuck_probe')\n"
        "        self.create_timer(0.2, lambda: print('spinning', flush=True))\n"
        "    def destroy_node(self):\n"
        "        print('destroying', flush=True)\n"
        "        time.sleep(60)\n"
        "        return super().destroy_node()\n"
        "run_node(Stuck, 'stuck_probe')\n"
    )
    child = _spawn_until_spinning(code)
    child.send_signal(signal.SIGINT)
    while (line := child.stdout.readline()) and line.strip() != "destroying":
        pass
    child.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    out = _output_once_ended(child, 30)
    assert line, "the node never began to shut down"
    took = time.monotonic() - sent
    assert child.returncode == -signal.SIGTERM, out
    assert "most recent call first" in out and "in destroy_node" in out, out  # where it was stuck
    assert took < 5.0, f"the node took {took:.1f} s to end after SIGTERM"
