"""Work that runs after a service's response was sent: AfterResponse, the planner's hook on its plan service.

rclpy's executors send a service's response with ``service.send_response(response, header)`` once the callback
returned. AfterResponse wraps that one method of one service (the contract it relies on, and the only one) so that
work queued for a response starts once that response is out, or after RESPONSE_SENT_WAIT_S where an executor sends
some other way.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

# how long the after-answer work waits for its response to be sent, seconds (reached only where the executor does not
# send through Service.send_response, e.g. rclpy's experimental C++ EventsExecutor)
RESPONSE_SENT_WAIT_S = 0.2


class AfterResponse:
    """Runs work on one worker thread, in order, each item once the service response it follows has been sent.

    The work (publishing the plan and status, a log line, drawing the overlay: 5-15 ms of Python) would otherwise
    take the GIL from the executor thread that is still sending the response; CPython hands the GIL back only
    after its 5 ms switch interval, which delayed every answer by 2-3 ms. rclpy's executors send a service's
    response with ``service.send_response(response, header)`` once the callback returned; this wraps that method
    of the one service to release the work queued for that response.
    """

    def __init__(self, service, thread_name_prefix: str):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name_prefix)
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Event] = {}  # id(response) -> set when it was sent
        send = service.send_response

        def send_then_release(response, header) -> None:
            try:
                send(response, header)
            finally:
                with self._lock:
                    sent = self._pending.pop(id(response), None)
                if sent is not None:
                    sent.set()

        service.send_response = send_then_release

    def submit(self, response, fn, *args) -> None:
        """Run ``fn(*args)`` after ``response`` was sent (or after RESPONSE_SENT_WAIT_S)."""
        sent = threading.Event()
        with self._lock:
            self._pending[id(response)] = sent
        self._pool.submit(self._run, id(response), sent, fn, args)

    def _run(self, key: int, sent: threading.Event, fn, args) -> None:
        if not sent.wait(RESPONSE_SENT_WAIT_S):
            with self._lock:
                self._pending.pop(key, None)
        fn(*args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
