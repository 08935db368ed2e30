"""TakeLoop: the subscriptions of one node, taken on a thread of their own with a wait set of their own.

For a node whose messages need nothing but their callback (no timers, services, clients, futures, callback groups),
rclpy's executor is costly: it builds its wait set anew, in Python, from every entity of its nodes two or three times
per message (its handler triggers the executor's guard condition after the take and after the callback). For the
console's news of the graph (five subscriptions, about four messages per plan request any client makes) that was
4.6 ms of CPU per plan request on a 2-CPU machine with the news in a node of their own, 6.5 ms beside the console's
services and clients. This loop builds the wait set once per wake-up from these subscriptions and their QoS event
handlers only, takes a message from each ready subscription, and calls the callback: the pattern of rclpy's own
``rclpy.wait_for_message`` (its ``_rclpy.WaitSet`` calls, rclpy 9 / Kilted), kept running.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from typing import Any, Callable

from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from grounded_planner.threads import name_native_thread

# How long the loop waits for a message before it looks again whether the context is still up, s. A shutdown wakes
# it at once (Context.on_shutdown); this is the fallback for a context shut down by another way. Each wake-up costs
# the process about 0.24 ms of CPU (the wait set built again in Python): once a second, that was a quarter of the
# console's CPU with nothing to do.
CHECK_S = 60.0


class TakeLoop:
    """Takes the messages of ``subscriptions`` (rclpy Subscriptions of one node, never added to an executor) on a
    thread named ``name`` and calls each one's callback. A callback that raises is logged through ``log_error`` with
    its traceback and the loop goes on with the next message. QoS events of the subscriptions (an incompatible QoS,
    an incompatible type) reach their handlers' callbacks, as under an executor. :meth:`stop` ends the thread; it
    also ends by itself once the context shuts down."""

    def __init__(self, subscriptions: list[Any], context, name: str, log_error: Callable[[str], None]):
        self._subs = list(subscriptions)
        self._events = [h for sub in self._subs for h in getattr(sub, "event_handlers", ())]
        self._context = context
        self._log_error = log_error
        self._stopping = False
        self._wake = GuardCondition(None, None, context=context)
        context.on_shutdown(self._shutting_down)  # held weakly (a bound method): a stopped loop is not kept alive
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """End the loop; True once its thread has ended (within ``timeout_s``)."""
        self._stopping = True
        with contextlib.suppress(Exception):  # the context is gone already: the loop ends at its next check
            self._wake.trigger()
        self._thread.join(timeout_s)
        ended = not self._thread.is_alive()
        if ended:
            self._wake.destroy()
        return ended

    def _shutting_down(self) -> None:
        """The context shut down: wake the loop, which then ends (its next wait fails, or it finds the context down)."""
        with contextlib.suppress(Exception):  # the guard condition went with an earlier stop()
            self._wake.trigger()

    def _run(self) -> None:
        name_native_thread()
        try:
            with contextlib.ExitStack() as held:  # the handles stay valid while the loop may wait on them
                for sub in self._subs:
                    held.enter_context(sub.handle)
                for handler in self._events:
                    held.enter_context(handler)
                wait_set = _rclpy.WaitSet(len(self._subs), 1, 0, 0, 0, len(self._events), self._context.handle)
                while not self._stopping and self._context.ok():
                    wait_set.clear_entities()
                    for sub in self._subs:
                        wait_set.add_subscription(sub.handle)
                    for handler in self._events:
                        handler.add_to_wait_set(wait_set)
                    wait_set.add_guard_condition(self._wake.handle)
                    wait_set.wait(int(CHECK_S * 1e9))
                    if self._stopping:
                        return
                    ready = set(wait_set.get_ready_entities("subscription"))
                    for sub in self._subs:
                        if sub.handle.pointer in ready:
                            self._take(sub)
                    for handler in self._events:
                        if handler.is_ready(wait_set):
                            self._call(handler.callback, handler.take_data())
        except (_rclpy.RCLError, _rclpy.InvalidHandle):
            if not self._stopping and self._context.ok():
                self._log_error(f"{self._thread.name}: the wait set failed:\n{traceback.format_exc()}")

    def _take(self, sub) -> None:
        """One message (a subscription with more waiting is ready again at the next wait: a take that finds none
        costs as much as one that finds one, 0.12 ms on Fast DDS here, and news comes one message at a time)."""
        taken = sub.handle.take_message(sub.msg_type, sub.raw)
        if taken is not None:
            self._call(sub.callback, taken[0])

    def _call(self, callback: Callable[[Any], None], data: Any) -> None:
        if data is None:
            return
        try:
            callback(data)
        except Exception:  # noqa: BLE001 - one message's failure is logged; the next message is taken
            self._log_error(f"{self._thread.name}: a message's callback failed:\n{traceback.format_exc()}")
