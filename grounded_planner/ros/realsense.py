"""RealSense frames through pyrealsense2: colour with depth aligned to it, from a camera, a recording or a software device."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import os

from grounded_planner.errors import InputError, RunFailure

# realsense-ros publishes aligned depth in millimetres (16UC1); D400 depth units default to 1 mm.
DEPTH_UNIT_M = 0.001


class CameraError(RunFailure):
    """The RealSense device, recording or stream configuration could not be used."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of the colour stream (aligned depth shares them)."""

    width: int  # pixels
    height: int  # pixels
    fx: float  # focal length, pixels
    fy: float
    ppx: float  # principal point, pixels from the left edge
    ppy: float
    distortion_model: str  # ROS name: plumb_bob | equidistant | ...
    coeffs: tuple[float, ...]  # distortion coefficients in ROS order

    @property
    def K(self) -> list[float]:  # noqa: N802 - ROS CameraInfo field name
        return [self.fx, 0.0, self.ppx, 0.0, self.fy, self.ppy, 0.0, 0.0, 1.0]


@dataclass(frozen=True)
class AlignedFrames:
    """One colour frame and the depth frame aligned to it."""

    color_rgb: np.ndarray  # (H, W, 3) uint8
    depth_mm: np.ndarray  # (H, W) uint16, millimetres, 0 = no depth
    intrinsics: Intrinsics
    timestamp_ms: float  # device timestamp of the colour frame
    frame_number: int


