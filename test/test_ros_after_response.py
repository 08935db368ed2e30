"""AfterResponse (grounded_planner/ros/after_response.py): work queued for a service response starts once rclpy
has sent that response, and only a bounded time later when it never is."""

import time

import pytest

from conftest import requires_ros
from helpers.ros_wait import call, spin_until

pytestmark = [requires_ros, pytest.mark.ros]


def test_the_work_after_an_answer_waits_until_the_answer_is_sent(rclpy_context, monkeypatch):
    """planner_node publishes the plan and draws the overlay after answering, on a worker thread. Started while the
    executor was still sending the response, that Python work took the GIL from it and delayed every answer by
    2-3 ms (bench_latency.py); it now starts once rclpy has sent the response, or after a bounded wait."""
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import Trigger

    from grounded_planner.ros import after_response
    from grounded_planner.ros.after_response import RESPONSE_SENT_WAIT_S, AfterResponse

    # first, the bounded wait made long: only the response being sent may release the work (with the default 0.2 s,
    # a handler thread descheduled for 0.1 s on a loaded machine would let the fallback run it first)
    monkeypatch.setattr(after_response, "RESPONSE_SENT_WAIT_S", 30.0)

    node = rclpy.create_node("after_response_probe", context=rclpy_context)
    events: list[str] = []
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)

        def on_request(request, response):
            after.submit(response, lambda: events.append("after-work"))
            time.sleep(0.1)  # the rest of the handler: the work must not start meanwhile
            events.append("handler returned")
            response.success = True
            return response

        after = AfterResponse(node.create_service(Trigger, "/after_response_probe", on_request), "probe")
        client = node.create_client(Trigger, "/after_response_probe")
        assert call(executor, client, Trigger.Request(), 20.0, "the probe service").success
        spin_until(executor, lambda: len(events) == 2, 10.0, "the work after the answer")
        assert events == ["handler returned", "after-work"]

        # a response that is never sent (the executor sends otherwise) holds the work back for a bounded time only
        monkeypatch.setattr(after_response, "RESPONSE_SENT_WAIT_S", RESPONSE_SENT_WAIT_S)
        ran = threading.Event()
        started = time.monotonic()
        after.submit(Trigger.Response(), ran.set)
        assert ran.wait(RESPONSE_SENT_WAIT_S + 5.0), "the work waited for ever for a response never sent"
        assert time.monotonic() - started >= RESPONSE_SENT_WAIT_S * 0.9
        after.shutdown()
    finally:
        node.destroy_node()
