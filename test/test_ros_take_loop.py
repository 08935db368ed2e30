"""ros.take_loop.TakeLoop: a node's subscriptions taken on a thread of their own, without rclpy's executor (the
console's news of the graph). Every message of a burst from another process arrives, in order; a callback that
raises is logged with its reason and the next message still arrives; QoS events reach their handlers; stop() and a
context shutdown end the thread."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import requires_ros, spawn_python

pytestmark = [requires_ros, pytest.mark.ros]

PUBLISHER = """
import sys, time, rclpy
from rclpy.qos import QoSProfile
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("burst")
pubs = {t: node.create_publisher(String, t, QoSProfile(depth=100)) for t in ("/take_loop/a", "/take_loop/b")}
deadline = time.monotonic() + 20
while any(p.get_subscription_count() == 0 for p in pubs.values()) and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.3)
for i in range(50):
    pubs["/take_loop/a"].publish(String(data=f"a{i}"))
    pubs["/take_loop/b"].publish(String(data=f"b{i}"))
print("published", flush=True)
time.sleep(3)
"""


def _wait(predicate, timeout_s=20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_every_message_of_a_burst_arrives_in_order_and_a_failing_callback_loses_only_its_own(rclpy_context):
    import rclpy
    from rclpy.qos import QoSProfile
    from std_msgs.msg import String

    from grounded_planner.ros.take_loop import TakeLoop

    node = rclpy.create_node("take_loop_test", context=rclpy_context)
    got: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[str] = []

    def on_b(msg):
        if msg.data == "b7":
            raise ValueError("b7 is malformed")
        got["b"].append(msg.data)

    node.create_subscription(String, "/take_loop/a", lambda m: got["a"].append(m.data), QoSProfile(depth=100))
    node.create_subscription(String, "/take_loop/b", on_b, QoSProfile(depth=100))
    loop = TakeLoop(node.subscriptions, rclpy_context, "take-loop-test", errors.append)
    publisher = spawn_python(["-c", PUBLISHER])
    try:
        assert _wait(lambda: len(got["a"]) == 50 and len(got["b"]) == 49), (got, publisher.poll())
        assert got["a"] == [f"a{i}" for i in range(50)]
        assert got["b"] == [f"b{i}" for i in range(50) if i != 7]
        assert len(errors) == 1 and "b7 is malformed" in errors[0] and "take-loop-test" in errors[0]
        assert loop.stop(2.0)
        assert not any(t.name == "take-loop-test" for t in threading.enumerate())
    finally:
        publisher.kill()
        publisher.wait()
        node.destroy_node()


def test_an_incompatible_qos_reaches_the_event_handler_and_a_shutdown_ends_the_loop(rclpy_context):
    import rclpy
    from rclpy.event_handler import SubscriptionEventCallbacks
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from grounded_planner.ros.take_loop import CHECK_S, TakeLoop

    assert CHECK_S > 10.0, (
        "the loop's fallback check would end it by itself: this test would not see the shutdown's wake-up"
    )

    node = rclpy.create_node("take_loop_qos", context=rclpy_context)
    incompatible = []
    node.create_subscription(
        String,
        "/take_loop/qos",
        lambda m: None,
        QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE),
        event_callbacks=SubscriptionEventCallbacks(incompatible_qos=incompatible.append),
    )
    loop = TakeLoop(node.subscriptions, rclpy_context, "take-loop-qos", lambda line: None)
    node.create_publisher(String, "/take_loop/qos", QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))
    try:
        assert _wait(lambda: bool(incompatible)), "no incompatible-QoS event for a best-effort publisher"
        assert incompatible[0].total_count >= 1
        rclpy.shutdown(context=rclpy_context)
        thread = next(t for t in threading.enumerate() if t.name == "take-loop-qos")
        thread.join(2.0)  # woken by the shutdown, not by its fallback check (CHECK_S)
        assert not thread.is_alive(), "the loop outlived its context"
    finally:
        loop.stop(2.0)
        node.destroy_node()
