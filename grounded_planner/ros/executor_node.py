"""executor_node: the `/grounded_planner/execute` action server — a back-projected plan run on a robot backend."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile
from action_msgs.srv import CancelGoal
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.service_introspection import ServiceIntrospectionState
from service_msgs.msg import ServiceEventInfo
from std_srvs.srv import SetBool, Trigger
from visualization_msgs.msg import MarkerArray

from grounded_planner.errors import InputError
from grounded_planner.plan import GroundedPlan
from grounded_planner_interfaces.action import ExecutePlan
from grounded_planner_interfaces.msg import (
    ExecutionEvent,
    ExecutionResult as ExecutionResultMsg,
)

from grounded_planner.execution.approval import ApprovalGate
from grounded_planner.execution.closed_loop import CONDITION as CLOSED_LOOP, ClosedLoop, ClosedLoopResult
from grounded_planner.execution.config import BACKEND_NAMES, ExecutorConfig
from grounded_planner.execution.backend import BackendError
from grounded_planner.execution.executor import ExecutionResult, Executor
from grounded_planner.execution.backends import make_backend
from grounded_planner.execution.validate import ExecutionInputError, GoalPose, check_poses
from grounded_planner.ros import names
from grounded_planner.msgs.execution import execution_event_msg, execution_result_from_msg, execution_result_msg
from grounded_planner.ros.convert import action_to_msg, plan_from_msg
from grounded_planner.ros.msg_types import rclpy_type
from grounded_planner.ros.closed_loop_io import PlanServiceError, RosClosedLoopIO
from grounded_planner.ros.frames import FRESHNESS_PARAMS, LatestFrames, NoFrameError
from grounded_planner.ros.node_main import DeviceNode, run_node
from grounded_planner.ros.visualize import plan_markers
from grounded_planner.ros.moveit import moveit_backend_args
from grounded_planner.ros.params import (
    Param,
    declare_all,
    executor_config_file,
    existing_file,
    extrinsics_file,
    non_empty,
    non_negative,
    one_of,
    positive,
    resolve_data_path,
    values,
)
from grounded_planner.geometry.extrinsics import Extrinsics

PARAMS = [
    Param("backend", "sim", "robot backend: sim | franky | lerobot | moveit", one_of(*BACKEND_NAMES), read_only=True),
    Param(
        "config_file",
        "",
        "executor YAML (safety envelope, speeds, backend options); '' = built-in defaults",
        executor_config_file,
        read_only=True,
    ),
    Param(
        "moveit_params_file",
        "",
        "moveit backend: ROS parameters file with the robot's MoveIt configuration for "
        "moveit_py (real.launch.py moveit_config:=... writes it); '' = "
        "backends.moveit.params_files",
        existing_file,
        read_only=True,
    ),
    Param("dry_run", False, "check every target and report the motions without moving, whatever the goal asks"),
    Param("base_frame", "", "frame every pose must be in (the robot base); '' = accept the frame of the first pose"),
    Param(
        "autostart", True, "configure and activate at startup; false: wait for lifecycle transitions", read_only=True
    ),
    Param(
        "require_approval",
        False,
        "motion waits for grounded_planner/approve (std_srvs/SetBool) or "
        "`grounded-planner approve`; no answer within approval_timeout_s = rejected",
    ),
    Param("approval_timeout_s", 60.0, "seconds a plan waits for approval before it is rejected", positive),
    Param(
        "closed_loop",
        False,
        "check every step from the camera and gripper, re-ground or replan through "
        "grounded_planner/plan on a failed check (budgets: config_file's closed_loop)",
        read_only=True,
    ),
    Param("color_topic", names.COLOR_IMAGE, "closed loop: colour image topic", non_empty, read_only=True),
    Param("depth_topic", names.ALIGNED_DEPTH_IMAGE, "closed loop: depth aligned to colour", non_empty, read_only=True),
    Param(
        "camera_info_topic", names.COLOR_CAMERA_INFO, "closed loop: colour camera intrinsics", non_empty, read_only=True
    ),
    Param(
        "extrinsics_file",
        "",
        "closed loop: camera->robot base calibration YAML (needed for closed loop)",
        extrinsics_file,
        read_only=True,
    ),
    Param(
        "frame_wait_s",
        5.0,
        "closed loop: how long a check waits for a camera frame set taken after it asked, "
        "fresh and one instant, seconds",
        positive,
    ),
    *FRESHNESS_PARAMS,
    Param(
        "cancel_owner_only",
        False,
        "only the client that sent a goal may cancel it (a cancel from any other is "
        "refused and logged); false: any client may cancel (stopping is the safe direction)",
    ),
    Param(
        "link_check_period_s",
        1.0,
        "how often an idle executor reads the robot's state to notice a robot that "
        "dropped out (reported on /diagnostics), seconds; 0 = only at each goal",
        non_negative,
        read_only=True,
    ),
]
DIAGNOSTICS_TOPIC = "/diagnostics"  # diagnostic_msgs/DiagnosticArray, as every ROS driver reports its health
CANCELLER_WAIT_S = 1.0  # how long a cancel waits for the introspection event naming its client, seconds


class ExecutorNode(DeviceNode):
    """Runs one plan at a time on the configured backend; per-step feedback, cancel, dry run.

    configure builds and connects the backend; activate opens the action server to goals (an inactive node
    rejects them); cleanup/shutdown disconnect. ``backend_factory(name, config)`` replaces
    ``execution.backends.make_backend`` (the demo passes the simulator it renders from).
    """

    def __init__(self, node_name: str = "executor", backend_factory: Callable | None = None, **kwargs):
        super().__init__(node_name, **kwargs)
        declare_all(self, PARAMS)
        self._backend_factory = backend_factory
        self._backend = None
        self._executor = None
        self._active = False
        self._busy = threading.Lock()
        self._action_server: ActionServer | None = None
        self._approval = ApprovalGate()
        self._approve_srv = None
        self._loop_io = None  # closed loop: camera frames and the plan service client
        qos = QoSProfile(depth=10)
        self._feedback_pub = self.create_publisher(ExecutionEvent, names.EXECUTION_FEEDBACK, qos)
        self._result_pub = self.create_publisher(ExecutionResultMsg, names.EXECUTION_RESULT, qos)
        # the approval preview: the goal's 3D markers, latched for a late RViz (not the plan on last_plan: that
        # topic is the planner's answers, and each message there opens a rollout in the logger)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._preview_markers_pub = self.create_publisher(MarkerArray, names.PLAN_MARKERS, latched)
        self.last_result: dict | None = None
        self._cancel_notes: dict[bytes, str] = {}  # goal id -> the logged cancel request, told to the goal's owner
        # who sent each goal and each cancel: the action server's introspection events carry the client's GID
        # (rclpy hands the callbacks no requester), read back here
        self._requests_lock = threading.Lock()
        self._goal_senders: dict[bytes, bytes] = {}  # goal id -> GID of the client that sent it
        self._cancel_requests: list[tuple[bytes, bytes]] = []  # (goal id, 16 zero bytes = all; client GID), unclaimed
        group = MutuallyExclusiveCallbackGroup()
        self.create_subscription(
            ExecutePlan.Impl.SendGoalService.Event,
            names.EXECUTE_ACTION + "/_action/send_goal/_service_event",
            self._on_goal_event,
            QoSProfile(depth=50),
            callback_group=group,
        )
        self.create_subscription(
            CancelGoal.Event,
            names.EXECUTE_ACTION + "/_action/cancel_goal/_service_event",
            self._on_cancel_event,
            QoSProfile(depth=50),
            callback_group=group,
        )
        # the link to the robot: read by a timer while idle, restored at the next goal or by the reconnect service
        self._backend_lock = threading.Lock()  # one thread talks to the robot at a time (a goal, a check, a reconnect)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, QoSProfile(depth=10))
        self.create_service(
            Trigger, names.RECONNECT_SERVICE, self._on_reconnect, callback_group=MutuallyExclusiveCallbackGroup()
        )
        self.create_service(
            Trigger, names.RESET_SCENE_SERVICE, self._on_reset_scene, callback_group=MutuallyExclusiveCallbackGroup()
        )
        period_s = self.get_parameter("link_check_period_s").value
        if period_s > 0:
            self.create_timer(period_s, self._check_link, callback_group=MutuallyExclusiveCallbackGroup())

    # -- lifecycle ---------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = values(self, PARAMS)
        try:
            config = (
                ExecutorConfig.load(resolve_data_path(p["config_file"]))
                if p["config_file"]
                else ExecutorConfig(backend=p["backend"])
            )
            if config.backend != p["backend"]:  # the node's parameter names the backend; the file the rest
                config = dataclasses.replace(config, backend=p["backend"])
            if p["moveit_params_file"]:
                config.backends.setdefault("moveit", {})["params_files"] = [resolve_data_path(p["moveit_params_file"])]
            if self._backend_factory is not None:
                backend = self._backend_factory(p["backend"], config)
            else:
                backend = _make_backend(p["backend"], config)
            backend.connect()
        except Exception as exc:  # noqa: BLE001 - a missing SDK, an unreachable robot, a bad config file: configure fails
            self.configure_error = f"{type(exc).__name__}: {exc}"  # run_node/bringup end the process with it
            self.get_logger().error(f"configure failed: {self.configure_error}")
            return TransitionCallbackReturn.FAILURE
        self._backend = backend
        self._executor = Executor(backend, config)
        if p["closed_loop"] and self._loop_io is None:
            if not p["extrinsics_file"]:
                self.get_logger().error("configure failed: closed_loop needs extrinsics_file (camera -> robot base)")
                return TransitionCallbackReturn.FAILURE

            try:
                extrinsics = Extrinsics.load(resolve_data_path(p["extrinsics_file"]))
            except Exception as exc:  # noqa: BLE001 - a missing or malformed calibration file: configure fails, naming it
                self.get_logger().error(f"configure failed: extrinsics_file {p['extrinsics_file']}: {exc}")
                return TransitionCallbackReturn.FAILURE
            frames = LatestFrames(
                self,
                p["color_topic"],
                p["depth_topic"],
                p["camera_info_topic"],
                callback_group=MutuallyExclusiveCallbackGroup(),
            )
            self._loop_io = RosClosedLoopIO(self, frames, extrinsics, frame_wait_s=p["frame_wait_s"])
        self._approve_srv = self.create_service(
            SetBool, names.APPROVE_SERVICE, self._on_approve, callback_group=MutuallyExclusiveCallbackGroup()
        )
        self._action_server = ActionServer(
            self,
            ExecutePlan,
            names.EXECUTE_ACTION,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=self._on_cancel,
            callback_group=ReentrantCallbackGroup(),
        )
        self._action_server.configure_introspection(
            self.get_clock(), QoSProfile(depth=50), ServiceIntrospectionState.CONTENTS
        )
        self.get_logger().info(f"configured: backend {p['backend']}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        return super().on_deactivate(state)

    def _release(self) -> None:
        self._active = False
        self._approval.answer(False, "executor shutting down")
        if self._approve_srv is not None:
            self.destroy_service(self._approve_srv)
            self._approve_srv = None
        if self._action_server is not None:
            self._action_server.destroy()
            self._action_server = None
        if self._backend is not None:
            try:
                self._backend.stop()
                self._backend.disconnect()
            except Exception as exc:  # noqa: BLE001 - disconnecting must not keep the node from shutting down
                self.get_logger().error(f"backend disconnect failed: {exc}")
            self._backend = None
        self._executor = None

    # -- goals -------------------------------------------------------------------------------------
    def _on_goal(self, goal: ExecutePlan.Goal) -> GoalResponse:
        if not self._active:
            self.get_logger().warning("goal rejected: executor is not active (lifecycle state)")
            return GoalResponse.REJECT
        # check and take in one step: two goals sent back to back must not both pass (released by _execute)
        if not self._busy.acquire(blocking=False):
            self.get_logger().warning("goal rejected: a plan is already executing")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def goal_plan(self, goal_plan_msg) -> GroundedPlan:
        """The goal's plan model, whose actions carry their 3D targets (width, normal, method) from the message.

        Raises PlanError when the plan breaks a plan rule, ExecutionInputError when an action has no target or the
        frames disagree with ``base_frame``.
        """
        plan = plan_from_msg(goal_plan_msg)
        missing = [i for i, action in enumerate(plan.actions) if action.target_3d is None]
        if missing:
            raise ExecutionInputError(
                f"action(s) {missing} have no pose: back-project the plan first (planner backproject:=true)"
            )
        frames = {action.target_3d.frame for action in plan.actions}
        base = self.get_parameter("base_frame").value
        if len(frames) > 1 or (base and frames and frames != {base}):
            raise ExecutionInputError(f"poses are in {sorted(frames)}, expected all in {base or 'one frame'}")
        return plan

    def _execute(self, goal_handle) -> ExecutePlan.Result:
        """Every accepted goal ends with a result on the action and on ``execution/result``, whatever fails."""
        try:
            return self._run_goal(goal_handle)
        except Exception as exc:  # noqa: BLE001 - ExecutionInputError (a NaN, a bad width) or a bug: the node keeps serving
            invalid = isinstance(exc, ExecutionInputError)
            message = f"invalid goal: {exc}" if invalid else f"execution failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(message)
            request = goal_handle.request
            self._publish_result(ExecutionResult(False, message, []), request.plan.instruction, bool(request.dry_run))
            if goal_handle.is_active:
                goal_handle.abort()
            return ExecutePlan.Result(success=False, message=message)
        finally:
            self._busy.release()  # taken by _on_goal

    def _run_goal(self, goal_handle) -> ExecutePlan.Result:
        result = ExecutePlan.Result()
        try:
            check_poses(goal_poses(goal_handle.request.plan), self.get_parameter("base_frame").value)
            plan = self.goal_plan(goal_handle.request.plan)
        except InputError as exc:  # ExecutionInputError, PlanError
            result.success, result.message = False, f"invalid goal: {exc}"
            self._publish_result(
                ExecutionResult(False, result.message, []),
                goal_handle.request.plan.instruction,
                bool(goal_handle.request.dry_run),
            )
            goal_handle.abort()
            return result
        cancel = threading.Event()
        dry_run = goal_handle.request.dry_run or self.get_parameter("dry_run").value
        goal_key = bytes(goal_handle.goal_id.uuid)
        if not dry_run:
            refusal = self._ensure_robot()  # a robot that dropped out is reconnected here, not by a lifecycle cycle
            if refusal:
                result.success, result.message = False, refusal
                self._publish_result(ExecutionResult(False, refusal, []), plan.instruction, False)
                goal_handle.abort()
                return result
        # the goal may ask to be held (a console's preview): it never loosens the executor's own rule
        held = bool(goal_handle.request.require_approval)
        if held or (not dry_run and self.get_parameter("require_approval").value):
            refusal = self._await_approval(plan, goal_handle)
            if refusal:
                result.success, result.message = False, refusal
                self._publish_result(
                    ExecutionResult(False, refusal, []), plan.instruction, bool(dry_run), approved=False
                )
                goal_handle.abort()
                return result
        # the simulator's verdict is the scene's state once the goal ends: where the scene met its success check
        # before the goal began (an earlier episode did the task and nothing set the scene back), it says nothing of
        # this goal, which may have done nothing at all (stopped, missed): no automatic label for it then
        done_before = None if dry_run else self._backend.scene_success()
        started = time.monotonic()

        def on_feedback(step_index: int, state: str, action=None) -> None:
            if goal_handle.is_cancel_requested:
                cancel.set()
            feedback = ExecutePlan.Feedback(step=int(step_index), state=str(state))
            if action is not None:
                feedback.current = action_to_msg(action)
            goal_handle.publish_feedback(feedback)
            self._feedback_pub.publish(
                execution_event_msg(rclpy_type, step_index, state, action, stamp_ns=self.get_clock().now().nanoseconds)
            )

        watcher = threading.Thread(target=self._watch_cancel, args=(goal_handle, cancel), daemon=True)
        watcher.start()
        try:
            with self._backend_lock:
                if self._loop_io is not None and not dry_run:
                    outcome = self._run_closed_loop(plan, cancel, on_feedback)
                else:
                    outcome = self._executor.execute(plan, dry_run=dry_run, cancel=cancel, on_feedback=on_feedback)
                if not outcome.success and not dry_run:
                    self._backend.check_link()  # a fault may be a robot that dropped out: say so at once
        finally:
            cancel.set()  # also ends the watcher
            self._send_diagnostics()
        scene_success = None if dry_run else self._backend.scene_success()  # the simulator knows; a robot cannot
        if done_before and scene_success:
            self.get_logger().warning(
                f"{plan.instruction!r}: the scene met its success check before this goal began, so its success is "
                "not this goal's: no automatic label (set the scene back between episodes with "
                f"{names.RESET_SCENE_SERVICE}, or label it by hand)"
            )
            scene_success = None
        self._publish_result(outcome, plan.instruction, bool(dry_run), scene_success)
        data = self.last_result
        result.success = bool(outcome.success)
        result.message = str(outcome.message)
        if goal_handle.is_cancel_requested:  # the note is written beside the stop: give it a moment
            deadline = time.monotonic() + CANCELLER_WAIT_S
            while goal_key not in self._cancel_notes and time.monotonic() < deadline:
                time.sleep(0.01)
        note = self._cancel_notes.pop(goal_key, "")
        if note:  # the goal's owner is told that, and when, someone asked to cancel it
            result.message = f"{result.message} ({note})"
        outcomes = [str(s["outcome"]) for s in data["steps"]]
        result.step_outcomes = outcomes
        result.steps_completed = sum(1 for o in outcomes if o == "ok")
        self.get_logger().info(
            f"plan {plan.instruction!r}: {'ok' if outcome.success else outcome.message} "
            f"({time.monotonic() - started:.1f} s{', dry run' if dry_run else ''})"
        )
        if goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    # -- the link to the robot -----------------------------------------------------------------------
    @property
    def robot_reachable(self) -> bool:
        """The node's word on the robot: connected and answering its last state read."""
        backend = self._backend  # once: a cleanup on another thread may clear it between a check and a use
        return backend is not None and backend.is_reachable

    def _ensure_robot(self) -> str:
        """Before a goal moves anything: '' when the robot answers (reconnected first if it had dropped out), else
        the refusal naming why."""
        backend = self._backend
        with self._backend_lock:
            if backend.link_lost or not backend.check_link():
                self.get_logger().warning(f"robot link lost ({backend.link_lost}): reconnecting before the goal")
                try:
                    backend.reconnect()
                except BackendError as exc:
                    backend.lose_link(str(exc))
                    return (
                        f"robot unreachable: {exc}; nothing moved (reconnect with {names.RECONNECT_SERVICE} or "
                        "the next goal once it is back)"
                    )
                finally:
                    self._send_diagnostics()
                self.get_logger().info("robot reconnected")
        return ""

    def _check_link(self) -> None:
        """Idle health check: one state read, so that a robot that dropped out shows on /diagnostics at once."""
        backend = self._backend
        if backend is not None and not backend.link_lost and self._backend_lock.acquire(blocking=False):
            try:
                backend.check_link()
            finally:
                self._backend_lock.release()
        self._send_diagnostics()

    def _on_reconnect(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        backend = self._backend
        if backend is None:
            response.success, response.message = False, "no robot backend: the executor is not configured"
            return response
        if not self._backend_lock.acquire(blocking=False):
            response.success, response.message = False, "a plan is executing: reconnect refused while it runs"
            return response
        try:
            backend.reconnect()
            response.success, response.message = True, f"{backend.name}: robot reachable"
            self.get_logger().info(f"reconnected to the robot ({names.RECONNECT_SERVICE})")
        except BackendError as exc:
            backend.lose_link(str(exc))
            response.success, response.message = False, f"robot unreachable: {exc}"
        finally:
            self._backend_lock.release()
            self._send_diagnostics()
        return response

    def _on_reset_scene(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        backend = self._backend
        if backend is None:
            response.success, response.message = False, "no robot backend: the executor is not configured"
            return response
        if not self._busy.acquire(blocking=False):  # a goal holds it from acceptance (approval wait included) to end
            response.success, response.message = False, "a plan is executing or awaiting approval: reset refused"
            return response
        try:
            with self._backend_lock:  # a link check may be reading the robot: a moment
                backend.reset_scene()
            response.success, response.message = True, f"{backend.name}: the scene is back at its start"
            self.get_logger().info(f"scene reset ({names.RESET_SCENE_SERVICE})")
        except BackendError as exc:
            response.success, response.message = False, str(exc)
        finally:
            self._busy.release()
        return response

    def _send_diagnostics(self) -> None:
        if not self.context.ok():
            return
        backend = self._backend  # read once: a cleanup on another thread may clear it
        reachable = backend is not None and backend.is_reachable  # once: the level and the value always agree
        if backend is None:
            level, message = DiagnosticStatus.WARN, "not configured: no robot backend"
        elif reachable:
            level, message = DiagnosticStatus.OK, "robot reachable"
        else:
            level, message = DiagnosticStatus.ERROR, f"robot unreachable: {backend.link_lost or 'not connected'}"
        status = DiagnosticStatus(
            name=f"{self.get_name()}: robot link",
            level=level,
            message=message,
            hardware_id="" if backend is None else backend.name,
        )
        status.values = [KeyValue(key="reachable", value=str(reachable).lower())]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self._diagnostics_pub.publish(array)

    def _run_closed_loop(self, plan, cancel: threading.Event, on_feedback):
        """The goal's plan (pixels) run step by step from the latest camera frame, each step checked, re-grounded
        or replanned through the plan service; the loop's result (``condition`` closed_loop)."""
        io = self._loop_io
        io.instruction = plan.instruction
        loop = ClosedLoop(
            self._executor,
            io.observe,
            io.plan,
            io.locate,
            on_attempt=lambda a: self._feedback_pub.publish(
                execution_event_msg(
                    rclpy_type,
                    a.step,
                    f"check:{a.check}",
                    message=f"attempt {a.attempt}, recovery {a.recovery or 'none'}: {a.message}",
                    stamp_ns=self.get_clock().now().nanoseconds,
                )
            ),
        )
        try:
            return loop.run(plan.instruction, plan, cancel=cancel, on_feedback=on_feedback)
        except (NoFrameError, PlanServiceError, InputError) as exc:  # no camera, no planner: nothing more moves
            self.get_logger().error(f"closed loop stopped: {exc}")
            return ClosedLoopResult(False, f"closed loop stopped: {type(exc).__name__}: {exc}")

    def _await_approval(self, plan, goal_handle) -> str:
        """Hold the plan until someone approves it; returns '' when approved, else the refusal (logged).

        The plan is previewed first: its 3D markers on ``plan_markers`` (latched; the planner's overlay of the same
        plan is already on ``overlay``). It is not published again on ``last_plan``: the rollout logger opens an
        episode for each plan there, and did for this one too (the planner's episode closed as aborted, a second
        one recorded without the plan's frames)."""
        self._preview_markers_pub.publish(plan_markers(plan, stamp=self.get_clock().now().to_msg()))
        timeout_s = float(self.get_parameter("approval_timeout_s").value)
        steps = ", ".join(f"{a.type} {a.object or a.target}".strip() for a in plan.actions)
        summary = f"{plan.instruction!r}: {steps}"
        self.get_logger().info(
            f"waiting up to {timeout_s:g} s for approval of {summary} "
            f"(service {self.resolve_service_name(names.APPROVE_SERVICE)} or `grounded-planner approve`)"
        )
        self._feedback_pub.publish(
            execution_event_msg(
                rclpy_type, 0, "awaiting_approval", message=summary, stamp_ns=self.get_clock().now().nanoseconds
            )
        )
        decision = self._approval.wait(summary, timeout_s)
        if goal_handle.is_cancel_requested:
            return "cancelled while waiting for approval; nothing moved"
        if decision.approved:
            self.get_logger().info(f"plan approved ({decision.reason})")
            return ""
        refusal = f"not approved: {decision.reason}" + ("" if not decision.answered else "; nothing moved")
        self.get_logger().warning(refusal)
        return refusal

    def _on_approve(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        taken, message = self._approval.answer(
            bool(request.data), "approved" if request.data else "rejected from the approve service"
        )
        response.success, response.message = taken, message
        return response

    def _on_goal_event(self, event) -> None:
        if event.info.event_type == ServiceEventInfo.REQUEST_RECEIVED and event.request:
            with self._requests_lock:
                self._goal_senders[bytes(event.request[0].goal_id.uuid)] = bytes(event.info.client_gid)
                while len(self._goal_senders) > 100:  # one goal runs at a time: the newest are enough
                    self._goal_senders.pop(next(iter(self._goal_senders)))

    def _on_cancel_event(self, event) -> None:
        if event.info.event_type == ServiceEventInfo.REQUEST_RECEIVED and event.request:
            with self._requests_lock:
                self._cancel_requests.append(
                    (bytes(event.request[0].goal_info.goal_id.uuid), bytes(event.info.client_gid))
                )
                del self._cancel_requests[:-20]

    def _canceller(self, goal_key: bytes, wait_s: float = CANCELLER_WAIT_S) -> bytes | None:
        """The GID of the client whose cancel request names this goal (or all goals), from the introspection event
        that rcl publishes as it takes the request; None when none arrives within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._requests_lock:
                for i, (goal_id, gid) in enumerate(self._cancel_requests):
                    if goal_id in (goal_key, bytes(16)):
                        del self._cancel_requests[i]
                        return gid
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    def _clients_of(self, gid: bytes | None) -> str:
        """The execute-action clients' nodes in the process (DDS participant) that ``gid`` belongs to."""
        if gid is None:
            return "an unknown client"
        prefix = bytes(gid)[:12]  # the participant's GUID prefix: the same for every endpoint of a process
        nodes = sorted(
            {
                f"{info.node_namespace.rstrip('/')}/{info.node_name}"
                for info in self.get_subscriptions_info_by_topic(names.EXECUTE_ACTION + "/_action/status")
                if bytes(info.endpoint_gid)[:12] == prefix
            }
        )
        return " or ".join(nodes) if nodes else f"a client that left the graph ({prefix.hex()[:12]})"

    def _on_cancel(self, goal_handle) -> CancelResponse:
        """Log every cancel with who asked and whose goal it is (and tell the owner in the result). A cancel is
        taken at once (the stop must not wait for book-keeping) unless ``cancel_owner_only``: then it waits up to
        CANCELLER_WAIT_S to learn who asked, refuses another client's, and takes one whose sender stays unknown."""
        goal_key = bytes(goal_handle.goal_id.uuid)
        with self._requests_lock:
            owner = self._goal_senders.get(goal_key)
        instruction = goal_handle.request.plan.instruction
        if not self.get_parameter("cancel_owner_only").value:
            threading.Thread(
                target=self._log_cancel,
                args=(goal_key, owner, instruction, self._canceller),
                daemon=True,
                name="cancel_log",
            ).start()
            return CancelResponse.ACCEPT
        canceller = self._canceller(goal_key)
        deadline = time.monotonic() + CANCELLER_WAIT_S
        while owner is None and time.monotonic() < deadline:  # its send_goal event may still be on its way
            time.sleep(0.01)
            with self._requests_lock:
                owner = self._goal_senders.get(goal_key)
        if owner is None or canceller is None:
            self.get_logger().warning(
                f"cancel_owner_only: the sender of the goal or of its cancel is unknown "
                f"(no introspection event within {CANCELLER_WAIT_S:g} s): the cancel is taken"
            )
        if owner is not None and canceller is not None and canceller[:12] != owner[:12]:
            self.get_logger().warning(
                f"cancel of {self._goal_text(goal_key, owner, instruction)} by "
                f"{self._clients_of(canceller)} refused: cancel_owner_only"
            )
            return CancelResponse.REJECT
        self._log_cancel(goal_key, owner, instruction, lambda _key: canceller)
        return CancelResponse.ACCEPT

    def _goal_text(self, goal_key: bytes, owner: bytes | None, instruction: str) -> str:
        return f"goal {goal_key.hex()[:8]} ({instruction!r}, sent by {self._clients_of(owner)})"

    def _log_cancel(self, goal_key: bytes, owner: bytes | None, instruction: str, canceller_of) -> None:
        note = (
            f"cancel of {self._goal_text(goal_key, owner, instruction)} requested by "
            f"{self._clients_of(canceller_of(goal_key))}"
        )
        self._cancel_notes[goal_key] = note
        self.get_logger().warning(note)

    @staticmethod
    def _watch_cancel(goal_handle, cancel: threading.Event) -> None:
        # a cancel request must reach the executor even while a long motion gives no feedback
        while not cancel.wait(0.02):
            if goal_handle.is_cancel_requested:
                cancel.set()

    def _publish_result(
        self, outcome, instruction: str, dry_run: bool, scene_success: bool | None = None, approved: bool | None = None
    ) -> None:
        closed = isinstance(outcome, ClosedLoopResult)
        msg = execution_result_msg(
            rclpy_type,
            outcome,
            instruction,
            dry_run,
            scene_success,
            condition=CLOSED_LOOP if closed else "open_loop",
            replans=outcome.replans if closed else 0,
            stamp_ns=self.get_clock().now().nanoseconds,
        )
        self.last_result = execution_result_from_msg(msg)
        if closed:  # in-process callers get the loop's attempts and plans too (the message carries outcomes)
            self.last_result.update(
                {k: v for k, v in outcome.to_dict().items() if k in ("attempts", "plans", "failure_mode")}
            )
        if approved is not None:  # the message says it in its text ("not approved: ...")
            self.last_result["approved"] = approved
        self._result_pub.publish(msg)


def goal_poses(plan_msg) -> list[GoalPose]:
    """The target of every action of a GroundedPlan message that has a pose, as plain values for check_poses."""
    out = []
    for step, action in enumerate(plan_msg.actions):
        header, pose, n = action.pose.header, action.pose.pose, action.normal
        if header.frame_id:
            p, q = pose.position, pose.orientation
            out.append(
                GoalPose(
                    step,
                    str(action.type),
                    str(header.frame_id),
                    (p.x, p.y, p.z),
                    (q.x, q.y, q.z, q.w),
                    action.width,
                    (n.x, n.y, n.z),
                )
            )
    return out


def _make_backend(name: str, config):
    if name == "moveit":
        return make_backend(name, config, **moveit_backend_args())
    return make_backend(name, config)


def main(args=None) -> None:
    run_node(ExecutorNode, "executor_node", num_threads=4, args=args)


if __name__ == "__main__":
    main()
