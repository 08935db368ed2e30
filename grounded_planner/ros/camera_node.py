"""camera_node: a RealSense (or a RealSense recording) as a lifecycle node on the realsense-ros default topics."""

from __future__ import annotations

import threading
from typing import Callable

from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, Image

from grounded_planner.errors import InputError
from grounded_planner.ros.convert import numpy_to_image
from grounded_planner.ros.node_main import DeviceNode, run_node
from grounded_planner.ros import names
from grounded_planner.ros.params import Param, declare_all, existing_path, expand_path, non_empty, positive, values
from grounded_planner.ros.realsense import AlignedFrames, CameraError, Intrinsics, RealSenseSource, parse_profile


def _profile_check(value: str) -> str | None:
    try:
        parse_profile(value, "profile")
    except InputError as exc:
        return str(exc)
    return None


PARAMS = [
    Param("serial", "", "serial number of the RealSense to open; empty: the first one found", read_only=True),
    Param("color_profile", "1280x720", "colour stream WIDTHxHEIGHT", _profile_check, read_only=True),
    Param(
        "depth_profile",
        "848x480",
        "depth stream WIDTHxHEIGHT (aligned to colour before publishing)",
        _profile_check,
        read_only=True,
    ),
    Param("fps", 30, "frame rate of both streams, frames/s", positive, read_only=True),
    Param(
        "playback_file",
        "",
        "a RealSense recording to play instead of a camera (.db3 from librealsense >= 2.56, .bag "
        "from older ones); empty: live camera",
        existing_path,
        read_only=True,
    ),
    Param(
        "loop_playback",
        True,
        "restart playback_file at its end (and when its playback stops early); false: play it once, log that it ended",
        read_only=True,
    ),
    Param(
        "camera_namespace",
        names.CAMERA_PREFIX,
        "topic prefix, relative to the node's namespace as realsense-ros's "
        "CAMERA_NAMESPACE/CAMERA_NAME (default camera/camera: /camera/camera/color/image_raw in the root namespace)",
        non_empty,
        read_only=True,
    ),
    Param(
        "frame_id",
        "camera_color_optical_frame",
        "frame id of colour, aligned depth and camera_info (x right, y down, z forward)",
        non_empty,
    ),
    Param(
        "autostart", True, "configure and activate at startup; false: wait for lifecycle transitions", read_only=True
    ),
    Param("read_timeout_s", 1.0, "how long to wait for a frame before logging that none came, seconds", positive),
]


