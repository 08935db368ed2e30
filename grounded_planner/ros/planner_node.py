"""planner_node: the `/grounded_planner/plan` service — a VLM turns an image and an instruction into a grounded plan."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.event_handler import PublisherEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.service_introspection import ServiceIntrospectionState
from sensor_msgs.msg import CameraInfo, Image
from visualization_msgs.msg import MarkerArray

from grounded_planner.errors import InputError
from grounded_planner.plan import GroundedPlan
from grounded_planner.ros.after_response import AfterResponse
from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg, PlannerStatus
from grounded_planner_interfaces.srv import GetGroundedPlan

from grounded_planner.msgs.execution import planner_status_msg
from grounded_planner.ros import names
from grounded_planner.msgs.images import ImageDecodeError, color_to_rgb, depth_to_numpy, is_compressed
from grounded_planner.ros.convert import numpy_to_image, plan_to_msg
from grounded_planner.ros.frames import (
    BACKPROJECTION_PARAMS,
    FRESHNESS_PARAMS,
    PLAN_FRAMES_QOS,
    LatestFrames,
    Snapshot,
    backproject,
    depth_info_topic,
    frame_check,
    stamp_ns,
)
from grounded_planner.ros.msg_types import rclpy_type
from grounded_planner.ros.node_main import StackNode, run_node
from grounded_planner.ros.params import (
    Param,
    ParameterError,
    declare_all,
    existing_file,
    expand_path,
    non_empty,
    non_negative,
    one_of,
    positive,
    resolve_data_path,
    values,
)
from grounded_planner.ros.visualize import draw_plan_overlay, plan_markers
from grounded_planner.vlm.errors import VLMBusyError, VLMConfigError
from grounded_planner.vlm.gate import RequestGate
from grounded_planner.vlm.config import BACKENDS, PlannerConfig
from grounded_planner.vlm.factory import make_planner
from grounded_planner.geometry.extrinsics import Extrinsics


PARAMS = [
    Param(
        "backend",
        "openai",
        "VLM backend: openai (any OpenAI-compatible server) | gemini | transformers | replay | decoupled",
        one_of(*BACKENDS),
    ),
    Param("model", "", "model name on the server, Gemini model id, or local path for transformers"),
    Param("base_url", "", "OpenAI-compatible server root including /v1, e.g. http://localhost:8000/v1"),
    Param(
        "base_urls",
        [""],
        "more servers of the same model (the CLI's server pool): each request goes to the least "
        "loaded of base_url and these, and around a dead or hung one; [''] = base_url alone",
    ),
    Param("api_key_env", "", "environment variable holding the API key ('' = OPENAI_API_KEY / GEMINI_API_KEY)"),
    Param(
        "timeout_s",
        60.0,
        "wall-clock limit of one plan request (model calls, retries, repair re-prompts, parsing), seconds",
        positive,
    ),
    Param("max_retries", 1, "extra VLM tries on connection errors / 429 / 5xx", non_negative),
    Param(
        "prompt_family",
        "auto",
        "prompt and coordinate convention: auto | qwen3 | gemini | pixel",
        one_of("auto", "qwen3", "gemini", "pixel"),
    ),
    Param("replay_file", "", "JSONL of recorded plans for backend replay", existing_file),
    Param("record_file", "", "append every returned plan to this JSONL ('' = off; replayable later)"),
    Param(
        "color_topic",
        names.COLOR_IMAGE,
        "colour image used when a request's image is empty (Image, or CompressedImage jpeg/png: .../compressed)",
        non_empty,
        read_only=True,
    ),
    *BACKPROJECTION_PARAMS,
    Param(
        "frame_wait_s",
        5.0,
        "how long a request waits for a camera frame set that is there, fresh and one instant, seconds",
        non_negative,
    ),
    *FRESHNESS_PARAMS,
    Param(
        "max_concurrent_requests",
        4,
        "VLM requests in flight at once; one more is answered at once with success false, "
        "'busy: ...' (replayed plans, cache hits and requests failing before the model never count)",
        positive,
        read_only=True,
    ),
    Param(
        "request_queue_depth",
        100,
        "plan requests the service queue holds while they wait for a thread (DDS drops requests beyond it unanswered)",
        positive,
        read_only=True,
    ),
]
# Executor threads beyond the VLM slots: fast requests (busy refusals, errors, replay), camera subscriptions and
# parameter services are served even while max_concurrent_requests slow VLM requests hold a thread each.
SPARE_THREADS = 4
# Parameters that change which planner is built: a change rebuilds it on the next request.
PLANNER_PARAMS = {
    "backend",
    "model",
    "base_url",
    "base_urls",
    "api_key_env",
    "timeout_s",
    "max_retries",
    "prompt_family",
    "replay_file",
    "record_file",
}


def planner_config(p: dict):
    """The PlannerConfig the node's parameter values describe (ValueError when they do not fit together)."""

    return PlannerConfig(
        backend=p["backend"],
        model=p["model"],
        base_url=p["base_url"],
        base_urls=[u for u in p["base_urls"] if u],
        api_key_env=p["api_key_env"],
        timeout_s=p["timeout_s"],
        max_retries=p["max_retries"],
        prompt_family=p["prompt_family"],
        replay_file=resolve_data_path(p["replay_file"]),
        record_file=expand_path(p["record_file"]),
    )


