"""GroundedPlannerClient notices a server that vanished mid-request (issue 30.4): planner_node and executor_node
SIGKILLed while a request is in flight; the client returns with status SERVER_GONE and the reason once the graph
says so (DDS's 20 s lease for a killed process), not after its whole timeout."""

from __future__ import annotations

import importlib.util
import signal
import threading
import time

import pytest

from conftest import requires_ros

pytestmark = [requires_ros, pytest.mark.ros]
pytest.importorskip("httpx")

from helpers.tabletop import INSTRUCTION, SCENE_COLORS, scene_messages  # noqa: E402
from helpers.ros_wait import LEASE_S  # noqa: E402


def test_a_planner_killed_mid_request_is_reported_at_once(tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.client import GroundedPlannerClient, PlanStatus
    from grounded_planner.vlm.fake_server import FakeVLMServer, Reply
    from test_ros_planner_node import start_planner

    with FakeVLMServer(SCENE_COLORS) as vlm:
        vlm.script.append(Reply(delay_s=300.0))  # a hung model: the request stays in flight
        child = start_planner(vlm.base_url, tmp_path, "-p", "timeout_s:=300.0")
        node = rclpy.create_node("client_probe", context=rclpy_context)
        try:
            executor = SingleThreadedExecutor(context=rclpy_context)
            executor.add_node(node)
            client = GroundedPlannerClient(node, executor=executor)
            color, _depth, _info = scene_messages()
            assert client.wait_until_ready(60.0, execute=False)
            killer = threading.Timer(2.0, child.send_signal, args=(signal.SIGKILL,))
            killer.start()
            started = time.monotonic()
            result = client.plan(INSTRUCTION, image=color, backproject=False, timeout_s=240.0)
            took = time.monotonic() - started
            killer.join()
        finally:
            node.destroy_node()
            if child.poll() is None:
                child.kill()
            child.wait(10)
    assert result.status is PlanStatus.SERVER_GONE, result
    assert "/grounded_planner/plan left the graph while the request was in flight" in result.message
    assert client.last_error == result.message
    assert took < 2.0 + LEASE_S + 15.0, f"took {took:.1f} s: the client waited for an answer that could not come"


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)")
def test_an_executor_killed_mid_goal_is_reported_at_once(tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.client import ExecuteStatus, GroundedPlannerClient
    from helpers.sim_executor import plan_msg, start_sim_executor

    child = start_sim_executor(tmp_path, realtime_factor=1.0)  # paced: the kill after the first feedback is mid-plan
    node = rclpy.create_node("client_probe", context=rclpy_context)
    events = []
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        client = GroundedPlannerClient(node, executor=executor)

        def on_feedback(step, state, action):  # the arm is moving: kill the executor under it
            events.append((time.monotonic(), state))
            if len(events) == 1:
                child.send_signal(signal.SIGKILL)

        started = time.monotonic()
        result = client.execute(plan_msg(), feedback=on_feedback, timeout_s=600.0, server_wait_s=120.0)
        took = time.monotonic() - events[0][0] if events else time.monotonic() - started
    finally:
        node.destroy_node()
        if child.poll() is None:
            child.kill()
        child.wait(10)
    assert events, "the goal never started"
    assert result.status is ExecuteStatus.SERVER_GONE, result
    assert "/grounded_planner/execute left the graph" in result.message, result.message
    assert took < LEASE_S + 15.0, f"took {took:.1f} s after the kill"