def camera_info_msg(intr: Intrinsics, header) -> CameraInfo:
    """CameraInfo for the colour stream (aligned depth shares it)."""
    msg = CameraInfo()
    msg.header = header
    msg.width, msg.height = intr.width, intr.height
    msg.distortion_model = intr.distortion_model
    msg.d = list(intr.coeffs)
    msg.k = intr.K
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [intr.fx, 0.0, intr.ppx, 0.0, 0.0, intr.fy, intr.ppy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


class CameraNode(DeviceNode):
    """Publishes colour, depth aligned to colour (16UC1, mm) and camera_info while active.

    configure opens the device (or recording) and creates the publishers; activate starts the frame
    thread; deactivate stops it; cleanup/shutdown release the device. ``source_factory`` replaces the
    pyrealsense2 pipeline (tests feed a software device through it).
    """

    def __init__(
        self, node_name: str = "camera", source_factory: Callable[[dict], RealSenseSource] | None = None, **kwargs
    ):
        # before anything can fail: destroy_node releases these, also on a node whose parameters were refused
        self._source: RealSenseSource | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._pubs: dict = {}
        super().__init__(node_name, **kwargs)
        declare_all(self, PARAMS)
        self._injected = source_factory is not None
        self._source_factory = source_factory or self._open_realsense
        self.frames_published = 0

    @staticmethod
    def _open_realsense(p: dict) -> RealSenseSource:
        return RealSenseSource.open(
            p["serial"],
            p["color_profile"],
            p["depth_profile"],
            p["fps"],
            expand_path(p["playback_file"]),
            p["loop_playback"],
        )

    # -- lifecycle ---------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = values(self, PARAMS)
        try:
            self._source = self._source_factory(p)
        except ImportError as exc:  # the lifecycle transition would swallow it without a word
            self.configure_error = (
                f"pyrealsense2 cannot be imported ({exc}); install it (ROS: rosdep key "
                "python3-pyrealsense2-pip; pip: pip install pyrealsense2)"
            )
            self.get_logger().error(f"configure failed: {self.configure_error}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # noqa: BLE001 - no camera, a bad recording, a busy device: say why (run_node/bringup end with it)
            self.configure_error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"configure failed: {self.configure_error}")
            return TransitionCallbackReturn.FAILURE
        topics = names.camera_topics(p["camera_namespace"])
        # reliable like realsense-ros's default (SYSTEM_DEFAULT): both reliable and best-effort subscribers match
        qos = QoSProfile(depth=5)
        types = {"color": Image, "color_info": CameraInfo, "depth": Image, "depth_info": CameraInfo}
        self._pubs = {key: self.create_lifecycle_publisher(types[key], topic, qos) for key, topic in topics.items()}
        where = (
            "injected source"
            if self._injected
            else f"recording {p['playback_file']}"
            if p["playback_file"]
            else f"camera {p['serial'] or '(first found)'}"
        )
        self.get_logger().info(f"configured: {where}, publishing under {p['camera_namespace'].rstrip('/')}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._running.set()
        self._thread = threading.Thread(target=self._publish_loop, name="camera_frames", daemon=True)
        self._thread.start()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_thread()
        return super().on_deactivate(state)

    def destroy_node(self) -> None:
        """Stop the frame thread and the pipeline first: rclpy destroys a lifecycle node without a shutdown
        transition, and a librealsense pipeline (its playback thread) still running at interpreter exit aborted the
        process ("terminate called without an active exception", exit -6) on every Ctrl-C of a recording."""
        self._release()
        super().destroy_node()

    # -- frames ------------------------------------------------------------------------------------
    def _stop_thread(self) -> None:
        self._running.clear()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _release(self) -> None:
        self._stop_thread()
        for pub in self._pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._pubs = {}
        if self._source is not None:
            self._source.close()
            self._source = None

    def _publish_loop(self) -> None:
        missed, restarts = 0, self._source.restarts if self._source is not None else 0
        while self._running.is_set() and self._source is not None and self.context.ok():
            timeout_s = self.get_parameter("read_timeout_s").value
            try:
                frames = self._source.read(timeout_s)
            except CameraError as exc:
                self.get_logger().error(f"camera read failed: {exc}", throttle_duration_sec=5.0)
                continue
            if frames is None:
                if self._source.restarts > restarts:
                    restarts = self._source.restarts
                    self.get_logger().warning("the recording's playback stopped: started it again")
                if self._source.ended:
                    where = self.get_parameter("playback_file").value
                    self.get_logger().info(
                        f"recording {where} ended after {self.frames_published} frames (played once)"
                    )
                    return
                missed += 1
                if missed * timeout_s >= 5.0:
                    self.get_logger().warning(f"no aligned frames for {missed * timeout_s:.0f} s")
                    missed = 0
                continue
            missed = 0
            try:
                self.publish(frames)
            except Exception:  # Ctrl-C shut the context down between the check above and this publish: just end
                if self.context.ok() and self._running.is_set():
                    raise
                return

    def publish(self, frames: AlignedFrames) -> None:
        """Publish one aligned set; all four messages carry the same stamp and frame id."""
        stamp = self.get_clock().now().to_msg()
        frame_id = self.get_parameter("frame_id").value
        color = numpy_to_image(frames.color_rgb, "rgb8")
        depth = numpy_to_image(frames.depth_mm, "16UC1")
        for msg in (color, depth):
            msg.header.stamp = stamp
            msg.header.frame_id = frame_id
        info = camera_info_msg(frames.intrinsics, color.header)
        self._pubs["color"].publish(color)
        self._pubs["color_info"].publish(info)
        self._pubs["depth"].publish(depth)
        self._pubs["depth_info"].publish(info)
        self.frames_published += 1


def main(args=None) -> None:
    run_node(CameraNode, "camera_node", num_threads=1, args=args)


if __name__ == "__main__":
    main()
