"""The first request after discovery reaches the server, and a response rmw cannot deliver never ends a node.

rmw_fastrtps loses a request sent after ``wait_for_service()`` but before the server matched the client
(grounded_planner/ros/reach.py); ``benchmarks/bench_discovery.py`` measures how often under CPU load. These tests
check the parts a user relies on: the probe finds the serving node and answers only when it answers, a restart of
the server is noticed, and the spin loop of every node survives rmw's "client will not receive response"."""

import threading

import pytest

from conftest import requires_ros, spawn_python
from helpers.ros_wait import spin_until, stop_process

pytestmark = [requires_ros, pytest.mark.ros]

SERVER = """
import sys, rclpy
from rclpy.executors import ExternalShutdownException
from std_srvs.srv import Trigger
def answer(request, response):
    response.success, response.message = True, "pong"
    return response
try:
    with rclpy.init():
        node = rclpy.create_node(sys.argv[1])
        node.create_service(Trigger, "/discovery_test/ping", answer)
        print("ready", flush=True)
        rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


@pytest.fixture
def probe_node(rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    node = rclpy.create_node("discovery_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    yield node, executor
    node.destroy_node()


def start_server(tmp_path, name):
    (tmp_path / "server.py").write_text(SERVER)
    child = spawn_python([str(tmp_path / "server.py"), name])
    assert child.stdout.readline().strip() == "ready", stop_process(child)
    return child


def test_the_probe_names_the_serving_node_and_proves_it_answers(probe_node, tmp_path):
    from std_srvs.srv import Trigger

    from grounded_planner.ros.reach import confirm_reachable, host_nodes, wait_spinning

    node, executor = probe_node
    client = node.create_client(Trigger, "/discovery_test/ping")
    wait = wait_spinning(executor)
    # nobody serves it yet: no host, and the probe says so within its time limit instead of hanging
    assert not confirm_reachable(node, "/discovery_test/ping", wait, timeout_s=0.5)
    child = start_server(tmp_path, "ping_server")
    try:
        assert client.wait_for_service(timeout_sec=30.0)
        assert confirm_reachable(node, "/discovery_test/ping", wait, timeout_s=30.0)
        assert ("ping_server", "/") in host_nodes(node, "/discovery_test/ping")
        future = client.call_async(Trigger.Request())
        assert wait(future, 10.0) and future.result().message == "pong"
    finally:
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_a_restarted_server_is_probed_again(probe_node, tmp_path):
    from std_srvs.srv import Trigger

    from grounded_planner.ros.reach import Reachability, host_key, host_nodes, wait_spinning

    node, executor = probe_node
    client = node.create_client(Trigger, "/discovery_test/ping")
    wait = wait_spinning(executor)
    reach = Reachability(node, wait)
    keys = []
    for _incarnation in range(2):
        child = start_server(tmp_path, "ping_server")
        try:
            assert client.wait_for_service(timeout_sec=30.0)
            assert reach.ensure("/discovery_test/ping", 30.0)
            keys.append(host_key(node, host_nodes(node, "/discovery_test/ping")))
            future = client.call_async(Trigger.Request())
            assert wait(future, 10.0) and future.result().success
        finally:
            stop_process(child)
        spin_until(executor, lambda: not host_nodes(node, "/discovery_test/ping"), 30.0, "the graph to drop the server")
    assert keys[0] and keys[1] and keys[0] != keys[1], "the second server start looked like the first"


def test_a_response_rmw_cannot_deliver_does_not_end_the_node(rclpy_context):
    """rclpy raises rmw_fastrtps's "client will not receive response" out of the executor (rclpy 9.1,
    executors.py ``_execute_service``). That error depends on discovery timing, so it is raised here by the
    executor itself, with the text rmw_fastrtps_shared_cpp/src/rmw_response.cpp writes; the node must go on."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    from grounded_planner.ros.node_main import response_not_delivered, spin_serving

    class LosesOneResponse(SingleThreadedExecutor):
        raised = 0

        def spin_once(self, timeout_sec=None):
            if self.raised == 0:
                self.raised += 1
                raise _rclpy.RCLError(
                    "failed to send response: client will not receive response, "
                    "at ./src/rmw_response.cpp:154, at ./src/rcl/service.c:314"
                )
            super().spin_once(timeout_sec=timeout_sec)

    node = rclpy.create_node("keeps_serving", context=rclpy_context)
    ticks = []
    node.create_timer(0.01, lambda: ticks.append(1) if len(ticks) < 5 else rclpy.shutdown(context=rclpy_context))
    executor = LosesOneResponse(context=rclpy_context)
    executor.add_node(node)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (spin_serving(executor, node), done.set()), daemon=True)
    thread.start()
    assert done.wait(30.0), "the node stopped serving after an undeliverable response"
    assert executor.raised == 1 and len(ticks) == 5
    assert not response_not_delivered(_rclpy.RCLError("failed to create timer"))  # other rcl errors still end it
