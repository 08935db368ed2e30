"""GroundedPlannerClient: call the plan service and the execute action from any rclpy node (nav2_simple_commander's habit).

Every call blocks until an answer or its time limit and returns a result with a status enum; the last error stays
readable as ``last_error``. Who spins the node while a call waits: ``executor`` when given (the client spins it);
else, when the node is already in an executor, that executor spins in another thread; else a temporary one.

    client = GroundedPlannerClient(node)                         # or namespace="robot1": that robot's stack
    planned = client.plan("put the cup on the plate")
    if planned.succeeded:
        done = client.execute(planned.plan, feedback=lambda step, state, action: print(step, state))
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

import numpy as np
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node

from grounded_planner_interfaces.action import ExecutePlan
from grounded_planner_interfaces.srv import GetGroundedPlan

from grounded_planner.msgs.plan import action_from_msg
from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError
from grounded_planner.ros import names
from grounded_planner.ros.convert import numpy_to_image, plan_from_msg, plan_to_msg
from grounded_planner.ros.reach import Reachability, host_key, host_nodes

FeedbackCallback = Callable[[int, str, "GroundedAction | None"], None]
# how often a call that waits for its answer looks at the graph for the server that should give it, seconds
GRAPH_CHECK_S = 0.5


class PlanStatus(Enum):
    """How a plan request ended."""

    SUCCEEDED = "succeeded"  # a plan came back (back-projected when asked)
    FAILED = "failed"  # the planner answered success false (VLM error, no frame, back-projection failed)
    INVALID = "invalid"  # the answer's plan breaks a plan rule
    TIMED_OUT = "timed_out"  # no answer within timeout_s
    UNAVAILABLE = "unavailable"  # the plan service is not up
    SERVER_GONE = "server_gone"  # the planner left the graph (or restarted) while the request was in flight


class ExecuteStatus(Enum):
    """How an execute goal ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # aborted: a step failed, or the goal was invalid
    CANCELED = "canceled"
    REJECTED = "rejected"  # the executor would not take the goal (busy, inactive)
    TIMED_OUT = "timed_out"  # no result within timeout_s (the goal is cancelled)
    UNAVAILABLE = "unavailable"  # the execute action server is not up
    SERVER_GONE = "server_gone"  # the executor left the graph (or restarted) while the goal ran: no result will come


@dataclass
class GetGroundedPlanResponse:
    """The plan service's answer (the ``GetGroundedPlan`` response, whose name it takes) as
    :meth:`GroundedPlannerClient.plan` returns it: the plan as a model and as the message, and how the call ended."""

    status: PlanStatus
    message: str = ""
    plan: GroundedPlan | None = None  # the plan model, its 3D targets inside (action.target_3d) when back-projected
    msg: Any = None  # the GroundedPlan message as it came (to pass on to other nodes unchanged)
    duration_s: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.status is PlanStatus.SUCCEEDED


@dataclass
class ExecutePlanResult:
    """The execute action's result (the ``ExecutePlan`` result, whose name it takes) as
    :meth:`GroundedPlannerClient.execute` returns it, with how the call ended. Not to be confused with
    ``ExecutionResult``, the whole record of an execution the executor publishes for every goal."""

    status: ExecuteStatus
    message: str = ""
    steps_completed: int = 0
    step_outcomes: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.status is ExecuteStatus.SUCCEEDED


