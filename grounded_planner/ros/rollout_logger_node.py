"""rollout_logger_node: records each episode (frames, plan, targets, executor feedback, result) as a rollout folder."""

from __future__ import annotations

import threading
from collections import deque
import time
from datetime import datetime, timezone
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String

from grounded_planner.plan import PlanError
from grounded_planner_interfaces.msg import (
    ExecutionEvent,
    ExecutionResult as ExecutionResultMsg,
    GroundedPlan as GroundedPlanMsg,
    PlannerStatus,
)

from grounded_planner.msgs.execution import execution_event_from_msg, execution_result_from_msg
from grounded_planner.ros import names
from grounded_planner.geometry.errors import CameraModelError
from grounded_planner.msgs.camera_info import raw_calibration
from grounded_planner.msgs.images import ImageDecodeError, color_to_rgb, depth_to_numpy, describe
from grounded_planner.ros.convert import plan_from_msg
from grounded_planner.ros.frames import PLAN_FRAMES_QOS, TypedSubscription, camera_model, stamp_ns as msg_stamp_ns
from grounded_planner.ros.node_main import StackNode, run_node
from grounded_planner.ros.params import (
    Param,
    all_of,
    declare_all,
    expand_path,
    non_empty,
    non_negative,
    one_of,
    positive,
    values,
    writable_folder,
)
from grounded_planner.rollout.bag_write import COMPRESSIONS
from grounded_planner.rollout.record import CUT_SHORT, IMAGE_TRANSPORTS, RecordingOptions, RolloutRecorder
from grounded_planner.rollout.session import SessionRecorder

PENDING_S = 5.0  # events older than this when an episode opens belong to no episode (logged and dropped)
WATCH_PERIOD_S = 1.0  # how often an open episode is checked for a vanished executor or a timeout, and diagnostics sent
PLAN_FRAME_MATCH_S = 1.0  # depth/camera_info of a plan's frame set lie within this of its colour image's stamp
DIAGNOSTICS_TOPIC = "/diagnostics"  # diagnostic_msgs/DiagnosticArray, as every ROS driver reports its health
EXECUTE_STATUS_TOPIC = names.EXECUTE_ACTION + "/_action/status"  # published by the execute action server only


def _in_range(low: int, high: int):
    def check(value) -> str | None:
        return None if low <= value <= high else f"must be {low}-{high}, got {value}"

    return check


PARAMS = [
    Param(
        "log_dir",
        "rollouts",
        "folder that receives one sub-folder per rollout",
        all_of(non_empty, writable_folder),
        read_only=True,
    ),
    Param("condition", "", "experimental condition written into every rollout (e.g. the model variant)"),
    Param("task", "", "task name written into every rollout ('' = the instruction)"),
    Param("scene_id", "", "scene identifier written into every rollout (pairs rollouts across conditions)"),
    Param(
        "frame_rate_hz",
        2.0,
        "camera frames logged per second during an episode (0 = only the frame at plan time)",
        non_negative,
    ),
    Param(
        "close_delay_s",
        0.5,
        "after the execution result, keep the rollout open this long for feedback still in flight, s",
        non_negative,
    ),
    Param(
        "color_topic",
        names.COLOR_IMAGE,
        "colour image to log (Image, or CompressedImage: .../compressed)",
        non_empty,
        read_only=True,
    ),
    Param(
        "depth_topic",
        names.ALIGNED_DEPTH_IMAGE,
        "aligned depth to log (Image 16UC1/32FC1, or .../compressedDepth)",
        non_empty,
        read_only=True,
    ),
    Param("camera_info_topic", names.COLOR_CAMERA_INFO, "camera_info to log", non_empty, read_only=True),
    Param(
        "episode_timeout_s",
        600.0,
        "an episode with no execution result this long after its plan ends as cut_short, seconds (0 = no limit)",
        non_negative,
    ),
    # recording options (rollout.record.RecordingOptions): how frames and the bag are stored
    Param(
        "images",
        "compressed",
        "how frames are stored: compressed (colour JPEG on .../compressed, depth lossless "
        "PNG on .../compressedDepth, as image_transport records them) or raw (sensor_msgs/Image)",
        one_of(*IMAGE_TRANSPORTS),
        read_only=True,
    ),
    Param("jpeg_quality", 90, "colour JPEG quality, 1-100 (images: compressed)", _in_range(1, 100), read_only=True),
    Param(
        "png_level",
        1,
        "depth PNG zlib level, 0-9 (lossless at any level; 9 is smallest and slowest)",
        _in_range(0, 9),
        read_only=True,
    ),
    Param(
        "compression",
        "auto",
        "bag chunk compression: auto (zstd, but none for a chunk mostly of JPEG/PNG payloads), zstd, lz4 or none",
        one_of(*COMPRESSIONS),
        read_only=True,
    ),
    Param(
        "chunk_interval_s",
        0.5,
        "a bag chunk is written at least this often; a crash loses at most this much, s",
        non_negative,
        read_only=True,
    ),
    Param("chunk_size", 1048576, "a bag chunk is written once it holds this many bytes", positive, read_only=True),
    Param(
        "session",
        False,
        "record every episode into one session file (log_dir/<stamp>_session/session.mcap, "
        "session.json, one rollout.json folder per episode) instead of one bag per episode",
        read_only=True,
    ),
]


