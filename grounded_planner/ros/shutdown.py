"""Ending a node process on Ctrl-C within a bound, whatever its callbacks are doing (a stop must always work).

Shared by ``run_node`` (one node per process) and ``bringup`` (every node in one process). Pure Python: bringup's
module is imported by the CLI where rclpy may be absent.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

# How long Ctrl-C waits for callbacks that are still running, and how long the whole shutdown may take before the
# process prints every thread's stack and leaves anyway, seconds.
# (below ros2 launch's sigterm_timeout, 5 s: its SIGTERM must not land in this wait, see dump_on_sigterm)
CALLBACK_WAIT_S = 3.0
SHUTDOWN_LIMIT_S = 20.0
# faulthandler's own watchdog (a C thread, which needs neither the GIL nor a Python lock) ends the process this long
# after SHUTDOWN_LIMIT_S when exit_watchdog's Python timer could not run: a call into a C library that hangs while
# holding the GIL stops every Python thread, the timer's too
BACKSTOP_S = 2.0
# Once a process's nodes are shut down, how long the interpreter's own exit may take (joining threads that are not
# daemons, atexit, the finalizers of device SDKs) before faulthandler prints every thread's stack and ends it
EXIT_LIMIT_S = 10.0
# How long a SIGINT handler waits for rclpy's signal thread to shut the context down (wake_once_shut_down), s: a
# millisecond or two, longer on a loaded machine where that thread waits for a CPU
SIGNAL_SHUTDOWN_WAIT_S = 2.0


_SPINNING: list = []  # [on_sigint] while rclpy spins this process's nodes (see spinning())
_HELD: list = []  # [name] while a startup step that must not be cut short runs (see sigint_held()); +[True] once one came


def _first_sigint(signum, frame) -> None:
    """The first SIGINT (or SIGTERM): every later SIGINT is ignored from here on. While rclpy spins, the spin is told
    to end by ``on_sigint`` (a node of the default context: :func:`wake_once_shut_down`; a bringup's private
    context, which rclpy's handler leaves running: a flag), and the executor stops once the running callback
    returns: raising here would cut that callback short (a rollout half-opened, never closed). Before spinning
    (starting up), the process stops as Python's default handler stops it (KeyboardInterrupt)."""
    ignore_sigint()
    if _HELD:
        if len(_HELD) == 1:
            _HELD.append(True)
            # a step that hangs (a robot that never answers) still ends. No thread is started here: a signal handler
            # runs between two bytecodes of the main thread, which may hold threading's own locks (inside a
            # Thread.start() of the node's activate), and a Timer started here could wait on them for ever
            _arm_backstop(SHUTDOWN_LIMIT_S + BACKSTOP_S)
        return
    if not _SPINNING:
        raise KeyboardInterrupt
    if _SPINNING[0] is not None:
        _SPINNING[0]()


@contextmanager
def sigint_held(name: str) -> Iterator[None]:
    """Hold a Ctrl-C that comes during this block (a lifecycle node's configure and activate) until the block ends,
    then stop the process as an earlier one would have (KeyboardInterrupt).

    A KeyboardInterrupt raised into configure lands wherever the code is: inside an SDK's import or a ctypes call,
    where libraries fold it into an error of their own (MuJoCo's import then failed with "needs MuJoCo", a ctypes
    call with "argument 1: KeyboardInterrupt"); the node reported a failed configure and exited 1 on a plain Ctrl-C.
    The step is bounded: once a SIGINT is held, the process ends within SHUTDOWN_LIMIT_S whatever the step does
    (:func:`exit_watchdog`), and ``ros2 launch`` follows its SIGINT with SIGTERM after its sigterm_timeout."""
    _HELD[:] = [name]
    try:
        yield
    finally:
        came = len(_HELD) > 1
        _HELD.clear()
    if came:
        raise KeyboardInterrupt


def wake_once_shut_down(ok: Callable[[], bool], wake: Callable[[], None], limit_s: float | None = None) -> None:
    """``on_sigint`` for an executor that spins the default context with no timeout (:func:`spinning`): wait until
    ``ok()`` turns false (the context is shut down), at most ``limit_s`` (:data:`SIGNAL_SHUTDOWN_WAIT_S` when None),
    then ``wake()`` the executor.

    rclpy's handler does not end such a spin by itself. It hands the signal to a thread of its own, which first wakes
    the executors (their SIGINT guard conditions) and then shuts the contexts down (``trigger_guard_conditions();
    rclpy::shutdown_contexts();`` in rclpy 9's signal_handler.cpp); and Python's handler, this module's, does not
    raise while a spin runs. An executor that woke between the two steps found its context still up and waited
    again, with nothing left to wake it: a console node under ros2 launch lived on after SIGINT until launch killed
    it (CI, 2026-12-03; the main thread in rcl_wait with no timeout, every other thread idle). This handler runs on
    the main thread after rclpy's handler has passed the signal on, so the shutdown is under way: waiting for it
    here, then waking the executor, makes it find the context down. Bounded, for a context that no one shuts down
    (rclpy's handlers uninstalled)."""
    deadline = time.monotonic() + (SIGNAL_SHUTDOWN_WAIT_S if limit_s is None else limit_s)
    while ok() and time.monotonic() < deadline:
        time.sleep(0.001)
    wake()


def spinning(on: bool = True, on_sigint: Callable[[], None] | None = None) -> None:
    """Say that rclpy spins this process's nodes now (``on``) or no longer. ``on_sigint`` (called in the main
    thread, from the signal handler: keep it short and bounded, a flag or :func:`wake_once_shut_down`, and start no
    thread) ends a spin that rclpy's handler does not end."""
    _SPINNING.clear()
    if on:
        _SPINNING.append(on_sigint)


def ignore_sigint() -> None:
    """Ignore SIGINT from now on (the process is shutting down), and let a SIGTERM end it with every thread's stack
    (:func:`dump_on_sigterm`). SIG_IGN, not a Python handler: Python puts its own handlers back to SIG_DFL when the
    interpreter finalizes, and a SIGINT landing then killed a node that had already closed everything (exit -2,
    "process has died" under ros2 launch). Main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        dump_on_sigterm()


def dump_on_sigterm() -> None:
    """From now on (a shutdown under way) a SIGTERM prints every thread's stack to stderr and ends the process as
    SIGTERM does (exit -15). ``ros2 launch`` sends one when a process has not ended 5 s after its SIGINT
    (sigterm_timeout) and SIGKILL 5 s later: rclpy's handler took that SIGTERM and did nothing more, and a node stuck
    in its shutdown died of the SIGKILL without a word about where. faulthandler's handler is a C one: it prints even
    while a C call holds the GIL, and after it the default action ends the process. Main thread only."""
    # an earlier call's registration first: register() again would keep it without putting its handler back
    faulthandler.unregister(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the action after the stacks, in place of rclpy's handler
    _on_stderr(lambda stream: faulthandler.register(signal.SIGTERM, file=stream, all_threads=True, chain=True))


def stop_once_on_sigint() -> None:
    """Let the first SIGINT or SIGTERM stop this process and ignore every later SIGINT while it shuts down (a SIGTERM
    then ends it with every thread's stack, :func:`dump_on_sigterm`).

    A terminal's Ctrl-C reaches every node of ``ros2 launch``, which forwards a SIGINT of its own a moment later:
    the second one used to land in the middle of shutting down (a KeyboardInterrupt out of destroy_node, exit code
    -2, a rollout left open). Call it from the main thread before ``rclpy.init``: rclpy's handler (which wakes the
    executor and shuts the context down) runs first and then calls this one; call :func:`spinning` around the spin
    so that a callback in progress is not interrupted. It also stops a process whose parent left SIGINT ignored (a
    background job of a script), which rclpy alone kept ignored. SIGTERM (``docker stop``, systemd, ``kill``) stops
    it the same way: rclpy's handler alone had the race of :func:`wake_once_shut_down`, with nothing to mend it.
    """
    signal.signal(signal.SIGINT, _first_sigint)
    signal.signal(signal.SIGTERM, _first_sigint)


def shutdown_executor(executor, timeout_s: float) -> list[str]:
    """Shut ``executor`` down, waiting at most ``timeout_s`` for callbacks still running; returns the names of the
    worker threads still busy after that.

    rclpy's ``Executor.shutdown(timeout_sec)`` (Jazzy, Kilted) does not wait for running callbacks (it tests its
    shutdown flag right after setting it), and ``MultiThreadedExecutor.shutdown`` then joins its worker threads
    with no limit: one callback that does not return kept Ctrl-C from ending bringup (seen in CI).
    """
    pool = getattr(executor, "_executor", None)  # MultiThreadedExecutor's ThreadPoolExecutor
    if pool is None:
        executor.shutdown(timeout_sec=timeout_s)
        return []
    try:
        executor.shutdown(timeout_sec=timeout_s, wait_for_threads=False)
    except TypeError:  # an rclpy whose shutdown has no wait_for_threads: it joins the threads itself
        executor.shutdown(timeout_sec=timeout_s)
        return []
    deadline = time.monotonic() + timeout_s
    threads = list(getattr(pool, "_threads", ()))
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    frames = sys._current_frames()
    stuck = []
    for thread in threads:
        if thread.is_alive():
            frame = frames.get(thread.ident)
            where = (
                f" in {frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})" if frame else ""
            )
            stuck.append(f"{thread.name}{where}")
    return stuck


def _on_stderr(arm: Callable[[object], None]) -> None:
    """``arm(stream)`` a faulthandler call that writes to ``stream`` from C and so needs a file descriptor: where
    sys.stderr has none (a test runner's capture), the process's own stderr."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            arm(stream)
            return
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both OSError and ValueError
            continue


def _arm_backstop(seconds: float) -> None:
    """faulthandler's watchdog: after ``seconds`` every thread's stack to stderr and exit 1, from a C thread."""
    _on_stderr(lambda stream: faulthandler.dump_traceback_later(seconds, exit=True, file=stream))


class ExitWatchdog:
    """What :func:`exit_watchdog` armed: a Python timer and faulthandler's backstop; :meth:`cancel` stops both."""

    def __init__(self, timer: threading.Timer):
        self.timer = timer

    def cancel(self) -> None:
        self.timer.cancel()
        faulthandler.cancel_dump_traceback_later()

    def through_exit(self, limit_s: float | None = None) -> None:
        """The shutdown is done and the process ends next (a process's main only): the Python timer is stopped and
        faulthandler's backstop armed again for ``limit_s``, which lasts through the interpreter's exit (joining
        threads that are not daemons, atexit, a device SDK's finalizers); cancelled before it, nothing bounded that
        exit. ``limit_s``: :data:`EXIT_LIMIT_S` when None."""
        self.timer.cancel()
        _arm_backstop(EXIT_LIMIT_S if limit_s is None else limit_s)


def exit_watchdog(limit_s: float, name: str) -> ExitWatchdog:
    """Ctrl-C always ends the process ``name``: a shutdown still going ``limit_s`` after spinning stopped prints the
    stack of every thread (where it is stuck) and ends the process with exit code 1. Where no Python thread can run
    then (a C call stuck with the GIL held), faulthandler does the same :data:`BACKSTOP_S` later from a C thread.
    Cancel the returned watchdog once the shutdown is done (the caller may go on running). Never from a signal
    handler: it starts a thread."""

    def fire() -> None:
        print(
            f"{name}: shutdown did not finish within {limit_s:g} s of Ctrl-C; the stack of every thread follows",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(1)

    _arm_backstop(limit_s + BACKSTOP_S)
    timer = threading.Timer(limit_s, fire)
    timer.daemon = True
    timer.start()
    return ExitWatchdog(timer)


def leave_stuck_callbacks(stuck: list[str], name: str) -> None:
    """End the process now when callbacks are still running after shutdown: the nodes are destroyed (rollouts
    closed) and the interpreter would wait at exit for their threads, as long as they run (a VLM request: up to its
    timeout)."""
    if not stuck:
        return
    print(
        f"{name}: {len(stuck)} callback(s) still running {CALLBACK_WAIT_S:g} s after Ctrl-C ({', '.join(stuck)}): "
        "left behind",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(0)