def parse_profile(text: str, what: str) -> tuple[int, int]:
    """``"1280x720"`` (or ``"1280,720"``) -> (1280, 720); raises InputError naming ``what``."""
    match = re.fullmatch(r"\s*(\d+)\s*[x,]\s*(\d+)\s*", text)
    if not match or int(match.group(1)) <= 0 or int(match.group(2)) <= 0:
        raise InputError(f"{what} must look like WIDTHxHEIGHT (e.g. 1280x720), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _ros_distortion(rs: Any, model: Any) -> str:
    # realsense-ros reports Brown-Conrady variants as plumb_bob (same 5 coefficients) and Kannala-Brandt as equidistant.
    # F-Theta has no ROS model (one coefficient, another formula): its librealsense name goes out as is, so that
    # back-projection refuses it with a typed error instead of deprojecting with the wrong lens model.
    if model == rs.distortion.kannala_brandt4:
        return "equidistant"
    if model == rs.distortion.ftheta:
        return "F-Theta"
    return "plumb_bob"


class Playback:
    """A ``.bag`` recording played by a started ``pyrealsense2.pipeline``: whether its playback stopped, and a restart.

    librealsense's own looping (``repeat_playback``) does not always loop: of 250 starts of the unit-test recording
    (0.17 s long) on two CPUs held busy, one reported its playback ``stopped`` at position 0 and gave no frame for the
    next 12 s (pyrealsense2 2.59; a clean-clone CI run lost eight tests to it). Stopping and starting the pipeline
    plays it again.

    No ``pyrealsense2.config`` is kept: one that outlived its pipeline's stop crashed the interpreter (SIGSEGV, the
    next pipeline start or the process's end) within 50 starts on a busy machine; dropped while the pipeline runs, as
    :meth:`RealSenseSource.open` does, 250 starts went by without one.
    """

    def __init__(self, rs: Any, pipeline: Any, path: str, loop: bool):
        self._rs = rs
        self._pipeline = pipeline
        self.path = path
        self.loop = loop

    def config(self) -> Any:
        """A config that plays the recording's colour and depth streams, whatever their size."""
        config = self._rs.config()
        config.enable_device_from_file(self.path, repeat_playback=self.loop)
        config.enable_stream(self._rs.stream.color)
        config.enable_stream(self._rs.stream.depth)
        return config

    def stopped(self) -> bool:
        # asked of the pipeline's device each time: no playback handle outlives a stop and start of the pipeline
        device = self._pipeline.get_active_profile().get_device().as_playback()
        return device.current_status() == self._rs.playback_status.stopped

    def restart(self) -> None:
        try:
            self._pipeline.stop()
        except RuntimeError:
            pass  # stopped already: the last restart's start failed
        self._pipeline.start(self.config())


class RealSenseSource:
    """Aligned colour + depth from anything with ``wait_for_frames``/``try_wait_for_frames``.

    A ``pyrealsense2.pipeline`` (camera or ``.bag`` recording, see :meth:`open`) or a ``pyrealsense2.syncer``
    fed by a ``software_device`` (tests) both work. For a recording (``playback``), a read that times out looks at
    the playback: stopped while it should loop, it is started again (``restarts`` counts it); stopped when played
    once, the recording has ended (``ended``) and every later read gives None at once; stopped before it gave a
    frame, it is started again either way.
    """

    def __init__(self, frames: Any, depth_scale_m: float, stop: Any = None, playback: Playback | None = None):
        import pyrealsense2 as rs  # lazy: optional SDK (pyrealsense2), not in install_requires

        self._rs = rs
        self._frames = frames
        self._stop = stop
        self._playback = playback
        self.restarts = 0
        self.ended = False
        self._restart_failed = False  # the pipeline is stopped: the next read tries the restart again
        self.frames_read = 0
        self.depth_scale_m = float(depth_scale_m)
        if not self.depth_scale_m > 0:
            raise CameraError(f"depth scale must be > 0 m per unit, got {depth_scale_m}")
        self._align = rs.align(rs.stream.color)

    @classmethod
    def open(
        cls,
        serial: str = "",
        color_profile: str = "1280x720",
        depth_profile: str = "848x480",
        fps: int = 30,
        playback_file: str = "",
        loop_playback: bool = True,
    ) -> "RealSenseSource":
        """Start a pipeline on the camera with ``serial`` (any when empty) or on a recorded ``.bag``.

        Raises
        ------
        CameraError
            When no device matches, the file is missing, or the profiles are not offered.
        """
        import pyrealsense2 as rs  # lazy: optional SDK (pyrealsense2), not in install_requires

        pipeline = rs.pipeline()
        playback = None
        if playback_file:
            if not os.path.isfile(playback_file):
                raise CameraError(f"playback_file {playback_file!r} does not exist")
            # a recording carries its own profiles: enable the streams it has, whatever their size
            playback = Playback(rs, pipeline, playback_file, loop_playback)
            config = playback.config()
        else:
            config = rs.config()
            if serial:
                config.enable_device(serial)
            cw, ch = parse_profile(color_profile, "color_profile")
            dw, dh = parse_profile(depth_profile, "depth_profile")
            config.enable_stream(rs.stream.color, cw, ch, rs.format.rgb8, fps)
            config.enable_stream(rs.stream.depth, dw, dh, rs.format.z16, fps)
        try:
            profile = pipeline.start(config)
        except RuntimeError as exc:
            where = f"recording {playback_file!r}" if playback_file else f"camera {serial or '(any)'}"
            raise CameraError(
                f"cannot start {where} with color {color_profile}, depth {depth_profile} @ {fps} fps: {exc}"
            ) from exc
        del config  # dropped while the pipeline runs (see Playback)
        depth_sensor = profile.get_device().first_depth_sensor()
        return cls(pipeline, depth_sensor.get_depth_scale(), stop=pipeline.stop, playback=playback)

    def read(self, timeout_s: float = 1.0) -> AlignedFrames | None:
        """The next aligned pair, or None when none came within ``timeout_s``, the set lacked a stream or the
        recording has ended.

        Raises
        ------
        CameraError
            When a recording whose playback stopped cannot be started again (each read tries again).
        """
        rs = self._rs
        if self.ended:
            return None
        if self._restart_failed:
            self._restart(timeout_s)
            return None
        ok, frameset = self._frames.try_wait_for_frames(int(timeout_s * 1000))
        if not ok:
            self._look_at_playback(timeout_s)
            return None
        self.frames_read += 1
        if frameset.size() < 2:
            return None
        aligned = self._align.process(frameset)
        color = aligned.get_color_frame()
        depth = aligned.get_depth_frame()
        if not color or not depth:
            return None
        profile = color.get_profile().as_video_stream_profile()
        intr = profile.get_intrinsics()
        color_arr = np.asanyarray(color.get_data())
        fmt = profile.format()
        if fmt == rs.format.bgr8:
            color_arr = color_arr[..., ::-1]
        elif fmt in (rs.format.rgba8, rs.format.bgra8):
            color_arr = color_arr[..., [2, 1, 0] if fmt == rs.format.bgra8 else [0, 1, 2]]
        elif fmt != rs.format.rgb8:
            raise CameraError(f"colour stream format {fmt} is not supported (use rgb8 or bgr8)")
        depth_raw = np.asanyarray(depth.get_data())
        if abs(self.depth_scale_m - DEPTH_UNIT_M) > 1e-9:
            depth_mm = np.clip(np.rint(depth_raw * (self.depth_scale_m / DEPTH_UNIT_M)), 0, 65535).astype(np.uint16)
        else:
            depth_mm = np.array(depth_raw, dtype=np.uint16, copy=True)
        return AlignedFrames(
            color_rgb=np.ascontiguousarray(color_arr, dtype=np.uint8),
            depth_mm=depth_mm,
            intrinsics=Intrinsics(
                intr.width,
                intr.height,
                intr.fx,
                intr.fy,
                intr.ppx,
                intr.ppy,
                _ros_distortion(rs, intr.model),
                tuple(float(c) for c in intr.coeffs),
            ),
            timestamp_ms=float(color.get_timestamp()),
            frame_number=int(color.get_frame_number()),
        )

    def _look_at_playback(self, timeout_s: float) -> None:
        playback = self._playback
        if playback is None or not playback.stopped():
            return
        if not playback.loop and (self.frames_read or self.restarts >= 3):
            self.ended = True  # played through (or it stopped before its first frame three times running)
            return
        self._restart(timeout_s)

    def _restart(self, timeout_s: float) -> None:
        try:
            self._playback.restart()
        except RuntimeError as exc:
            # the pipeline is left stopped: every read tries again (a file moved back plays on), each after waiting
            # as a read that got nothing does, so that a caller reading in a loop does not spin
            self._restart_failed = True
            time.sleep(timeout_s)
            raise CameraError(f"the recording's playback stopped and could not be started again: {exc}") from exc
        self._restart_failed = False
        self.restarts += 1

    def close(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            try:
                stop()
            except RuntimeError:
                pass  # already stopped


class SoftwareCamera:
    """A pyrealsense2 ``software_device`` with a colour and a depth sensor, fed frames by the caller.

    For tests and benchmarks: it runs the real librealsense sync and align code with no camera attached.
    Depth may have its own resolution; ``depth_to_color_m`` is the depth->colour translation (metres).
    """

    def __init__(
        self,
        color_size: tuple[int, int],
        depth_size: tuple[int, int],
        fx_px: float,
        fps: int = 30,
        depth_to_color_m: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ):
        import pyrealsense2 as rs  # lazy: optional SDK (pyrealsense2), not in install_requires

        self._rs = rs
        self.device = rs.software_device()
        self._color_sensor = self.device.add_sensor("RGB Camera")
        self._depth_sensor = self.device.add_sensor("Stereo Module")
        self._color_profile = self._color_sensor.add_video_stream(
            self._stream(rs.stream.color, 1, color_size, fx_px, fps, 3, rs.format.rgb8)
        )
        depth_fx = fx_px * depth_size[0] / color_size[0]
        self._depth_profile = self._depth_sensor.add_video_stream(
            self._stream(rs.stream.depth, 2, depth_size, depth_fx, fps, 2, rs.format.z16)
        )
        self._depth_sensor.add_read_only_option(rs.option.depth_units, DEPTH_UNIT_M)
        extrinsics = rs.extrinsics()
        extrinsics.rotation = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        extrinsics.translation = list(depth_to_color_m)
        self._depth_profile.register_extrinsics_to(self._color_profile, extrinsics)
        self.device.create_matcher(rs.matchers.dlr_c)
        self.syncer = rs.syncer()
        self._color_sensor.open(self._color_profile)
        self._depth_sensor.open(self._depth_profile)
        self._color_sensor.start(self.syncer)
        self._depth_sensor.start(self.syncer)
        self._frame_number = 0
        self._next_push_s = 0.0
        self.fps = fps
        self.color_size, self.depth_size = color_size, depth_size

    def _stream(self, kind, uid, size, fx, fps, bpp, fmt):
        rs = self._rs
        intr = rs.intrinsics()
        intr.width, intr.height = size
        intr.fx = intr.fy = float(fx)
        intr.ppx, intr.ppy = size[0] / 2.0, size[1] / 2.0
        intr.model = rs.distortion.brown_conrady
        intr.coeffs = [0.0] * 5
        stream = rs.video_stream()
        stream.type, stream.index, stream.uid = kind, 0, uid
        stream.width, stream.height, stream.fps, stream.bpp, stream.fmt = size[0], size[1], fps, bpp, fmt
        stream.intrinsics = intr
        return stream

    def push(self, color_rgb: np.ndarray, depth_mm: np.ndarray, timestamp_ms: float | None = None) -> None:
        """Inject one colour (H, W, 3) uint8 and one depth (h, w) uint16 [mm] frame with the same timestamp.

        Paced like a live device: librealsense's syncer pairs frames by timestamp and emits lone frames
        when sets arrive faster than the stream's fps, so a call waits out the rest of the frame period.
        ``timestamp_ms`` defaults to the wall clock.
        """
        rs = self._rs
        wait_s = self._next_push_s - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        self._next_push_s = time.monotonic() + 1.0 / self.fps
        if timestamp_ms is None:
            timestamp_ms = time.time() * 1000.0
        if color_rgb.shape != (self.color_size[1], self.color_size[0], 3) or color_rgb.dtype != np.uint8:
            raise InputError(
                f"color_rgb must be {self.color_size[1]}x{self.color_size[0]}x3 uint8, got {color_rgb.shape} {color_rgb.dtype}"
            )
        if depth_mm.shape != (self.depth_size[1], self.depth_size[0]) or depth_mm.dtype != np.uint16:
            raise InputError(
                f"depth_mm must be {self.depth_size[1]}x{self.depth_size[0]} uint16, got {depth_mm.shape} {depth_mm.dtype}"
            )
        self._frame_number += 1
        for sensor, profile, pixels, bpp in (
            (self._color_sensor, self._color_profile, color_rgb, 3),
            (self._depth_sensor, self._depth_profile, depth_mm, 2),
        ):
            frame = rs.software_video_frame()
            frame.pixels = np.ascontiguousarray(pixels)
            frame.bpp = bpp
            frame.stride = pixels.shape[1] * bpp
            frame.timestamp = float(timestamp_ms)
            frame.domain = rs.timestamp_domain.hardware_clock
            frame.frame_number = self._frame_number
            frame.profile = profile.as_video_stream_profile()
            sensor.on_video_frame(frame)

    def source(self) -> RealSenseSource:
        return RealSenseSource(self.syncer, DEPTH_UNIT_M, stop=self.close)

    def close(self) -> None:
        for sensor in (self._color_sensor, self._depth_sensor):
            try:
                sensor.stop()
                sensor.close()
            except RuntimeError:
                pass