def recording_options(p: dict) -> RecordingOptions:
    """The logger's recording parameters as the recorder's options."""
    return RecordingOptions(
        images=p["images"],
        jpeg_quality=p["jpeg_quality"],
        png_level=p["png_level"],
        compression=p["compression"],
        chunk_size=p["chunk_size"],
        chunk_interval_s=float(p["chunk_interval_s"]),
    )


class RolloutLoggerNode(StackNode, Node):
    """One rollout per episode: it opens on a plan (or a planner failure) and closes on the execution result.

    A new plan before a result closes the open rollout as ``aborted`` (the plan was never executed); shutting down
    does the same. An episode ends ``cut_short`` with the reason when its executor leaves the graph before the
    result, when no result comes within ``episode_timeout_s``, or when the disk refuses a write (a full disk): then
    one error is logged for the episode, nothing more is written into it, the node goes on serving, and
    ``/diagnostics`` says that episodes are not being recorded until one is recorded again. Each closed folder is
    announced on ``/grounded_planner/rollout/closed``.
    """

    def __init__(self, node_name: str = "rollout_logger", **kwargs):
        super().__init__(node_name, **kwargs)
        # before anything that can raise: rclpy destroys a half-built node at shutdown, and destroy_node uses these
        self._lock = threading.Lock()
        self._recorder = None
        self._session = None
        self._has_result = False
        self._close_timer = None
        self._unfinished: list = []  # recorders whose rollout.json could not be closed (full disk): retried
        declare_all(self, PARAMS)
        p = values(self, PARAMS)
        self.log_dir = Path(expand_path(p["log_dir"]))  # log_dir:=~/rollouts from a launch file is not shell-expanded
        # Topics are not ordered against each other: targets, feedback or a result may be delivered before the plan that
        # opens their episode. They wait here (newest 100, at most PENDING_S old) for the next episode to open.
        self._pending: deque = deque(maxlen=100)
        self._started = 0.0
        self._frame: dict[str, object] = {}
        self._last_frame_logged = 0.0
        self.closed_rollouts: list[Path] = []
        self._count = 0
        # recording health: "" while episodes are recorded, else why they are not (for /diagnostics and tests)
        self.not_recording = ""
        self._episode_lost = False  # the current episode was cut short: its late events go nowhere
        self._executor_seen = False  # an executor served goals while this episode was open
        # the frame set the open episode's plan was made on (planner_node publishes it): still to log, by key
        self._plan_frames: dict[str, object] = {}
        self._plan_frames_for: int | None = None
        self._plan_frames_logged: set[str] = set()
        sensor_qos = QoSProfile(depth=2)
        events_qos = QoSProfile(depth=20)
        self._image_subs = [
            TypedSubscription(
                self, p["color_topic"], "colour image", lambda m: self._on_sensor("color", m), sensor_qos
            ),
            TypedSubscription(self, p["depth_topic"], "depth image", lambda m: self._on_sensor("depth", m), sensor_qos),
        ]
        self.create_subscription(
            CameraInfo, p["camera_info_topic"], lambda m: self._on_sensor("camera_info", m), sensor_qos
        )
        for key, msg_type, topic in (
            ("color", Image, names.PLAN_FRAMES_COLOR),
            ("depth", Image, names.PLAN_FRAMES_DEPTH),
            ("camera_info", CameraInfo, names.PLAN_FRAMES_CAMERA_INFO),
        ):
            self.create_subscription(msg_type, topic, lambda m, key=key: self._on_plan_frame(key, m), PLAN_FRAMES_QOS)
        self.create_subscription(GroundedPlanMsg, names.LAST_PLAN, self._on_plan, events_qos)
        self.create_subscription(PlannerStatus, names.PLANNER_STATUS, self._on_planner_status, events_qos)
        self.create_subscription(GroundedPlanMsg, names.TARGETS, self._on_targets, events_qos)
        self.create_subscription(ExecutionEvent, names.EXECUTION_FEEDBACK, self._on_feedback, events_qos)
        self.create_subscription(ExecutionResultMsg, names.EXECUTION_RESULT, self._on_result, events_qos)
        latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._closed_pub = self.create_publisher(String, names.ROLLOUT_CLOSED, latched)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, QoSProfile(depth=10))
        self.create_timer(WATCH_PERIOD_S, self._watch)
        self.get_logger().info(f"logging rollouts under {self.log_dir.resolve()}")

    # -- episode boundaries ------------------------------------------------------------------------
    def _open(self, instruction: str, model: str = ""):
        """A new episode's recorder, or None when the disk refuses it (said once, in the log and /diagnostics)."""
        if self._has_result:
            self._close("complete")
        else:
            self._close("aborted", "a new plan arrived before this one's execution result")
        self._retry_unfinished()
        self._episode_lost, self._executor_seen = False, False
        self._plan_frames_for, self._plan_frames_logged = None, set()
        self._count += 1
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        p = values(self, PARAMS)
        labels = dict(
            instruction=instruction,
            task=p["task"] or instruction,
            condition=p["condition"],
            scene_id=p["scene_id"],
            model=model,
        )
        folder = self.log_dir / f"{stamp}_{self._count:03d}"
        try:
            if p["session"]:
                if self._session is None:
                    self._session = SessionRecorder(self.log_dir / f"{stamp}_session", recording_options(p))
                folder = self._session.directory / folder.name
                self._recorder = self._session.episode(f"{stamp}_{self._count:03d}", **labels)
            else:
                self._recorder = RolloutRecorder(folder, options=recording_options(p), **labels)
        except OSError as exc:  # a full disk: this episode goes unrecorded, the next one is tried again
            self._remove_empty_episode(folder)
            self._lose_episode(folder, f"cannot start the rollout: {exc}")
            return None
        self._started = time.monotonic()  # (the recorder logs the instruction itself)
        self._log_frame()  # the newest camera frame, in case the planner publishes no frame set of its own
        return self._recorder

    def _lose_episode(self, folder: Path, reason: str) -> None:
        """The disk refused a write: one error for the episode, nothing more written into it."""
        self._episode_lost = True
        self.not_recording = f"episodes are not being recorded: {reason}"
        self.get_logger().error(
            f"rollout {folder} cut short: {reason}; the logger goes on, and records the next "
            "episode once the disk has space"
        )
        self._send_diagnostics()

    def _recorded(self) -> None:
        """A write went through: episodes are recorded again (said once)."""
        if self.not_recording:
            self.not_recording = ""
            self.get_logger().info("rollouts are being recorded again")
            self._send_diagnostics()

    def _cut_short(self, exc: OSError) -> None:
        """The open episode could not be written (a full disk): close it cut_short with the reason; never raise."""
        recorder, self._recorder = self._recorder, None
        self._has_result = False
        self._lose_episode(recorder.directory, f"cannot write: {exc}")
        self._finish(recorder, CUT_SHORT, f"the disk refused a write: {exc}")

    def _finish(self, recorder, status: str, error: str) -> bool:
        """Close ``recorder``; a rollout.json the disk refuses is retried later (True when closed)."""
        try:
            recorder.close(status=status, error=error if status != "complete" else "")
        except OSError as exc:
            self.get_logger().warning(
                f"rollout {recorder.directory} not finished ({exc}): retried when an episode opens"
            )
            self._unfinished.append((recorder, status, error))
            return False
        self.closed_rollouts.append(recorder.directory)
        return True

    def _retry_unfinished(self) -> None:
        unfinished, self._unfinished = self._unfinished, []
        for recorder, status, error in unfinished:
            if self._finish(recorder, status, error):
                self._announce(recorder.directory, status)

    @staticmethod
    def _remove_empty_episode(folder: Path) -> None:
        """Remove what a refused start left: a folder holding only an empty rollout.mcap (never anything else)."""
        bag = folder / "rollout.mcap"
        try:
            if (
                folder.is_dir()
                and {f.name for f in folder.iterdir()} <= {bag.name}
                and (not bag.exists() or bag.stat().st_size == 0)
            ):
                bag.unlink(missing_ok=True)
                folder.rmdir()
        except OSError:
            pass  # left for `rollouts recover`, which finishes a bag without rollout.json

    def _write(self, what, *args, **kwargs) -> bool:
        """Call a recorder method; a refused write (OSError: a full disk) cuts the episode short. True when written."""
        if self._recorder is None:
            return False
        try:
            what(*args, **kwargs)
        except OSError as exc:
            self._cut_short(exc)
            return False
        self._recorded()
        return True

    def _replay_pending(self) -> None:
        now = time.monotonic()
        pending, self._pending = list(self._pending), deque(maxlen=self._pending.maxlen)
        for received, kind, payload in pending:
            if now - received > PENDING_S:
                self.get_logger().warning(f"dropping a {kind} event that belongs to no episode")
            else:
                self._log_event(kind, payload)

    def _log_event(self, kind: str, payload: dict) -> None:
        """Log targets/feedback/result into the open rollout, or keep them for the next one."""
        if self._episode_lost:
            return  # the episode was cut short: its events go nowhere, never into the next one
        if self._recorder is None:
            self._pending.append((time.monotonic(), kind, payload))
        elif kind == "result":
            self._log_result(payload)
        elif kind == "targets":
            self._write(self._recorder.log_targets, payload)
        else:
            step = int(payload.get("step", 0))
            self._write(
                self._recorder.log_feedback,
                step,
                str(payload.get("state", "")),
                payload.get("action"),
                str(payload.get("message", "")),
            )

    def _close(self, status: str = "complete", error: str = "") -> Path | None:
        if self._close_timer is not None:
            self._close_timer.cancel()
            self.destroy_timer(self._close_timer)
            self._close_timer = None
        recorder, self._recorder = self._recorder, None
        self._has_result = False
        if recorder is None:
            return None
        if self._finish(recorder, status, error):
            self._announce(recorder.directory, status)
        return recorder.directory

    def _announce(self, directory: Path, status: str) -> None:
        if not self.context.ok():  # Ctrl-C: the folder is closed; there is no graph left to announce it to
            return
        try:
            self._closed_pub.publish(String(data=str(directory)))
            self.get_logger().info(f"rollout {status}: {directory}")
        except Exception:  # the context went away between the check and the publish
            if self.context.ok():
                raise

    # -- watching the open episode and the recording's health ----------------------------------------
    def _watch(self) -> None:
        with self._lock:
            if self._recorder is not None and not self._has_result:
                # an action server publishes its goals' status: the one topic only an executor publishes
                executors = self.count_publishers(EXECUTE_STATUS_TOPIC)
                self._executor_seen = self._executor_seen or executors > 0
                timeout_s = self.get_parameter("episode_timeout_s").value
                if self._executor_seen and executors == 0:
                    self._end_orphan(
                        f"the executor left the graph (no {names.EXECUTE_ACTION} action server) "
                        "before its execution result"
                    )
                elif timeout_s > 0 and time.monotonic() - self._started > timeout_s:
                    self._end_orphan(f"no execution result within episode_timeout_s ({timeout_s:g} s)")
            self._send_diagnostics()

    def _end_orphan(self, reason: str) -> None:
        """Close the open episode as cut_short: nothing more is written into it; its late events are dropped."""
        directory = self._recorder.directory
        self._close(CUT_SHORT, reason)
        self._episode_lost = True
        self.get_logger().error(f"rollout {directory} cut short: {reason}")

    def _send_diagnostics(self) -> None:
        if not self.context.ok():
            return
        status = DiagnosticStatus(
            name=f"{self.get_name()}: rollout recording",
            hardware_id=str(self.log_dir),
            level=DiagnosticStatus.ERROR if self.not_recording else DiagnosticStatus.OK,
            message=self.not_recording or "episodes are being recorded",
        )
        status.values = [
            KeyValue(key="log_dir", value=str(self.log_dir)),
            KeyValue(key="episodes_closed", value=str(len(self.closed_rollouts))),
        ]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        try:
            self._diagnostics_pub.publish(array)
        except Exception:  # the context went away between the check and the publish
            if self.context.ok():
                raise

    # -- callbacks ---------------------------------------------------------------------------------
    def _on_sensor(self, key: str, msg) -> None:
        with self._lock:
            self._frame[key] = msg
            rate = self.get_parameter("frame_rate_hz").value
            if (
                self._recorder is not None
                and key == "color"
                and rate > 0
                and time.monotonic() - self._last_frame_logged >= 1.0 / rate
            ):
                self._log_frame()

    def _log_frame(self) -> None:
        """Log the newest colour (+ depth, + camera_info as recorded); bad sensor data is a warning, never a crash."""
        color, depth, info = (self._frame.get(k) for k in ("color", "depth", "camera_info"))
        if self._recorder is None or color is None:
            return
        self._write(self._log_frame_of, color, depth, info)

    def _on_plan_frame(self, key: str, msg) -> None:
        """A message of the frame set a plan was made on (planner_node publishes it just before the plan)."""
        with self._lock:
            self._plan_frames[key] = msg
            self._log_plan_frames()

    def _log_plan_frames(self) -> None:
        """Log the open episode's plan frame set as its messages arrive (colour by the plan's exact stamp)."""
        if self._recorder is None or self._plan_frames_for is None:
            return
        for key in ("color", "depth", "camera_info"):
            msg = self._plan_frames.get(key)
            if msg is None or key in self._plan_frames_logged:
                continue
            apart_ns = abs(msg_stamp_ns(msg) - self._plan_frames_for)
            if apart_ns > (0 if key == "color" else PLAN_FRAME_MATCH_S * 1e9):
                continue  # another plan's (an older one, or the next one's arriving early)
            self._plan_frames_logged.add(key)
            del self._plan_frames[key]
            if key == "color":
                self._write(self._log_frame_of, msg, None, None)
            elif key == "depth":
                self._write(self._log_depth_of, msg)
            else:
                self._write(
                    self._recorder.log_camera_info,
                    list(msg.k),
                    msg.width,
                    msg.height,
                    list(msg.d),
                    msg.distortion_model,
                    stamp_ns=msg_stamp_ns(msg),
                    frame_id=msg.header.frame_id or "camera_color_optical_frame",
                )

    def _log_depth_of(self, depth) -> None:
        try:
            depth_arr, encoding = depth_to_numpy(depth)
        except ImageDecodeError as exc:
            self._sensor_warning(f"depth of the plan's frame set not logged: {exc}")
            return
        if encoding == "32FC1":
            depth_arr = depth_arr.astype(float)  # metres; the rollout stores 16UC1 millimetres
        self._recorder.log_depth(
            depth_arr,
            stamp_ns=msg_stamp_ns(depth) or None,
            frame_id=depth.header.frame_id or "camera_color_optical_frame",
        )

    def _log_frame_of(self, color, depth, info) -> None:
        try:
            rgb = color_to_rgb(color)
        except ImageDecodeError as exc:
            self._sensor_warning(f"colour frame not logged: {exc}")
            return
        stamp_ns = color.header.stamp.sec * 1_000_000_000 + color.header.stamp.nanosec or None
        depth_arr = None
        if depth is not None:
            try:
                depth_arr, encoding = depth_to_numpy(depth)
                if encoding == "32FC1":
                    depth_arr = depth_arr.astype(float)  # metres; the rollout stores 16UC1 millimetres
                if depth_arr.shape != rgb.shape[:2]:
                    self._sensor_warning(
                        f"depth ({describe(depth)}) is not the colour image's size "
                        f"{rgb.shape[1]}x{rgb.shape[0]}: not logged (a rollout keeps aligned depth only)"
                    )
                    depth_arr = None
            except ImageDecodeError as exc:
                self._sensor_warning(f"depth frame not logged: {exc}")
        camera = None
        if info is not None:
            camera = raw_calibration(info)  # the calibration as recorded, whatever it says
            try:
                camera_model(info)
            except CameraModelError as exc:
                self._sensor_warning(f"camera_info cannot be used for back-projection: {exc}")
        # a compressed stream is stored as it came (the recorder decides by its options)
        self._recorder.log_frame(rgb, depth_arr, camera, stamp_ns=stamp_ns, color_msg=color)
        self._last_frame_logged = time.monotonic()

    def _sensor_warning(self, message: str) -> None:
        self.get_logger().warning(message, throttle_duration_sec=10.0)
        if self._recorder is not None:
            self._recorder.log_warning(message)

    def _on_plan(self, msg: GroundedPlanMsg) -> None:
        with self._lock:
            plan = plan_from_msg(msg, validate=False)
            recorder = self._open(msg.instruction, msg.model)
            if recorder is None:
                return
            # the plan's stamp is its image's: replay then finds the exact frame it was made on
            stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec or None
            if not self._write(recorder.log_plan, plan, stamp_ns=stamp_ns):
                return
            self._plan_frames_for = stamp_ns
            self._log_plan_frames()  # the set may have arrived before the plan
            self._replay_pending()
            if not plan.actions and self._recorder is not None:  # nothing to execute: the episode ends here
                self._close("complete")

    def _on_planner_status(self, msg: PlannerStatus) -> None:
        if msg.success:
            return
        with self._lock:
            recorder = self._open(str(msg.instruction))
            if recorder is None:
                return
            if self._write(recorder.log_planner_error, str(msg.message)):
                self._close("complete")  # a finished episode: it failed at planning

    def _on_targets(self, msg: GroundedPlanMsg) -> None:
        try:
            targets = plan_from_msg(msg, validate=False).target_set().to_dict()
        except PlanError as exc:  # a plan on the targets topic that is not back-projected
            self.get_logger().error(f"ignoring a plan on {names.TARGETS} without usable targets: {exc}")
            return
        with self._lock:
            self._log_event("targets", targets)

    def _on_feedback(self, msg: ExecutionEvent) -> None:
        with self._lock:
            self._log_event("feedback", execution_event_from_msg(msg))

    def _on_result(self, msg: ExecutionResultMsg) -> None:
        with self._lock:
            self._log_event("result", execution_result_from_msg(msg))

    def _log_result(self, result: dict) -> None:
        self._log_frame()  # how the scene looks after execution
        if self._recorder is None or not self._write(
            self._recorder.log_result, result, execution_time_s=time.monotonic() - self._started
        ):
            return
        if isinstance(result.get("scene_success"), bool):  # a simulator knows whether the task succeeded
            if not self._write(self._recorder.set_label, result["scene_success"], source="simulator"):
                return
        self._has_result = True
        delay_s = self.get_parameter("close_delay_s").value
        if delay_s <= 0:
            self._close("complete")
        elif self._close_timer is None:
            self._close_timer = self.create_timer(delay_s, self._close_after_result)

    def _close_after_result(self) -> None:
        with self._lock:
            if self._has_result:
                self._close("complete")

    def destroy_node(self) -> None:
        with self._lock:
            if self._has_result:
                self._close("complete")
            else:
                self._close("aborted", "the logger shut down before the execution result")
            if self._session is not None:
                self._session.close()
        super().destroy_node()


def main(args=None) -> None:
    run_node(RolloutLoggerNode, "rollout_logger_node", num_threads=1, args=args)


if __name__ == "__main__":
    main()
