"""console_node: serves the operator console (grounded_planner.console) and is its way into the graph — the plan
service, the execute action, the approve service, and the planner, executor and rollout topics."""

from __future__ import annotations

import io
import threading
import time
from typing import Callable

import rclpy
from PIL import Image as PILImage
from rclpy.action import ActionClient
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.qos import DurabilityPolicy, QoSProfile
from action_msgs.msg import GoalStatus
from action_msgs.srv import CancelGoal
from std_msgs.msg import String
from service_msgs.msg import ServiceEventInfo
from std_srvs.srv import SetBool, Trigger

from grounded_planner.errors import InputError
from grounded_planner_interfaces.action import ExecutePlan
from grounded_planner_interfaces.srv import GetGroundedPlan
from grounded_planner_interfaces.msg import ExecutionEvent, ExecutionResult as ExecutionResultMsg, PlannerStatus

from grounded_planner.console.app import ConsoleApp
from grounded_planner.console.auth import console_token
from grounded_planner.console.graph import Frame, GraphError, PlanAnswer, StepPreview
from grounded_planner.console.jpeg import encode_jpeg, scale_to_width
from grounded_planner.console.server import ConsoleBindError, ConsoleServer
from grounded_planner.execution.config import ExecutorConfig
from grounded_planner.execution.executor import Executor
from grounded_planner.msgs.execution import execution_event_from_msg, execution_result_from_msg, planner_status_from_msg
from grounded_planner.msgs.images import ImageDecodeError, color_to_rgb, is_compressed
from grounded_planner.plan import GroundedPlan
from grounded_planner.ros import names
from grounded_planner.ros.client import GroundedPlannerClient
from grounded_planner.ros.convert import plan_to_msg
from grounded_planner.ros.frames import CdrError, TypedSubscription
from grounded_planner.ros.node_main import StackNode, run_node
from grounded_planner.ros.take_loop import TakeLoop
from grounded_planner.threads import name_native_thread
from grounded_planner.ros.params import (
    Param,
    declare_all,
    executor_config_file,
    expand_path,
    non_empty,
    non_negative,
    positive,
    resolve_data_path,
    values,
)


def valid_port(value) -> str | None:
    return None if 0 <= value <= 65535 else f"must be a TCP port 0-65535 (0 = any free port), got {value}"


def quality(value) -> str | None:
    return None if 1 <= value <= 100 else f"must be a JPEG quality 1-100, got {value}"


