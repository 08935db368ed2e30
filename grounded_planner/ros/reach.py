"""Make sure a server has discovered *this* client before the first request goes out.

``wait_for_service()`` / ``wait_for_server()`` say that this process sees the server; they do not say that the
server sees this process. With rmw_fastrtps (the ROS 2 default) a request sent in between is lost for good: the
server's reliable, volatile request reader drops a sample from a writer it has not matched yet, and once it
matches the writer it skips what was announced before. The client then waits forever for an answer. CI lost an
ExecutePlan goal this way; how often it happens depends on how busy the machine is (docs/failure_behaviours.md,
"The first request of a new client", and ``benchmarks/bench_discovery.py``).

The check is a round trip on the ``get_parameters`` service of the node that hosts the server (every rclcpp and
rclpy node has one), from a probe client created *after* the real client. A participant announces its endpoints
in creation order, one reliable channel per endpoint kind, so a server process that answered the later probe has
also matched the earlier client. The probe asks for no parameters (no side effect) and is repeated until
answered, since the first probe can be lost the same way.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from rcl_interfaces.srv import GetParameters
from rclpy.action import get_action_server_names_and_types_by_node
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

Waiter = Callable[[object, float], bool]  # (future, timeout_s) -> completed in time


def wait_spun_elsewhere(future, timeout_s: float) -> bool:
    """A :data:`Waiter` for a node that an executor spins in another thread (the caller only blocks)."""
    done = threading.Event()
    future.add_done_callback(lambda _future: done.set())
    return done.wait(max(0.0, timeout_s)) or future.done()


def wait_spinning(executor) -> Waiter:
    """A :data:`Waiter` that spins ``executor`` (the caller's own) until the future completes or the time is up."""

    def wait(future, timeout_s: float) -> bool:
        executor.spin_until_future_complete(future, timeout_sec=max(0.0, timeout_s))
        return future.done()

    return wait


def host_nodes(node: Node, name: str, action: bool = False) -> list[tuple[str, str]]:
    """(name, namespace) of every node in the graph that serves the service (or, with ``action``, the action)
    ``name``."""
    hosts = []
    for node_name, namespace in node.get_node_names_and_namespaces():
        try:
            if action:
                served = get_action_server_names_and_types_by_node(node, node_name, namespace)
            else:
                served = node.get_service_names_and_types_by_node(node_name, namespace)
        except Exception:  # noqa: BLE001 - a node that left the graph between the two calls serves nothing
            continue
        if any(served_name == name for served_name, _types in served):
            hosts.append((node_name, namespace))
    return hosts


def host_key(node: Node, hosts: list[tuple[str, str]]) -> tuple:
    """What identifies this incarnation of the host nodes: the GIDs of their ``/rosout`` publishers (a node that
    restarts gets new ones, and must discover this client again). Empty when they publish no ``/rosout``."""
    wanted = set(hosts)
    return tuple(
        sorted(
            bytes(info.endpoint_gid)
            for info in node.get_publishers_info_by_topic("/rosout")
            if (info.node_name, info.node_namespace) in wanted
        )
    )


def _probe_service(node_name: str, namespace: str) -> str:
    return f"{namespace.rstrip('/')}/{node_name}/get_parameters"


def confirm_reachable(
    node: Node, name: str, wait: Waiter, timeout_s: float, action: bool = False, attempt_s: float = 0.5
) -> bool:
    """True once every node serving ``name`` has answered a probe from ``node``: a request made by a client that
    ``node`` created *before* this call will then reach it. False when no host is found in the graph or a host
    does not answer within ``timeout_s`` (the caller may still send; it is then only as safe as before).

    ``wait(future, timeout_s)`` spins however the caller spins (an executor of its own, or one in another
    thread) and says whether the future completed in time.
    """
    deadline = time.monotonic() + timeout_s
    hosts = host_nodes(node, name, action)
    while not hosts and time.monotonic() < deadline:  # the graph cache can lag the endpoint match by a moment
        time.sleep(0.02)
        hosts = host_nodes(node, name, action)
    if not hosts:
        return False
    for node_name, namespace in hosts:
        # reentrant: the caller may itself be a callback holding the node's default group
        probe = node.create_client(
            GetParameters, _probe_service(node_name, namespace), callback_group=ReentrantCallbackGroup()
        )
        try:
            while not probe.service_is_ready():  # not wait_for_service(): it polls every 0.1 s
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)
            while True:
                future = probe.call_async(GetParameters.Request())
                if wait(future, min(attempt_s, max(0.0, deadline - time.monotonic()))):
                    break
                probe.remove_pending_request(future)
                if time.monotonic() >= deadline:
                    return False
        finally:
            node.destroy_client(probe)
    return True


class Reachability:
    """Remembers which servers have been confirmed reachable (per host-node incarnation), so that a client probes
    once per server start, not before every request."""

    def __init__(self, node: Node, wait: Waiter):
        self.node, self.wait = node, wait
        self._confirmed: dict[tuple[str, bool], tuple] = {}

    def ensure(self, name: str, timeout_s: float, action: bool = False) -> bool:
        """Probe the hosts of ``name`` unless the same incarnation of them was confirmed before."""
        hosts = host_nodes(self.node, name, action)
        key = host_key(self.node, hosts) if hosts else ()
        if key and self._confirmed.get((name, action)) == key:
            return True
        reached = confirm_reachable(self.node, name, self.wait, timeout_s, action)
        if reached:
            hosts = host_nodes(self.node, name, action)
            self._confirmed[(name, action)] = host_key(self.node, hosts) if hosts else ()
        return reached

    def forget(self, name: str, action: bool = False) -> None:
        """Probe again next time (a request to ``name`` went unanswered)."""
        self._confirmed.pop((name, action), None)
