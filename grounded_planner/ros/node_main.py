"""The one `main()` every node's console script runs: init, (lifecycle autostart), spin, clean exit."""

from __future__ import annotations

import re
import sys
from functools import partial
from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node

from grounded_planner.errors import InputError
from grounded_planner.ros.malloc import keep_image_buffers
from grounded_planner.ros.params import one_line
from grounded_planner.ros.shutdown import (
    CALLBACK_WAIT_S,
    SHUTDOWN_LIMIT_S,
    exit_watchdog,
    leave_stuck_callbacks,
    ignore_sigint,
    shutdown_executor,
    sigint_held,
    spinning,
    stop_once_on_sigint,
    wake_once_shut_down,
)


class ConfigureError(InputError):
    """A lifecycle node with ``autostart`` failed to configure: it would run unusable, so the process ends."""


class StackNode:
    """What :func:`run_node` and :func:`autostart` read of a node of the stack, with the defaults a plain node gets.
    Every node class of the package derives from it beside its rclpy base (``class PlannerNode(StackNode, Node)``)."""

    #: why configure failed ('' until it does): a lifecycle node sets it in on_configure, autostart reports it
    configure_error: str = ""
    #: threads of the executor the node needs (planner_node: one per concurrent request, plus spares)
    executor_threads: int = 1


class DeviceNode(StackNode, LifecycleNode):
    """A lifecycle node of the stack that holds a device (the camera, the robot): every way out of the configured
    states (cleanup, shutdown, error) releases it through :meth:`_release`, as ros2/demos' lifecycle talker releases
    what on_configure made, so that no path leaves a camera streaming or a robot connected."""

    def _release(self) -> None:
        """Let go of the device and of what on_configure created; safe to call when nothing is held."""
        raise NotImplementedError

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS


def _stack_view(node) -> StackNode:
    return node if isinstance(node, StackNode) else StackNode()


def autostart(node: Node) -> None:
    """Configure and activate a lifecycle node whose ``autostart`` parameter is true.

    Raises :class:`ConfigureError` with the node's reason (:attr:`StackNode.configure_error`)
    when configure fails.
    """
    if not (
        isinstance(node, LifecycleNode) and node.has_parameter("autostart") and node.get_parameter("autostart").value
    ):
        return
    with sigint_held(node.get_name()):  # a Ctrl-C now stops the process once configure is through, quietly
        configured = node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        if configured:
            node.trigger_activate()
    if not configured:
        reason = _stack_view(node).configure_error or "see its log"
        raise ConfigureError(f"node {node.get_name()!r} failed to configure: {reason}")


def rcl_error_line(exc: Exception) -> str:
    """An rcl error (bad --ros-args, unreadable --params-file) without its C source locations, on one line."""
    return one_line(re.sub(r",? at /\S+:\d+", "", str(exc)))


def response_not_delivered(exc: BaseException) -> bool:
    """True for rmw's "client will not receive response": a service (or action) response that rmw_fastrtps gave up
    sending because the server had not yet discovered the client's response reader (or the client left). rclpy
    raises it out of the executor; it is the client's loss, never a reason for the server to die."""
    return isinstance(exc, _rclpy.RCLError) and "will not receive response" in str(exc)


def entity_left_the_wait_set(exc: BaseException) -> bool:
    """True for rcl's "Failed to add '<entity>' to wait set: ... is invalid": a lifecycle transition (a service
    callback on a worker thread) destroyed one of the node's entities, the executor node's action server at
    cleanup, after the executor had taken the node's entities to build its next wait set (rclpy's
    ActionServer.destroy() is not ordered against a wait set being built: a CI run's bringup died of it when a test
    put the executor through cleanup). The next wait set is built without it."""
    return isinstance(exc, _rclpy.RCLError) and "to wait set" in str(exc) and "is invalid" in str(exc)


def survivable_rcl_error(exc: BaseException) -> str:
    """The warning for an rcl error out of the executor that the graph spins on after ('' for any other)."""
    if response_not_delivered(exc):
        return f"a client did not get its response (not discovered yet, or gone): {rcl_error_line(exc)}"
    if entity_left_the_wait_set(exc):
        return f"an entity was destroyed while the executor built its wait set, spinning on: {rcl_error_line(exc)}"
    return ""