@dataclass(frozen=True)
class Answered:
    """A plan request the service has answered: what the work after the answer publishes and logs."""

    instruction: str
    plan_msg: Any  # the GroundedPlan message sent in the response
    plan: GroundedPlan  # the same plan, as the model
    image_rgb: np.ndarray | None  # (H, W, 3) uint8: the image planned on (the overlay's background)
    header: Any  # the colour frame's std_msgs/Header
    success: bool
    message: str
    backprojected: bool  # the plan carries 3D targets (published on the targets topic too)
    duration_s: float  # request received -> response built
    note: str  # why back-projection did not happen, or ''
    frames: Any  # the frames.Snapshot the plan was made on, or None


class PlannerNode(StackNode, Node):
    """Serves ``/grounded_planner/plan``; publishes the last plan, its RViz markers and an overlay image.

    Requests run in a reentrant callback group on a multi-threaded executor, so a slow or dead VLM blocks
    only the thread serving that request: camera subscriptions and other requests keep being served.
    """

    def __init__(self, node_name: str = "planner", **kwargs):
        super().__init__(node_name, **kwargs)
        self._planner = None
        self._planner_lock = threading.Lock()
        self._extrinsics = None
        declare_all(self, PARAMS, on_change=self._on_params_changed)
        p = values(self, PARAMS)
        self._check_startup(p)
        self._frames = LatestFrames(
            self,
            p["color_topic"],
            p["depth_topic"],
            p["camera_info_topic"],
            callback_group=MutuallyExclusiveCallbackGroup(),
            depth_camera_info_topic=depth_info_topic(p["depth_camera_info_topic"], p["depth_topic"]),
        )
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._plan_pub = self.create_publisher(GroundedPlanMsg, names.LAST_PLAN, latched)
        self._markers_pub = self.create_publisher(MarkerArray, names.PLAN_MARKERS, latched)
        # The overlay (a full-size image) is drawn and published only while someone subscribes, as image_transport
        # publishers do; a subscriber that comes later gets the last plan's overlay when it matches, as from any
        # latched topic. Drawing and publishing 2.8 MB for nobody delayed the next request by ~2.5 ms.
        self._overlay_lock = threading.Lock()
        self._overlay_source = None  # (plan, image_rgb, header) of the newest answer, until its overlay is drawn
        self._overlay_rgb, self._overlay_header, self._overlay_sent = None, None, True
        self._overlay_pub = self.create_publisher(
            Image, names.OVERLAY, latched, event_callbacks=PublisherEventCallbacks(matched=self._on_overlay_matched)
        )
        # for the rollout logger: every request's outcome, and the 3D targets of back-projected plans
        self._status_pub = self.create_publisher(PlannerStatus, names.PLANNER_STATUS, QoSProfile(depth=10))
        self._targets_pub = self.create_publisher(GroundedPlanMsg, names.TARGETS, QoSProfile(depth=10))
        # the frame set each plan was made on, for the rollout logger (published only while someone subscribes; the
        # newest set nobody was matched for yet goes out when a subscriber matches)
        self._frames_lock = threading.Lock()
        self._frames_unsent = None  # (image_rgb, header, frames) of the newest answer, while no subscriber matched
        self._frames_pubs = (
            self.create_publisher(
                Image,
                names.PLAN_FRAMES_COLOR,
                PLAN_FRAMES_QOS,
                event_callbacks=PublisherEventCallbacks(matched=self._on_frames_matched),
            ),
            self.create_publisher(Image, names.PLAN_FRAMES_DEPTH, PLAN_FRAMES_QOS),
            self.create_publisher(CameraInfo, names.PLAN_FRAMES_CAMERA_INFO, PLAN_FRAMES_QOS),
        )
        self._gate = RequestGate(p["max_concurrent_requests"])
        self.executor_threads = p["max_concurrent_requests"] + SPARE_THREADS  # read by run_node
        service = self.create_service(
            GetGroundedPlan,
            names.PLAN_SERVICE,
            self._on_request,
            qos_profile=QoSProfile(depth=p["request_queue_depth"]),
            callback_group=ReentrantCallbackGroup(),
        )
        # when each request came and was answered (metadata, no contents), on PLAN_SERVICE_EVENTS: the console pauses
        # its live view meanwhile
        service.configure_introspection(self.get_clock(), QoSProfile(depth=10), ServiceIntrospectionState.METADATA)
        self._visuals = AfterResponse(service, thread_name_prefix="planner_visuals")
        self.requests_served = 0
        self.get_logger().info(f"serving {names.PLAN_SERVICE} with backend {p['backend']} {p['model'] or ''}".rstrip())

    def _on_params_changed(self, changed: dict) -> None:
        if PLANNER_PARAMS & set(changed):
            with self._planner_lock:
                if self._planner is not None:
                    self._planner.close()
                self._planner = None
        if "extrinsics_file" in changed:
            self._extrinsics = None

    # -- building blocks ---------------------------------------------------------------------------
    def _check_startup(self, p: dict) -> None:
        """Refuse at startup (ParameterError naming the parameter) what would otherwise fail only at the first request."""
        try:
            config = planner_config(p)
        except VLMConfigError as exc:
            raise ParameterError(f"{self.get_name()}: {str(exc).replace('PlannerConfig.', 'parameter ')}") from exc
        if config.backend == "replay":  # cheap to load, and a bad recording should stop the node now
            try:
                self.planner()
            except VLMConfigError as exc:  # unreadable, or a line that is no replay record
                raise ParameterError(f"{self.get_name()}: parameter 'replay_file' {exc}") from exc

    def planner(self):
        """The planner for the current parameters (built on first use; VLMError/ValueError when it cannot be)."""

        with self._planner_lock:
            if self._planner is None:
                self._planner = make_planner(planner_config(values(self, PARAMS)))
            return self._planner

    def extrinsics(self):
        path = self.get_parameter("extrinsics_file").value
        if not path:
            return None
        if self._extrinsics is None:
            self._extrinsics = Extrinsics.load(resolve_data_path(path))
        return self._extrinsics

    # -- the service -------------------------------------------------------------------------------
    def _on_request(self, request: GetGroundedPlan.Request, response: GetGroundedPlan.Response):
        started = time.monotonic()
        self.requests_served += 1
        try:
            with self._gate.request():
                plan, header, image_rgb, note, frames = self.plan(request)
        except VLMBusyError as exc:  # not a planning failure: no planner_status (it would end the open episode)
            response.success, response.message = False, str(exc)
            self.get_logger().warning(f"plan request {request.instruction!r} refused: {exc}", throttle_duration_sec=1.0)
            return response
        except Exception as exc:  # noqa: BLE001 - every failure becomes success:false with its reason; the node keeps serving
            response.success = False
            response.message = f"{type(exc).__name__}: {exc}"
            self.get_logger().warning(
                f"plan request {request.instruction!r} failed after "
                f"{time.monotonic() - started:.2f} s: {response.message}"
            )
            self._publish_status(request.instruction, False, response.message, started)
            return response
        response.plan = plan_to_msg(plan, header=header)
        backprojected = bool(plan.actions) and plan.is_backprojected
        response.success = backprojected or not request.backproject or not plan.actions
        response.message = "; ".join(m for m in (plan.reason, note) if m)
        # Everything else happens after the answer is sent, in order, on one worker thread: the plan, its targets and
        # the status for the rollout logger (the plan first: it opens the episode), the log line (rclpy's logger
        # looks up its caller's source file, ~10 ms here), the overlay and the markers.
        duration_s = time.monotonic() - started
        self._visuals.submit(
            response,
            self._after_answer,
            Answered(
                request.instruction,
                response.plan,
                plan,
                image_rgb,
                header,
                response.success,
                response.message,
                backprojected,
                duration_s,
                note,
                frames,
            ),
        )
        return response

    def _after_answer(self, a: Answered) -> None:
        try:
            self._publish_frames(a.image_rgb, a.header, a.frames)  # before the plan, which opens the episode
            self._plan_pub.publish(a.plan_msg)
            if a.backprojected:
                self._targets_pub.publish(a.plan_msg)
            self._status_pub.publish(
                planner_status_msg(
                    rclpy_type,
                    a.instruction,
                    a.success,
                    a.message,
                    len(a.plan.actions),
                    a.backprojected,
                    duration_s=a.duration_s,
                    stamp_ns=self.get_clock().now().nanoseconds,
                )
            )
            self.get_logger().info(
                f"plan for {a.instruction!r}: {len(a.plan.actions)} action(s) from "
                f"{a.plan.model or 'model'} in {a.duration_s:.2f} s{' — ' + a.note if a.note else ''}"
            )
        except Exception as exc:  # noqa: BLE001 - the answer is out; a publishing problem must not take the planner down
            self.get_logger().error(f"plan/status not published: {type(exc).__name__}: {exc}")
        self._publish_visuals(a.plan, a.image_rgb, a.header)

    def plan(self, request: GetGroundedPlan.Request):
        """(plan, header, image_rgb, note, frames) for a request; the plan carries its 3D targets when back-projected;
        ``frames`` is the Snapshot of the frame set it was made on (None for a request that brought its image and
        asked for no back-projection).

        Raises on any failure before a plan exists (StaleFrameError, UnmatchedFramesError: the frames taken before
        the model call were old or not one instant); a failed back-projection leaves the plan in pixels and says
        why in note.
        """
        wait_s = self.get_parameter("frame_wait_s").value
        given = bool(request.image.width and request.image.height)
        # colour, depth and camera_info taken together, once, before the model call: the depth that locates the
        # plan is of the instant the model saw (StaleFrameError / UnmatchedFramesError otherwise)
        keys = ("color",) if not given else ()
        optional: tuple[str, ...] = ()
        if request.backproject:
            keys, optional = keys + ("depth", "camera_info"), ("depth", "camera_info")
        snap = None
        if keys:
            given_ns = stamp_ns(request.image) if given else None  # 0 (unstamped): not checked
            snap = self._frames.wait_for(keys, wait_s, frame_check(self, given_ns), optional=optional)
            if given:
                snap.color = None  # the request's image, not the topic's
            if not request.backproject:
                snap.depth = snap.camera_info = snap.depth_camera_info = None  # not taken with this colour image
        image_msg = request.image if given else snap.color
        image_rgb = color_to_rgb(image_msg)  # ImageDecodeError (a ValueError) names the encoding
        plan = self.planner().plan(image_rgb, request.instruction)
        header = image_msg.header
        if not header.frame_id:
            header.frame_id = "camera_color_optical_frame"
        if not request.backproject or not plan.actions:
            return plan, header, image_rgb, "", snap
        if snap.depth is None or snap.camera_info is None:
            missing = [self._frames.topics[k] for k in ("depth", "camera_info") if getattr(snap, k) is None]
            return (
                plan,
                header,
                image_rgb,
                (
                    f"back-projection failed: NoFrameError: nothing received on "
                    f"{', '.join(missing)} within {wait_s:.1f} s"
                ),
                snap,
            )
        try:
            extrinsics = self.extrinsics()
            located = backproject(
                plan,
                snap.depth,
                snap.camera_info,
                extrinsics,
                depth_camera_info=snap.depth_camera_info,
                depth_registered=self.get_parameter("depth_registered").value,
            )
        except InputError as exc:  # GeometryError, a bad extrinsics file; a bug is no failed back-projection
            return plan, header, image_rgb, f"back-projection failed: {type(exc).__name__}: {exc}", snap
        note = "" if extrinsics is not None else "no extrinsics_file: poses are in the camera optical frame"
        return located, header, image_rgb, note, snap

    def _publish_frames(self, image_rgb, header, frames: Snapshot | None) -> None:
        """The frame set the plan was made on, for the rollout logger: colour as rgb8 (the image the model saw),
        depth as an Image (compressedDepth decoded), camera_info as it came; only while someone subscribes."""
        with self._frames_lock:
            if self._frames_pubs[0].get_subscription_count() == 0:
                # nobody, or a logger the middleware has not matched yet (one that just started: the latched topics
                # keep only what was published): kept for _on_frames_matched
                self._frames_unsent = (image_rgb, header, frames)
                return
            self._frames_unsent = None
            self._send_frames(image_rgb, header, frames)

    def _on_frames_matched(self, info) -> None:
        if info.current_count_change <= 0:
            return
        with self._frames_lock:
            unsent, self._frames_unsent = self._frames_unsent, None
            if unsent is None:
                return
            try:
                self._send_frames(*unsent)
            except Exception as exc:  # noqa: BLE001 - an event callback must never take the planner down
                self.get_logger().error(f"plan frame set not published: {type(exc).__name__}: {exc}")

    def _send_frames(self, image_rgb, header, frames: Snapshot | None) -> None:
        color_pub, depth_pub, info_pub = self._frames_pubs
        color_pub.publish(numpy_to_image(image_rgb, "rgb8", header=header))
        depth = frames.depth if frames is not None else None
        if depth is not None:
            try:
                if is_compressed(depth):
                    depth = numpy_to_image(depth_to_numpy(depth)[0], header=depth.header)
                depth_pub.publish(depth)
            except ImageDecodeError as exc:
                self.get_logger().warning(f"depth of the plan's frame set not published: {exc}")
        if frames is not None and frames.camera_info is not None:
            info_pub.publish(frames.camera_info)

    def _publish_status(
        self,
        instruction: str,
        success: bool,
        message: str,
        started: float,
        num_actions: int = 0,
        backprojected: bool = False,
    ) -> None:
        self._status_pub.publish(
            planner_status_msg(
                rclpy_type,
                instruction,
                success,
                message,
                num_actions,
                backprojected,
                duration_s=time.monotonic() - started,
                stamp_ns=self.get_clock().now().nanoseconds,
            )
        )

    def _publish_visuals(self, plan, image_rgb, header) -> None:
        try:
            self._markers_pub.publish(plan_markers(plan, stamp=header.stamp))
            with self._overlay_lock:
                self._overlay_source = (plan, image_rgb, header)
            if self._overlay_pub.get_subscription_count() > 0:
                self._overlay(publish=True)
        except Exception as exc:  # noqa: BLE001 - a drawing problem must never take the planner down
            self.get_logger().error(f"overlay/markers not published: {type(exc).__name__}: {exc}")

    def _overlay(self, publish: bool):
        """The newest answer's overlay, drawn now if it was not yet; published once when ``publish``."""
        with self._overlay_lock:
            if self._overlay_source is not None:
                plan, image_rgb, header = self._overlay_source
                self._overlay_source = None
                self._overlay_rgb, self._overlay_header = draw_plan_overlay(image_rgb, plan), header
                self._overlay_sent = False
            if publish and not self._overlay_sent:
                self._overlay_pub.publish(numpy_to_image(self._overlay_rgb, "rgb8", header=self._overlay_header))
                self._overlay_sent = True
            return self._overlay_rgb

    def _on_overlay_matched(self, info) -> None:
        if info.current_count_change <= 0:
            return
        try:
            self._overlay(publish=True)
        except Exception as exc:  # noqa: BLE001 - a drawing problem must never take the planner down
            self.get_logger().error(f"overlay not published: {type(exc).__name__}: {exc}")

    @property
    def last_overlay_rgb(self):
        """The newest answer's overlay (RGB array; None before the first plan), for in-process callers (demo, bringup)."""
        return self._overlay(publish=False)

    def destroy_node(self):
        visuals = getattr(self, "_visuals", None)  # absent when __init__ refused a parameter
        if visuals is not None:
            visuals.shutdown()
        return super().destroy_node()


def main(args=None) -> None:
    # at least 4 threads; the node asks for max_concurrent_requests + SPARE_THREADS (executor_threads)
    run_node(PlannerNode, "planner_node", num_threads=4, args=args)


if __name__ == "__main__":
    main()
