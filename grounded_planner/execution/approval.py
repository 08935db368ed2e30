"""Approval before motion: a plan waits for a person's yes or no; no answer within the timeout is a no."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from grounded_planner.errors import InputError, RunFailure


@dataclass(frozen=True)
class Decision:
    """How an approval request ended: ``approved``, and the reason (the person's, or the timeout's)."""

    approved: bool
    reason: str
    answered: bool  # False: nobody answered within the timeout


class ApprovalGate:
    """One pending request at a time. :meth:`wait` blocks the motion thread; :meth:`answer` comes from another
    thread (a ROS service callback, a terminal). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event: threading.Event | None = None
        self._answer: tuple[bool, str] | None = None
        self.summary = ""  # what is waiting for approval (shown to whoever answers)

    @property
    def pending(self) -> bool:
        with self._lock:
            return self._event is not None

    def wait(self, summary: str, timeout_s: float) -> Decision:
        """Block until :meth:`answer` or ``timeout_s``; the unanswered case is a rejection."""
        if not timeout_s > 0:
            raise InputError(f"approval timeout_s must be > 0 seconds, got {timeout_s!r}")
        event = threading.Event()
        with self._lock:
            if self._event is not None:
                raise RunFailure("an approval request is already pending")
            self._event, self._answer, self.summary = event, None, summary
        try:
            answered = event.wait(timeout_s)
            with self._lock:
                answer = self._answer
        finally:
            with self._lock:
                self._event, self.summary = None, ""
        if not answered or answer is None:
            return Decision(False, f"no approval within {timeout_s:g} s: rejected, nothing moved", False)
        approved, reason = answer
        return Decision(approved, reason or ("approved" if approved else "rejected"), True)

    def answer(self, approved: bool, reason: str = "") -> tuple[bool, str]:
        """Answer the pending request. Returns (taken, message): not taken when nothing is waiting."""
        with self._lock:
            if self._event is None:
                return False, "no plan is waiting for approval"
            self._answer = (bool(approved), str(reason))
            summary = self.summary
            self._event.set()
        return True, f"{'approved' if approved else 'rejected'}: {summary}"