class GroundedPlannerClient:
    """Client of ``grounded_planner/plan`` (GetGroundedPlan) and ``grounded_planner/execute`` (ExecutePlan) of the
    stack in ``namespace`` (default: the node's own)."""

    def __init__(
        self,
        node: Node,
        plan_service: str = names.PLAN_SERVICE,
        execute_action: str = names.EXECUTE_ACTION,
        executor: Executor | None = None,
        namespace: str | None = None,
    ):
        """``namespace``: the robot's stack to talk to (``robot1`` -> ``/robot1/grounded_planner/plan``); None: the
        node's own namespace. Absolute ``plan_service``/``execute_action`` names are used as they are."""
        self.node = node
        self.executor = executor
        self._own_executor: SingleThreadedExecutor | None = None
        if namespace is not None:
            plan_service, execute_action = (
                names.in_namespace(namespace, plan_service),
                names.in_namespace(namespace, execute_action),
            )
        # fully qualified: the reachability probe and every message compare them with the graph's names
        plan_service, execute_action = (
            node.resolve_service_name(plan_service),
            node.resolve_service_name(execute_action),
        )
        self._plan_client = node.create_client(GetGroundedPlan, plan_service)
        self._execute_client = ActionClient(node, ExecutePlan, execute_action)
        self.plan_service, self.execute_action = plan_service, execute_action
        self._goal_handle = None
        self._lock = threading.Lock()
        self.last_error = ""  # the reason of the last call that did not succeed ('' after a success)
        self.last_status: PlanStatus | ExecuteStatus | None = None
        # before the first request to a server (re)start: make sure the server sees this client, or the request
        # can be lost for good (see ros/reach.py)
        self._reach = Reachability(node, self._wait)

    # -- waiting on futures --------------------------------------------------------------------------------
    def _wait(self, future, timeout_s: float) -> bool:
        """True when ``future`` completed within ``timeout_s``; spins the node itself unless an executor does."""
        if self.executor is not None:
            self.executor.spin_until_future_complete(future, timeout_sec=timeout_s)
            return future.done()
        if self.node.executor is None or self.node.executor is self._own_executor:
            # nobody spins the node: an executor of this client's own (not rclpy's global one: removing a node
            # from an executor leaves node.executor set, so the next call took it for one spinning elsewhere
            # and waited on nothing until its time limit)
            if self._own_executor is None:
                self._own_executor = SingleThreadedExecutor(context=self.node.context)
            self._own_executor.add_node(self.node)
            self._own_executor.spin_until_future_complete(future, timeout_sec=timeout_s)
            return future.done()
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        return done.wait(timeout_s) or future.done()

    def _wait_watching(self, future, timeout_s: float, name: str, action: bool = False) -> tuple[bool, str]:
        """(completed, '') like :meth:`_wait`, or (False, why) as soon as the graph shows that the server of ``name``
        left (its node stopped or was killed) or restarted (a new incarnation knows nothing of this request): a
        server that vanished mid-request never answers, so waiting out ``timeout_s`` would only delay the news."""
        hosts = host_nodes(self.node, name, action)
        key = host_key(self.node, hosts)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if self._wait(future, max(0.0, min(GRAPH_CHECK_S, left))):
                return True, ""
            if left <= GRAPH_CHECK_S:
                return False, ""
            now = host_nodes(self.node, name, action)
            if not now:
                return False, f"{name} left the graph while the request was in flight (its node stopped or was killed)"
            if key and host_key(self.node, now) != key:
                return False, f"{name} restarted while the request was in flight: the request is lost"

    def _fail(self, status, message: str, result_cls, **extra):
        self.last_status, self.last_error = status, message
        self.node.get_logger().warning(message)
        return result_cls(status, message, **extra)

    def wait_until_ready(self, timeout_s: float = 10.0, execute: bool = True) -> bool:
        """Wait until the plan service (and, with ``execute``, the execute action) is up."""
        deadline = time.monotonic() + timeout_s
        if not self._plan_client.wait_for_service(timeout_sec=timeout_s):
            return False
        self._reach.ensure(self.plan_service, max(0.0, deadline - time.monotonic()))
        if not execute:
            return True
        if not self._execute_client.wait_for_server(timeout_sec=max(0.0, deadline - time.monotonic())):
            return False
        self._reach.ensure(self.execute_action, max(0.0, deadline - time.monotonic()), action=True)
        return True

    # -- planning --------------------------------------------------------------------------------------------
    def plan(
        self,
        instruction: str,
        image: Any = None,
        backproject: bool = True,
        timeout_s: float = 60.0,
        service_wait_s: float = 5.0,
        on_sent: Callable[[], None] | None = None,
    ) -> GetGroundedPlanResponse:
        """A grounded plan for ``instruction``.

        ``image``: an (H, W, 3) uint8 RGB array or a sensor_msgs/Image; None = the planner's latest camera frame.
        ``backproject``: fill each action's 3D target (pose, width, normal, method) from depth + extrinsics.
        ``on_sent()``: called from this thread once the request is on its way (not where the service is not there).
        """
        started = time.monotonic()
        if not self._plan_client.wait_for_service(timeout_sec=service_wait_s):
            return self._fail(
                PlanStatus.UNAVAILABLE,
                f"{self.plan_service} is not available (waited {service_wait_s:.1f} s)",
                GetGroundedPlanResponse,
            )
        self._reach.ensure(self.plan_service, service_wait_s)
        request = GetGroundedPlan.Request(instruction=str(instruction), backproject=bool(backproject))
        if image is not None:
            request.image = numpy_to_image(np.asarray(image)) if isinstance(image, np.ndarray) else image
        future = self._plan_client.call_async(request)
        if on_sent is not None:
            on_sent()
        done, gone = self._wait_watching(future, timeout_s, self.plan_service)
        if not done:
            self._plan_client.remove_pending_request(future)
            self._reach.forget(self.plan_service)
            if gone:
                return self._fail(
                    PlanStatus.SERVER_GONE,
                    f"no plan for {instruction!r}: {gone}",
                    GetGroundedPlanResponse,
                    duration_s=time.monotonic() - started,
                )
            return self._fail(
                PlanStatus.TIMED_OUT,
                f"no plan for {instruction!r} within {timeout_s:.1f} s",
                GetGroundedPlanResponse,
                duration_s=time.monotonic() - started,
            )
        response = future.result()
        duration_s = time.monotonic() - started
        if not response.success:
            return self._fail(
                PlanStatus.FAILED,
                f"planning {instruction!r} failed: {response.message}",
                GetGroundedPlanResponse,
                msg=response.plan,
                duration_s=duration_s,
            )
        try:
            plan = plan_from_msg(response.plan)
        except PlanError as exc:
            return self._fail(
                PlanStatus.INVALID,
                f"the planner's plan for {instruction!r} is invalid: {exc}",
                GetGroundedPlanResponse,
                msg=response.plan,
                duration_s=duration_s,
            )
        self.last_status, self.last_error = PlanStatus.SUCCEEDED, ""
        return GetGroundedPlanResponse(PlanStatus.SUCCEEDED, response.message, plan, response.plan, duration_s)

    # -- execution -------------------------------------------------------------------------------------------
    def execute(
        self,
        plan: Any,
        dry_run: bool = False,
        feedback: FeedbackCallback | None = None,
        timeout_s: float = 600.0,
        server_wait_s: float = 5.0,
    ) -> ExecutePlanResult:
        """Run a back-projected plan (a plan model or a GroundedPlan message) on the executor; blocks until it ends.

        ``feedback(step, state, action)`` is called for every executor event. ``cancel()`` from another thread
        stops the run; a run past ``timeout_s`` is cancelled.
        """
        started = time.monotonic()
        if not self._execute_client.wait_for_server(timeout_sec=server_wait_s):
            return self._fail(
                ExecuteStatus.UNAVAILABLE,
                f"{self.execute_action} is not available (waited {server_wait_s:.1f} s)",
                ExecutePlanResult,
            )
        plan_msg = plan_to_msg(plan) if isinstance(plan, GroundedPlan) else plan
        self._reach.ensure(self.execute_action, server_wait_s, action=True)

        def on_feedback(message) -> None:
            if feedback is not None:
                fb = message.feedback
                action = action_from_msg(fb.current, int(fb.step)) if fb.current.type else None
                feedback(int(fb.step), str(fb.state), action)

        send = self._execute_client.send_goal_async(
            ExecutePlan.Goal(plan=plan_msg, dry_run=bool(dry_run)), feedback_callback=on_feedback
        )
        if not self._wait(send, server_wait_s + 10.0):
            self._reach.forget(self.execute_action, action=True)
            return self._fail(ExecuteStatus.TIMED_OUT, "the executor did not answer the goal", ExecutePlanResult)
        handle = send.result()
        if not handle.accepted:
            return self._fail(
                ExecuteStatus.REJECTED, "the executor rejected the goal (busy or not active)", ExecutePlanResult
            )
        with self._lock:
            self._goal_handle = handle
        try:
            result_future = handle.get_result_async()
            done, gone = self._wait_watching(result_future, timeout_s, self.execute_action, action=True)
            if gone:  # nobody is left to cancel: say what happened, at once
                self._reach.forget(self.execute_action, action=True)
                return self._fail(
                    ExecuteStatus.SERVER_GONE,
                    f"no execution result: {gone}; the goal ended with it (check the robot)",
                    ExecutePlanResult,
                    duration_s=time.monotonic() - started,
                )
            if not done:
                self.cancel()
                return self._fail(
                    ExecuteStatus.TIMED_OUT,
                    f"no execution result within {timeout_s:.1f} s; goal cancelled",
                    ExecutePlanResult,
                    duration_s=time.monotonic() - started,
                )
        finally:
            with self._lock:
                self._goal_handle = None
        wrapped = result_future.result()
        result = wrapped.result
        status = {
            GoalStatus.STATUS_SUCCEEDED: ExecuteStatus.SUCCEEDED,
            GoalStatus.STATUS_CANCELED: ExecuteStatus.CANCELED,
        }.get(wrapped.status, ExecuteStatus.FAILED)
        out = ExecutePlanResult(
            status,
            str(result.message),
            int(result.steps_completed),
            list(result.step_outcomes),
            time.monotonic() - started,
        )
        self.last_status = status
        self.last_error = "" if status is ExecuteStatus.SUCCEEDED else str(result.message)
        return out

    def cancel(self, timeout_s: float = 5.0) -> bool:
        """Cancel the running execute goal; True when the executor accepted the cancel (False when none runs)."""
        with self._lock:
            handle = self._goal_handle
        if handle is None:
            return False
        future = handle.cancel_goal_async()
        if not self._wait(future, timeout_s):
            return False
        return bool(future.result().goals_canceling)

    def destroy(self) -> None:
        self._execute_client.destroy()
        self.node.destroy_client(self._plan_client)
        if self._own_executor is not None:
            self._own_executor.remove_node(self.node)
            self._own_executor.shutdown()
