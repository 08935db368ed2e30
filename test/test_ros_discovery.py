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


WAIT_SET_RACE = (
    "Failed to add 'rcl_action_server_t' to wait set: action server pointer is invalid, at "
    "/project/src/rcl_action/action_server.c:1054"
)
NOT_DELIVERED = (
    "failed to send response: client will not receive response, at ./src/rmw_response.cpp:154, at "
    "./src/rcl/service.c:314"
)


@pytest.mark.parametrize("message", [NOT_DELIVERED, WAIT_SET_RACE], ids=["response not delivered", "wait set race"])
def test_a_response_rmw_cannot_deliver_does_not_end_the_node(rclpy_context, message):
    """rclpy raises rmw_fastrtps's "client will not receive response" out of the executor (rclpy 9.1,
    executors.py ``_execute_service``). That error depends on discovery timing, so it is raised here by the
    executor itself, with the text rmw_fastrtps_shared_cpp/src/rmw_response.cpp writes; the node must go on.
    So must it after rcl's wait-set error for an entity a lifecycle cleanup destroyed while the executor built its
    wait set (the text of a CI run's bringup, which died of it)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    from grounded_planner.ros.node_main import response_not_delivered, spin_serving, survivable_rcl_error

    class LosesOneResponse(SingleThreadedExecutor):
        raised = 0

        def spin_once(self, timeout_sec=None):
            if self.raised == 0:
                self.raised += 1
                raise _rclpy.RCLError(message)
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
    assert not survivable_rcl_error(_rclpy.RCLError("failed to create timer"))


@pytest.mark.parametrize("error", ["graph query", "context invalid"])
def test_an_rcl_error_from_a_callback_due_as_the_context_shuts_down_ends_the_spin_quietly(rclpy_context, error):
    """Ctrl-C shuts the context down; a timer that was due runs once more against it: its graph query meets
    destroyed handles (rclpy 9.1's InvalidHandle, "graph query") or, as in a CI run of the rollout logger, the
    invalid context (RCLError "rcl node's context is invalid", raised here with that text). The node ends as after
    any Ctrl-C, with no error out of the spin."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    from grounded_planner.ros.node_main import spin_serving

    node = rclpy.create_node("queries_at_shutdown", context=rclpy_context)
    seen = []

    def due_at_shutdown() -> None:
        rclpy.shutdown(context=rclpy_context)  # as Ctrl-C does, between two callbacks
        seen.append(1)
        if error == "graph query":
            node.get_publishers_info_by_topic("/anything")
        raise _rclpy.RCLError("rcl node's context is invalid, at ./src/rcl/node.c:428")

    node.create_timer(0.01, due_at_shutdown)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    spin_serving(executor, node)  # returns; before: the error out of the node
    assert seen == [1]


def test_an_rcl_error_from_a_callback_while_the_context_is_up_still_ends_the_node(rclpy_context):
    """The quiet end is for errors after Ctrl-C only: an rcl error with the context up still ends the spin with it."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    from grounded_planner.ros.node_main import spin_serving

    node = rclpy.create_node("fails_while_up", context=rclpy_context)

    def fails() -> None:
        raise _rclpy.RCLError("failed to create timer")

    node.create_timer(0.01, fails)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    with pytest.raises(_rclpy.RCLError, match="failed to create timer"):
        spin_serving(executor, node)
