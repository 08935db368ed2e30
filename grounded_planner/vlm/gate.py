"""A bound on the model requests in flight: beyond it a request is refused at once ("busy: ..."), never queued.

A caller (the planner node) wraps each of its requests in :meth:`RequestGate.request`; the planner calls
:func:`model_call` just before it sends anything to a model. Only requests that reach a model take a slot, and a
request keeps its slot until it ends (repair re-prompts and a decoupled planner's grounding calls included), so
cache hits, replayed plans and requests that fail before the model never wait behind slow ones or count against
the bound. Outside a ``request()`` block (the CLI, the benchmark) :func:`model_call` does nothing.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from grounded_planner.errors import InputError
from grounded_planner.vlm.errors import VLMBusyError


class _Request:
    def __init__(self, gate: "RequestGate"):
        self.gate = gate
        self.holds_slot = False


# The request the current thread is serving (a context variable, so that every planner object it calls sees it:
# the decoupled planner's language model and grounder are separate Planner instances).
_current: ContextVar[_Request | None] = ContextVar("grounded_planner_vlm_request", default=None)


class RequestGate:
    """At most ``limit`` requests hold a model slot at a time; ``name`` is the setting users change (in messages)."""

    def __init__(self, limit: int, name: str = "max_concurrent_requests"):
        if int(limit) < 1:
            raise InputError(f"{name} must be >= 1, got {limit}")
        self.limit = int(limit)
        self.name = name
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Requests holding a model slot now."""
        with self._lock:
            return self._in_flight

    @contextmanager
    def request(self) -> Iterator[None]:
        """One caller request: the slot it takes at its first model call is released when the block ends."""
        request = _Request(self)
        token = _current.set(request)
        try:
            yield
        finally:
            _current.reset(token)
            if request.holds_slot:
                with self._lock:
                    self._in_flight -= 1

    def _take(self) -> None:
        with self._lock:
            if self._in_flight >= self.limit:
                raise VLMBusyError(
                    f"busy: {self._in_flight} VLM request(s) already in flight ({self.name} "
                    f"{self.limit}); try again when one has finished"
                )
            self._in_flight += 1


def model_call() -> None:
    """Before a model request: take the current request's slot (once per request); VLMBusyError when none is free."""
    request = _current.get()
    if request is not None and not request.holds_slot:
        request.gate._take()
        request.holds_slot = True