PARAMS = [
    Param(
        "host",
        "127.0.0.1",
        "address the console listens on; any address but loopback requires a token",
        non_empty,
        read_only=True,
    ),
    Param("port", 8080, "TCP port of the console (0 = any free port, printed at start)", valid_port, read_only=True),
    Param(
        "token",
        "",
        "token every request must carry on a non-loopback host ('' there = one generated and "
        "printed once at start); at least 16 characters",
        read_only=True,
    ),
    Param(
        "rollouts_dir",
        "rollouts",
        "the rollout logger's log_dir: the rollouts the console lists and labels (no file outside it is ever served)",
        non_empty,
        read_only=True,
    ),
    Param(
        "session_dir",
        "",
        "a Spa-Bench scene-card folder (`spabench cards --out DIR`) to work through ('' = no evaluation session)",
        read_only=True,
    ),
    Param(
        "color_topic",
        names.COLOR_IMAGE,
        "camera image shown live (Image, or CompressedImage: .../compressed)",
        non_empty,
        read_only=True,
    ),
    Param(
        "executor_config_file",
        "",
        "the executor's config_file, whose safety envelope judges each previewed step "
        "('' = built-in defaults, as the executor)",
        executor_config_file,
        read_only=True,
    ),
    Param(
        "executor_node",
        "executor",
        "the executor node whose require_approval (and backend: sim offers a scene reset) parameters the console reads",
        non_empty,
        read_only=True,
    ),
    Param(
        "plan_timeout_s",
        60.0,
        "how long a plan request from the console may take, seconds (any client's request unanswered this long is "
        "taken as lost)",
        positive,
    ),
    Param(
        "live_while_planning",
        False,
        "keep sending live camera frames while the planner answers a request and no goal runs (false: the live view "
        "pauses then, leaving the CPUs to the planner; frames always flow while a goal runs)",
    ),
    Param(
        "camera_idle_s",
        30.0,
        "the console leaves the camera topic this long after the last page asked for a frame, seconds, and subscribes "
        "again when one asks: with no page showing the live view, no image reaches the console",
        positive,
    ),
    Param("jpeg_quality", 80, "JPEG quality of the live camera frames (1-100)", quality),
    Param(
        "max_image_width",
        1280,
        "live frames wider than this are scaled down first, pixels (0 = no limit); a raw image is also scaled to "
        "the width the pages show it, a camera's JPEG no wider than this goes as it came",
    ),
    Param(
        "max_frame_rate",
        15.0,
        "live camera frames a second to each page at most (0 = as many as the page takes); each raw frame shown "
        "costs a JPEG encoding",
        non_negative,
        read_only=True,
    ),
]
NEWS_STOP_S = 2.0  # how long the console waits for its news and camera threads to end at shutdown, s
SERVICE_WAIT_S = 5.0  # how long an action waits for the service or action server to be there, s
BACKEND_WAIT_S = 30.0  # how long the console waits for an executor that appeared to answer parameter requests, s
APPROVAL_RETRY_S = 0.005  # how often an approval is offered again until the executor holds the goal, s


class _SentGoal:
    """A goal the executor accepted (console.graph.SentGoal): ended once the action's status topic says so."""

    ENDED = (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_ABORTED, GoalStatus.STATUS_CANCELED)

    def __init__(self, handle):
        self._handle = handle

    def ended(self) -> bool:
        return self._handle.status in self.ENDED


