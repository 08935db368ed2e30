"""The client side of ``grounded_planner/approve``: answer the plan an executor holds for approval."""

from __future__ import annotations

import rclpy
from rclpy.executors import SingleThreadedExecutor
from std_srvs.srv import SetBool

from grounded_planner.errors import RunFailure
from grounded_planner.ros import names
from grounded_planner.ros.reach import confirm_reachable, wait_spinning


class ApprovalError(RunFailure):
    """No executor offered the approve service within the timeout, or it did not answer."""


def send_approval(
    approved: bool, timeout_s: float = 10.0, service: str = names.APPROVE_SERVICE, namespace: str = ""
) -> tuple[bool, str]:
    """Call the approve service once (true approves, false rejects) of the executor in ``namespace`` (``''``: the
    root one). Returns the executor's (taken, message): not taken when no plan was waiting. Raises
    :class:`ApprovalError` when the service does not answer."""
    service = names.in_namespace(namespace, service)
    with rclpy.init(args=[]):
        node = rclpy.create_node("grounded_planner_approve")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        try:
            client = node.create_client(SetBool, service)
            if not client.wait_for_service(timeout_sec=timeout_s):
                raise ApprovalError(
                    f"no executor offers {service} (waited {timeout_s:g} s): is executor_node running "
                    "with require_approval:=true?"
                )
            # a fresh process: the executor must see this client before the one request goes out (ros/reach.py)
            confirm_reachable(node, service, wait_spinning(executor), timeout_s)
            future = client.call_async(SetBool.Request(data=bool(approved)))
            executor.spin_until_future_complete(future, timeout_sec=timeout_s)
            if not future.done() or future.result() is None:
                raise ApprovalError(f"{service} did not answer within {timeout_s:g} s")
            return bool(future.result().success), str(future.result().message)
        finally:
            node.destroy_node()