def spin_serving(executor, node: Node) -> None:
    """``executor.spin()`` until the context shuts down, surviving the rcl errors of :func:`survivable_rcl_error`
    (logged as warnings).
    rclpy's errors raised once the context is gone end the spin quietly: Ctrl-C shut the context down while a
    callback was due, and the executor ran it once more against the invalid context or destroyed handles (a timer's
    graph query printed a traceback and a non-zero exit out of the rollout logger in CI)."""
    while node.context.ok():
        try:
            executor.spin()
            return
        except (_rclpy.RCLError, _rclpy.InvalidHandle) as exc:
            if not node.context.ok():
                return
            warning = survivable_rcl_error(exc)
            if not warning:
                raise
            node.get_logger().warning(warning)


def stop_on_sigint() -> None:
    """The first SIGINT stops this process, later ones are ignored while it shuts down (:func:`stop_once_on_sigint`).

    ``ros2 launch`` and Ctrl-C stop nodes with SIGINT, often twice (the terminal's and launch's own); a background
    job of a non-interactive shell (``bringup ... &`` in a script) starts with SIGINT ignored, which rclpy keeps:
    such a process never stopped. Call it from the main thread before ``rclpy.init``.
    """
    stop_once_on_sigint()


def run_node(make_node: Callable[[], Node], name: str, *, num_threads: int = 1, args=None) -> None:
    """Spin the node ``make_node()`` until Ctrl-C or an external shutdown.

    A lifecycle node whose ``autostart`` parameter is true is configured and activated first; when configure
    fails the process ends (non-zero, with the reason) instead of running unusable. Bad startup input — a
    parameter of the wrong type or refused by its check, a missing file, malformed ``--ros-args`` — ends the
    process with one line naming the node, not a traceback. ``num_threads`` > 1 spins a multi-threaded executor
    (so that a slow callback, such as a VLM request, never blocks the others); a node that needs more threads
    (the planner: one per VLM request it lets into flight) says so in its ``executor_threads`` attribute.
    Freed image buffers stay in the process (:func:`keep_image_buffers`), set before rclpy starts. Ctrl-C ends the
    process within :data:`CALLBACK_WAIT_S` even while a callback runs on (it is left behind, named on stderr), and
    any shutdown still going after :data:`SHUTDOWN_LIMIT_S` prints every thread's stack and exits 1; so does the
    interpreter's exit after it, past :data:`EXIT_LIMIT_S` (run_node is a process's main: the process ends after it).
    """
    memory = keep_image_buffers()
    stop_on_sigint()
    try:
        rclpy.init(args=args)
    except (_rclpy.RCLError, _rclpy.UnknownROSArgsError) as exc:  # malformed --ros-args / --params-file
        raise SystemExit(f"{name}: bad --ros-args: {rcl_error_line(exc)}") from None
    stuck: list[str] = []
    watchdog = None
    try:
        node = make_node()
        executor = None
        try:
            node.get_logger().debug(memory)
            autostart(node)
            threads = max(num_threads, int(_stack_view(node).executor_threads))
            executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
            executor.add_node(node)
            # rclpy's handler shuts the context down after it woke the executor, not before: on_sigint makes sure the
            # executor wakes once the context is down, else it may wait for ever (wake_once_shut_down)
            spinning(True, on_sigint=partial(wake_once_shut_down, node.context.ok, executor.wake))
            spin_serving(executor, node)
        finally:
            spinning(False)
            ignore_sigint()  # shutting down: a second Ctrl-C (ros2 launch forwards one) must not cut it short
            # the whole shutdown is bounded, wherever the Ctrl-C came (before the executor was made too: destroying
            # the node lets go of its device, and a device's stop can hang)
            watchdog = exit_watchdog(SHUTDOWN_LIMIT_S, name)
            if executor is not None:
                # a callback still running (a VLM request waiting on a hung server, up to timeout_s) must not keep
                # Ctrl-C from ending the process: wait for it a bounded time
                stuck = shutdown_executor(executor, CALLBACK_WAIT_S)
            node.destroy_node()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except InputError as exc:  # a parameter, a config file: the node would run unusable (a bug keeps its traceback)
        raise SystemExit(f"{name}: {one_line(exc)}") from None
    finally:
        ignore_sigint()
        try:
            rclpy.try_shutdown()
        except Exception as exc:  # noqa: BLE001 - a half-built node failing to clean up must not hide the error that ended the run
            print(f"{name}: while shutting down: {one_line(exc)}", file=sys.stderr, flush=True)
        if watchdog is not None:
            watchdog.through_exit()  # the process ends next: its interpreter's exit is bounded too
    leave_stuck_callbacks(stuck, name)