class ConsoleNode(StackNode, Node):
    """The console's :class:`~grounded_planner.console.graph.ConsoleGraph`, and the web server that uses it."""

    def __init__(self, node_name: str = "console", **kwargs):
        super().__init__(node_name, **kwargs)
        self._server = None
        declare_all(self, PARAMS, on_change=self._on_params_changed)
        p = values(self, PARAMS)
        self._p = p
        config_file = p["executor_config_file"]
        self._envelope = Executor(
            None, ExecutorConfig.load(resolve_data_path(config_file)) if config_file else ExecutorConfig()
        )
        group = ReentrantCallbackGroup()
        # Plan requests go out from a node of their own that the requesting thread spins itself (one request at a
        # time): the answer is taken by the thread waiting for it, not handed through the node's (in a bringup: the
        # whole graph's) multi-threaded executor to a worker and on to the waiting thread
        # (its name and namespace as given: a `-r __node:=console` that ros2 launch or the bringup passes the process
        # would otherwise rename it too, two nodes called console on the graph)
        self._plan_node = rclpy.create_node(
            f"{self.get_name()}_plan_client",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
        )
        self._plan_lock = threading.Lock()
        self._client = GroundedPlannerClient(self._plan_node)
        self._execute = ActionClient(self, ExecutePlan, names.EXECUTE_ACTION, callback_group=group)
        self._approve = self.create_client(SetBool, names.APPROVE_SERVICE, callback_group=group)
        self._reset_scene = self.create_client(Trigger, names.RESET_SCENE_SERVICE, callback_group=group)
        # the action protocol's cancel service: an empty request (zero goal id and stamp) cancels every goal, so Stop
        # works whoever sent the goal (this console, another one, a script)
        self._cancel = self.create_client(
            CancelGoal, names.EXECUTE_ACTION + "/_action/cancel_goal", callback_group=group
        )
        self._params = AsyncParameterClient(self, p["executor_node"], callback_group=group)
        self._frame_lock = threading.Lock()
        self._frame: Frame | None = None
        self._frame_msg = None  # the image self._frame shows, and its width
        self._frame_source_width = 0
        self._seq = 0
        # the camera: subscribed while pages ask for frames (latest_frame), its images taken on demand; left
        # camera_idle_s after the last ask, so that with no page showing it the stream costs the console nothing (a
        # 1280x720 rgb8 stream's receive alone was 3.8 % of a core, a subscription whose images nobody took). Its
        # subscription is in a node that no executor spins, its type checked at a page's ask and its idle time watched
        # by a thread of its own: as a timer or an entity of this node, each check, each subscribing and each leaving
        # (twice per plan request with a page open: the live view pauses) woke the executor to build its wait set of
        # 34 entities again, about 1.4 ms of CPU each time (0.3 ms a second with nothing to do)
        self._camera_node = self._quiet_node("camera")
        self._camera: TypedSubscription | None = None
        self._frames_asked_at = 0.0
        self._closing = False
        self._camera_changed = threading.Condition(self._frame_lock)
        self._camera_watch = threading.Thread(target=self._watch_camera, name="console-camera", daemon=True)
        self._camera_watch.start()
        token, generated = console_token(p["host"], p["token"])
        self.app = ConsoleApp(
            self,
            rollouts_dir=expand_path(p["rollouts_dir"]),
            token=token,
            session_dir=expand_path(p["session_dir"]),
            plan_timeout_s=p["plan_timeout_s"],
            note=lambda line: self.get_logger().info(line),
            max_frame_rate=p["max_frame_rate"],
            live_while_planning=p["live_while_planning"],
        )
        # The graph's news (the planner's requests and status, the executor's progress, closed rollouts) comes to a
        # node of its own, taken on a thread of its own by a TakeLoop: under rclpy's executor, which builds its wait
        # set anew from every entity of its nodes two or three times per message, it cost the console 6.5 ms of CPU
        # per plan request any client made (4.6 ms in a node of its own); see ros/take_loop.py
        self._news_node = self._quiet_node("news")
        news = self._news_node
        qos = QoSProfile(depth=20)
        news.create_subscription(
            PlannerStatus,
            names.PLANNER_STATUS,
            lambda m: self.app.state.on_planner_status(planner_status_from_msg(m)),
            qos,
        )
        news.create_subscription(  # any client's plan request: when the planner got it and answered it
            GetGroundedPlan.Event, names.PLAN_SERVICE_EVENTS, self._on_plan_event, QoSProfile(depth=50)
        )
        news.create_subscription(  # only the executor publishes it: its publisher gone, the executor is gone
            ExecutionEvent,
            names.EXECUTION_FEEDBACK,
            lambda m: self.app.state.on_feedback(execution_event_from_msg(m)),
            qos,
            event_callbacks=SubscriptionEventCallbacks(matched=self._on_executor_matched),
        )
        news.create_subscription(
            ExecutionResultMsg,
            names.EXECUTION_RESULT,
            lambda m: self.app.state.on_result(execution_result_from_msg(m)),
            qos,
        )
        news.create_subscription(
            String,
            names.ROLLOUT_CLOSED,
            lambda m: self.app.on_rollout_closed(m.data),
            QoSProfile(depth=5, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )
        self._news = TakeLoop(
            news.subscriptions, self.context, "console-news", lambda line: self.get_logger().error(line)
        )
        self._server = ConsoleServer(self.app, p["host"], p["port"]).start()
        url = self._server.url
        if generated:  # printed once, here only (not in the ROS log): whoever started the console hands it on
            print(f"console: token {token} (open {url}?token={token})", flush=True)
        self.get_logger().info(
            f"console on {url}{' (token required)' if token else ''}; rollouts from "
            f"{p['rollouts_dir']}{'; session ' + p['session_dir'] if p['session_dir'] else ''}"
        )

    def _quiet_node(self, role: str) -> Node:
        """A node of the console's, ``<name>_<role>``, that no executor spins and nothing sets parameters on (its name
        and namespace as given: a `-r __node:=console` that ros2 launch or the bringup passes the process would
        otherwise rename it too)."""
        return rclpy.create_node(
            f"{self.get_name()}_{role}",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,  # nothing to set on it
            parameter_overrides=[Parameter("start_type_description_service", value=False)],
        )

    def _on_executor_matched(self, info) -> None:
        """The executor's feedback publisher matched or left (DDS tells at once of a node that stopped, within its
        participant lease, 20 s, of a process that was killed): the console shows the executor gone or back."""
        if info.current_count_change == 0:
            return
        line = self.app.state.on_executor_presence(info.current_count > 0)  # the pages' log has it with the change
        if info.current_count > 0:  # (again: another executor may have come in its place) which robot it drives
            threading.Thread(target=self._read_executor_backend, name="console-backend", daemon=True).start()
        if line:
            (self.get_logger().warning if info.current_count == 0 else self.get_logger().info)(line)

    def _read_executor_backend(self) -> None:
        """The executor's ``backend`` parameter, for the pages (a scene reset is offered on ``sim`` only)."""
        try:
            if not self._params.wait_for_services(timeout_sec=BACKEND_WAIT_S):
                return  # no answer: the pages offer no reset (the service itself would still say what it can do)
            future = self._params.get_parameters(["backend"])
            if self._wait(future, SERVICE_WAIT_S) and future.result() is not None and future.result().values:
                self.app.state.on_executor_backend(future.result().values[0].string_value)
        except Exception as exc:  # noqa: BLE001 - the console shutting down meanwhile; nothing to show then
            self.get_logger().debug(f"the executor's backend was not read: {exc}")

    def _on_params_changed(self, changed: dict) -> None:
        app = getattr(self, "app", None)
        if app is None:
            return
        if "live_while_planning" in changed:
            app.live_while_planning = bool(changed["live_while_planning"])
        if "plan_timeout_s" in changed:
            app.plan_timeout_s = app.plan_requests.lost_after_s = float(changed["plan_timeout_s"])

    def _on_plan_event(self, event) -> None:
        key = (bytes(event.info.client_gid), event.info.sequence_number)
        if event.info.event_type == ServiceEventInfo.REQUEST_RECEIVED:
            self.app.plan_requests.started(key)
        elif event.info.event_type == ServiceEventInfo.RESPONSE_SENT:
            self.app.plan_requests.answered(key)

    @property
    def url(self) -> str:
        return self._server.url

    # -- waiting on futures (the node spins in its executor; these calls come from the web server's threads) -------
    @staticmethod
    def _wait(future, timeout_s: float) -> bool:
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        return done.wait(timeout_s) or future.done()

    # -- ConsoleGraph -----------------------------------------------------------------------------------------------
    def plan(self, instruction: str, timeout_s: float, sent: Callable[[], None]) -> PlanAnswer:
        with self._plan_lock:
            result = self._client.plan(
                instruction, backproject=True, timeout_s=timeout_s, service_wait_s=SERVICE_WAIT_S, on_sent=sent
            )
        plan = result.plan
        if plan is None:
            return PlanAnswer(False, result.message, None, [], result.duration_s)
        return PlanAnswer(result.succeeded, result.message, plan.to_dict(), self._preview(plan), result.duration_s)

    def _preview(self, plan: GroundedPlan) -> list[StepPreview]:
        """Each step with its 3D target and width, and the safety envelope's verdict (the executor's own check,
        run without a robot: a dry run of the plan's motions)."""
        verdicts: dict[int, tuple[str, str]] = {}
        try:
            checked = self._envelope.execute(plan, dry_run=True)
            verdicts = {s.index: (str(getattr(s.outcome, "value", s.outcome)), s.message) for s in checked.steps}
        except InputError as exc:  # no 3D target, a NaN: the executor would refuse the goal
            verdicts = {i: ("invalid", str(exc)) for i in range(len(plan.actions))}
        steps = []
        for i, action in enumerate(plan.actions):
            t = action.target_3d
            verdict, message = verdicts.get(i, ("", ""))
            steps.append(
                StepPreview(
                    index=i,
                    type=action.type,
                    object=action.object,
                    target=action.target,
                    bbox=None if action.bbox is None else [float(v) for v in action.bbox],
                    point=None if action.point is None else [float(v) for v in action.point],
                    position_m=None if t is None else [float(v) for v in t.position],
                    frame="" if t is None else t.frame,
                    width_m=None if t is None or t.width is None else float(t.width),
                    verdict=verdict,
                    verdict_message=message,
                )
            )
        return steps

    def requires_approval(self) -> bool:
        if not self._params.wait_for_services(timeout_sec=SERVICE_WAIT_S):
            raise GraphError(f"the executor node {self._p['executor_node']!r} does not answer parameter requests")
        future = self._params.get_parameters(["require_approval"])
        if not self._wait(future, SERVICE_WAIT_S) or future.result() is None:
            raise GraphError("the executor did not say whether it requires approval")
        values_ = future.result().values
        return bool(values_ and values_[0].bool_value)

    def execute(self, plan: dict, hold: bool = False) -> _SentGoal:
        if not self._execute.wait_for_server(timeout_sec=SERVICE_WAIT_S):
            raise GraphError.no_executor(names.EXECUTE_ACTION)
        goal = ExecutePlan.Goal(plan=plan_to_msg(GroundedPlan.from_dict(plan)), require_approval=bool(hold))
        future = self._execute.send_goal_async(goal)
        if not self._wait(future, SERVICE_WAIT_S):
            raise GraphError("the executor did not answer the goal")
        if not future.result().accepted:
            raise GraphError("the executor rejected the goal (busy with another plan, or not active)")
        return _SentGoal(future.result())

    def _offered(self, client, name: str) -> None:
        """GraphError when no executor offers the service ``client`` calls (``name``: what the message names)."""
        if not client.wait_for_service(timeout_sec=SERVICE_WAIT_S):
            raise GraphError.no_executor(name)

    def _answer(self, client, request, name: str) -> tuple[bool, str]:
        """One call of the executor's ``name`` service (a SetBool or a Trigger): (success, message)."""
        future = client.call_async(request)
        if not self._wait(future, SERVICE_WAIT_S) or future.result() is None:
            raise GraphError(f"{name} did not answer")
        return bool(future.result().success), str(future.result().message)

    def answer_approval(self, approved: bool, wait_s: float) -> tuple[bool, str]:
        self._offered(self._approve, names.APPROVE_SERVICE)
        deadline = time.monotonic() + wait_s
        while True:
            taken, message = self._answer(self._approve, SetBool.Request(data=bool(approved)), names.APPROVE_SERVICE)
            if taken or time.monotonic() >= deadline:
                return taken, message
            time.sleep(APPROVAL_RETRY_S)  # the goal was accepted; the executor holds it a moment later

    def reset_scene(self) -> tuple[bool, str]:
        self._offered(self._reset_scene, names.RESET_SCENE_SERVICE)
        return self._answer(self._reset_scene, Trigger.Request(), names.RESET_SCENE_SERVICE)

    def stop(self) -> bool:
        self._offered(self._cancel, names.EXECUTE_ACTION)  # the action's cancel service
        future = self._cancel.call_async(CancelGoal.Request())
        cancelled = (
            self._wait(future, SERVICE_WAIT_S)
            and future.result() is not None
            and len(future.result().goals_canceling) > 0
        )
        if self._approve.service_is_ready():  # a goal held for approval: refuse it too
            self._approve.call_async(SetBool.Request(data=False))
        return cancelled

    def _subscribed_camera(self) -> TypedSubscription:
        """The camera subscription, made at the first ask after none, its type checked where due (caller holds the
        frame lock)."""
        self._frames_asked_at = time.monotonic()
        if self._camera is None:
            self._camera = TypedSubscription(
                self._camera_node,
                self._p["color_topic"],
                "colour image",
                lambda _msg: None,
                QoSProfile(depth=2),
                on_demand=True,
                checked_by_owner=True,
                read_by_rosbags=True,  # only shown: rclpy's conversion of a 1280x720 image cost 1.5-2.6 ms a frame
            )
            self._camera_changed.notify()  # the watch counts camera_idle_s from now
        else:
            self._camera.check_if_due()
        return self._camera

    def _leave_camera(self) -> None:
        """Leave the camera topic, where subscribed (caller holds the frame lock); the next ask subscribes again."""
        if self._camera is not None:
            self._camera.destroy()
            self._camera = None

    def _watch_camera(self) -> None:
        """Leaves the camera topic camera_idle_s after the last ask; sleeps while the console is not subscribed."""
        name_native_thread()
        with self._frame_lock:
            while not self._closing:
                if self._camera is None:
                    self._camera_changed.wait()
                    continue
                left_s = self._frames_asked_at + self.get_parameter("camera_idle_s").value - time.monotonic()
                if left_s <= 0:
                    self._leave_camera()
                else:
                    self._camera_changed.wait(left_s)

    def frames_paused(self) -> None:
        """The live view paused while the planner works: the console leaves the camera topic until a page next asks
        for a frame. Subscribed, the middleware goes on receiving every image (a raw 1280x720 30 Hz stream: 2.7 MB
        each), which was three quarters of the console's CPU while the planner worked with a page open (15 of 21 ms
        per request in Fast DDS's receive threads, benchmarks/bench_console.py --pairs)."""
        with self._frame_lock:
            self._leave_camera()

    @property
    def camera_subscribed(self) -> bool:
        return self._camera is not None

    def latest_frame(self, after_seq: int, width: int = 0, wanted: Callable[[], bool] | None = None) -> Frame | None:
        with self._frame_lock:
            try:
                msg = self._subscribed_camera().take()
                if msg is None and self._sharper_wanted(width):
                    # a still camera, and a page wider than the last frame was encoded for (a window made wider, a
                    # second page): the same image again at that width. Never narrower: a narrower page scales it
                    # down itself, so two pages of different widths never take turns encoding one image
                    msg = self._frame_msg
                if msg is not None:
                    frame = self._passed_through(msg) or self._encoded(msg, width, wanted)
                    if frame is None:  # the live view paused while the image was read and scaled: not encoded
                        return None
                    self._frame = frame
            except (ImageDecodeError, CdrError) as exc:  # an image the console cannot read or show; the rest goes on
                self.get_logger().error(
                    f"camera frame not shown: {type(exc).__name__}: {exc}", throttle_duration_sec=10.0
                )
                return None
            frame = self._frame
        return frame if frame is not None and frame.seq > after_seq else None

    def _sharper_wanted(self, shown: int) -> bool:
        if self._frame is None or self._frame_msg is None:
            return False
        limit = self._width_limit(shown)
        return self._frame.width < min(limit or self._frame_source_width, self._frame_source_width)

    def _stamped(self, msg, width: int, height: int, jpeg: bytes) -> Frame:
        self._seq += 1
        stamp = msg.header.stamp
        return Frame(self._seq, stamp.sec * 1_000_000_000 + stamp.nanosec, width, height, jpeg)

    def _width_limit(self, shown: int) -> int:
        """The widest a frame goes to the pages: ``max_image_width``, or narrower where the pages show it narrower
        (0 = no limit)."""
        limits = [w for w in (self.get_parameter("max_image_width").value, shown) if w > 0]
        return min(limits, default=0)

    def _passed_through(self, msg) -> Frame | None:
        """A JPEG CompressedImage (image_transport's ``compressed``) no wider than ``max_image_width`` goes to the
        browser as it came, however narrow the pages show it (they scale it down themselves): no decoding, no
        encoding. None for anything else. Scaling the camera's 1280x720 JPEG to a laptop's 832 px and encoding it
        again cost the console 8.2 ms of CPU per displayed frame against 2.0 ms passed through, for 4x the bytes (125
        against 29 kB at the camera's quality 95 and the console's 80; benchmarks/bench_console.py --camera
        compressed): the robot's CPU is the scarcer, and ``max_image_width`` caps the bytes where the link is not."""
        if not is_compressed(msg) or "jpeg" not in str(msg.format).lower():
            return None
        jpeg = bytes(msg.data)
        try:
            width, height = PILImage.open(io.BytesIO(jpeg)).size  # reads the header only
        except (OSError, SyntaxError) as exc:
            raise ImageDecodeError(f"CompressedImage format {msg.format!r}: not a JPEG ({exc})") from exc
        limit = self.get_parameter("max_image_width").value
        if limit > 0 and width > limit:
            return None
        self._frame_msg, self._frame_source_width = msg, width
        return self._stamped(msg, width, height, jpeg)

    def _encoded(self, msg, shown: int, wanted: Callable[[], bool] | None = None) -> Frame | None:
        """``msg`` scaled to the pages' width and encoded; None when ``wanted()`` says, before the encoding (the
        larger part of a frame's CPU), that the live view paused meanwhile."""
        rgb = color_to_rgb(msg)
        self._frame_msg, self._frame_source_width = msg, rgb.shape[1]
        limit = self._width_limit(shown)
        if limit and rgb.shape[1] > limit:
            rgb = scale_to_width(rgb, limit)
        if wanted is not None and not wanted():
            return None
        jpeg = encode_jpeg(rgb, self.get_parameter("jpeg_quality").value)
        return self._stamped(msg, rgb.shape[1], rgb.shape[0], jpeg)

    def destroy_node(self):
        if self._server is not None:
            self._server.stop()
            self._server = None
        news_node = getattr(self, "_news_node", None)  # absent when __init__ refused a parameter
        if news_node is not None:
            self._news_node = None
            news = getattr(self, "_news", None)
            if news is not None and not news.stop(NEWS_STOP_S):  # in a callback: rclpy frees its handles after it
                self.get_logger().warning(f"the console's news thread did not end within {NEWS_STOP_S:g} s")
            news_node.destroy_node()
        camera_node = getattr(self, "_camera_node", None)
        if camera_node is not None:
            with self._frame_lock:
                self._closing = True
                self._camera_changed.notify()
                self._leave_camera()
            self._camera_watch.join(NEWS_STOP_S)
            camera_node.destroy_node()
            self._camera_node = None
        plan_node = getattr(self, "_plan_node", None)
        if plan_node is not None:
            with self._plan_lock:
                self._client.destroy()
                plan_node.destroy_node()
            self._plan_node = None
        return super().destroy_node()


# One executor thread: every callback of the console is short (a state update; the closed rollout's tally reads one
# record), and the web server's threads wait on their futures themselves. rclpy's multi-threaded executor built its
# wait set twice per message and handed each callback to a worker: 5.9 ms of the console's CPU per plan request any
# client made, 3.8 ms with one thread (this node on its own, 2 CPUs).
CONSOLE_THREADS = 1


def main(args=None) -> None:
    try:
        run_node(ConsoleNode, "console_node", num_threads=CONSOLE_THREADS, args=args)
    except ConsoleBindError as exc:  # a port that is taken: one line naming the address, not a traceback
        raise SystemExit(f"console_node: {exc}") from None


def run_console(values_: dict) -> None:
    """`grounded-planner console`: the node with these parameter values (as typed: no YAML parsing of a token)."""
    overrides = [Parameter(name, value=value) for name, value in values_.items()]
    run_node(lambda: ConsoleNode(parameter_overrides=overrides), "console", num_threads=CONSOLE_THREADS, args=[])


if __name__ == "__main__":
    main()
