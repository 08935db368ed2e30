"""Crash-safe rosbag2 MCAP writing and tolerant reading with `rosbags` (no rclpy needed).

Why our own MCAP writer: rosbags' ``McapWriter`` keeps the current chunk (up to 1 MiB, including the
schema and channel records) in memory and writes the index only on close, so a process killed with
SIGKILL leaves a file with nothing readable in it. :class:`McapBagWriter` writes every record straight to
the file (no chunks) and flushes after each message, so the kernel holds every message the moment
``write`` returns; SIGKILL then loses at most the record being written. Message types, definitions and
the CDR bytes (identical to rclpy's) all come from rosbags' typestore. ``close()`` appends the MCAP
summary and footer, so a cleanly closed file is a standard rosbag2 MCAP file (rosbags, the mcap
library, ``ros2 bag`` read it). A file that lost its footer is read by :func:`scan_mcap` up to its last
complete record and can be finalised in place by :func:`recover_mcap`.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
import importlib.metadata
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping, Sequence

import numpy as np

from grounded_planner.msgs import images
from grounded_planner.msgs.plan import plan_to_msg

log = logging.getLogger(__name__)

MCAP_MAGIC = b"\x89MCAP0\r\n"
PROFILE = "ros2"
PLAN_MSGTYPE = "grounded_planner_interfaces/msg/GroundedPlan"
ACTION_MSGTYPE = "grounded_planner_interfaces/msg/GroundedAction"
# Depth in 16UC1 images is in these units (RealSense D400 default: 1 mm).
DEFAULT_DEPTH_UNIT_M = 0.001

# MCAP opcodes (https://mcap.dev/spec)
_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
_OP_MESSAGE_INDEX, _OP_CHUNK_INDEX, _OP_STATISTICS, _OP_METADATA = 0x07, 0x08, 0x0B, 0x0C
_OP_SUMMARY_OFFSET, _OP_DATA_END = 0x0E, 0x0F


class BagError(ValueError):
    """A bag that cannot be read or written as asked (names the file and what was expected)."""


class BagWriteError(OSError):
    """The file system refused a write to a bag (full disk, quota, I/O error): not bad input, a failure at run
    time. The writer has cut the file back to its last complete record, so the bag stays readable; ``errno``
    is the refusal's (``errno.ENOSPC`` for a full disk)."""


# -- typestore -----------------------------------------------------------------------------------
def _interfaces_msg_dirs() -> list[Path]:
    """Where the grounded_planner_interfaces .msg files may be: env override, source tree, ament prefixes."""
    candidates: list[Path] = []
    if os.environ.get("GROUNDED_PLANNER_MSG_DIR"):
        candidates.append(Path(os.environ["GROUNDED_PLANNER_MSG_DIR"]))
    candidates.append(Path(__file__).resolve().parents[2] / "grounded_planner_interfaces" / "msg")
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / "grounded_planner_interfaces" / "msg")
    candidates.append(Path(sys.prefix) / "share" / "grounded_planner_interfaces" / "msg")
    return [c for c in candidates if (c / "GroundedPlan.msg").is_file()]


@lru_cache(maxsize=1)
def typestore():
    """rosbags typestore: the newest ROS 2 standard types plus grounded_planner_interfaces messages."""
    # lazy: optional SDK (rosbags), not in install_requires
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store_name = next((n for n in ("ROS2_KILTED", "ROS2_JAZZY", "LATEST") if hasattr(Stores, n)), "LATEST")
    store = get_typestore(getattr(Stores, store_name))
    dirs = _interfaces_msg_dirs()
    if not dirs:
        raise BagError("cannot find grounded_planner_interfaces/msg/*.msg (set GROUNDED_PLANNER_MSG_DIR "
                       "to the folder holding GroundedPlan.msg)")
    types: dict = {}
    for path in sorted(dirs[0].glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(encoding="utf-8"),
                                        f"grounded_planner_interfaces/msg/{path.stem}"))
    store.register(types)
    return store


def _time_msg(stamp_ns: int):
    Time = typestore().types["builtin_interfaces/msg/Time"]
    return Time(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000))


def _header(stamp_ns: int, frame_id: str):
    Header = typestore().types["std_msgs/msg/Header"]
    return Header(stamp=_time_msg(stamp_ns), frame_id=frame_id)


def stamp_to_ns(stamp) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# -- message builders ------------------------------------------------------------------------------
def image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """sensor_msgs/Image (rgb8) from an (H, W, 3) uint8 RGB array."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise BagError(f"color image must be (H, W, 3) uint8 RGB, got shape {rgb.shape} dtype {rgb.dtype}")
    Image = typestore().types["sensor_msgs/msg/Image"]
    h, w = rgb.shape[:2]
    return Image(header=_header(stamp_ns, frame_id), height=h, width=w, encoding="rgb8", is_bigendian=0,
                 step=w * 3, data=np.ascontiguousarray(rgb).reshape(-1))


def depth_msg(depth: np.ndarray, stamp_ns: int, frame_id: str = "camera_color_optical_frame",
              depth_unit_m: float = DEFAULT_DEPTH_UNIT_M):
    """sensor_msgs/Image (16UC1, ``depth_unit_m`` per count) from depth in metres (float) or raw counts (uint16).

    Float depth: NaN, inf and values <= 0 become 0 (no reading, as the RealSense driver writes it);
    depth beyond the 16-bit range raises rather than wrapping around.
    """
    depth = np.asarray(depth)
    if depth.ndim != 2:
        raise BagError(f"depth image must be (H, W), got shape {depth.shape}")
    if depth.dtype == np.uint16:
        raw = depth
    elif np.issubdtype(depth.dtype, np.floating):
        counts = np.where(np.isfinite(depth) & (depth > 0), depth / depth_unit_m, 0.0)
        if counts.max(initial=0.0) > 65535.0:
            raise BagError(f"depth up to {float(np.nanmax(depth)):.2f} m does not fit 16UC1 with "
                           f"{depth_unit_m} m units (max {65535 * depth_unit_m:.2f} m)")
        raw = np.rint(counts).astype(np.uint16)
    else:
        raise BagError(f"depth image must be float metres or uint16 counts, got dtype {depth.dtype}")
    Image = typestore().types["sensor_msgs/msg/Image"]
    h, w = raw.shape
    return Image(header=_header(stamp_ns, frame_id), height=h, width=w, encoding="16UC1", is_bigendian=0,
                 step=w * 2, data=np.ascontiguousarray(raw).astype("<u2").view(np.uint8).reshape(-1))


def camera_info_msg(K: Sequence[float], width: int, height: int, stamp_ns: int,
                    D: Sequence[float] = (), distortion_model: str = "plumb_bob",
                    frame_id: str = "camera_color_optical_frame"):
    """sensor_msgs/CameraInfo from a 3x3 intrinsic matrix ``K`` (pixels) and distortion ``D``."""
    K_arr = np.asarray(K, dtype=np.float64).reshape(-1)
    if K_arr.size != 9:
        raise BagError(f"K must be a 3x3 matrix (9 numbers), got {K_arr.size}")
    CameraInfo = typestore().types["sensor_msgs/msg/CameraInfo"]
    RegionOfInterest = typestore().types["sensor_msgs/msg/RegionOfInterest"]
    P = np.zeros((3, 4))
    P[:, :3] = K_arr.reshape(3, 3)
    return CameraInfo(
        header=_header(stamp_ns, frame_id), height=int(height), width=int(width),
        distortion_model=distortion_model, d=np.asarray(D, dtype=np.float64), k=K_arr,
        r=np.eye(3).reshape(-1), p=P.reshape(-1), binning_x=0, binning_y=0,
        roi=RegionOfInterest(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))


def string_msg(payload: Any):
    """std_msgs/String carrying ``payload`` (a str as is, anything else as compact JSON)."""
    String = typestore().types["std_msgs/msg/String"]
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return String(data=text)


def joint_state_msg(names: Sequence[str], position: Sequence[float], stamp_ns: int,
                    velocity: Sequence[float] = (), effort: Sequence[float] = ()):
    """sensor_msgs/JointState (positions in rad or m, as the robot reports them)."""
    if len(names) != len(position):
        raise BagError(f"joint state has {len(names)} names but {len(position)} positions")
    JointState = typestore().types["sensor_msgs/msg/JointState"]
    return JointState(header=_header(stamp_ns, ""), name=list(names),
                      position=np.asarray(position, dtype=np.float64),
                      velocity=np.asarray(velocity, dtype=np.float64),
                      effort=np.asarray(effort, dtype=np.float64))


def plan_msg(plan, stamp_ns: int, frame_id: str = "camera_color_optical_frame"):
    """grounded_planner_interfaces/GroundedPlan from a plan model (its 3D targets, reason and warnings inside)."""
    return plan_to_msg(plan, typestore().types, stamp_ns=stamp_ns, frame_id=frame_id)


# -- message readers -----------------------------------------------------------------------------
def image_to_rgb(msg) -> np.ndarray:
    """A colour sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) or JPEG/PNG CompressedImage -> (H, W, 3) uint8 RGB."""
    try:
        return images.color_to_rgb(msg)
    except images.ImageDecodeError as exc:
        raise BagError(f"color image: {exc}") from exc


def depth_to_m(msg, depth_unit_m: float = DEFAULT_DEPTH_UNIT_M) -> np.ndarray:
    """Depth Image (16UC1 in ``depth_unit_m`` units, or 32FC1 metres) or compressedDepth -> (H, W) float32 m, 0 = none."""
    try:
        return images.depth_to_m(msg, depth_unit_m).astype(np.float32)
    except images.ImageDecodeError as exc:
        raise BagError(f"depth image: {exc}") from exc


# -- writing ---------------------------------------------------------------------------------------
def _u16(v: int) -> bytes:
    return struct.pack("<H", v)


def _u32(v: int) -> bytes:
    return struct.pack("<I", v)


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return _u32(len(b)) + b


def _map(pairs: dict[str, str]) -> bytes:
    body = b"".join(_str(k) + _str(v) for k, v in pairs.items())
    return _u32(len(body)) + body


def _record(op: int, body: bytes) -> bytes:
    return bytes([op]) + _u64(len(body)) + body


def _file_start(library: str = "grounded_planner") -> bytes:
    """Magic bytes and the Header record every file of ours starts with."""
    try:
        lib = f"{library}+rosbags-{importlib.metadata.version('rosbags')}"
    except Exception:  # rosbags installed without metadata: the library name is informational only
        lib = library
    return MCAP_MAGIC + _record(_OP_HEADER, _str(PROFILE) + _str(lib))


@dataclass
class _Channel:
    id: int
    schema_id: int
    topic: str
    msgtype: str
    count: int = 0


class McapBagWriter:
    """Append-only rosbag2 MCAP writer that survives SIGKILL up to the last written message.

    Every record goes to the file unbuffered-by-us and is flushed after each message; ``fsync_every_s``
    (optional) also forces it to disk for power loss. Log times must not go backwards (the file has no
    chunk index, so readers rely on file order); ``write`` with ``log_time_ns=None`` uses the wall clock,
    kept non-decreasing.
    """

    def __init__(self, path: str | Path, *, fsync_every_s: float | None = None, library: str = "grounded_planner"):
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"bag {self.path} exists already; refusing to overwrite a recording")
        if fsync_every_s is not None and fsync_every_s < 0:
            raise BagError(f"fsync_every_s must be >= 0 or None, got {fsync_every_s}")
        self.fsync_every_s = fsync_every_s
        self._file: BinaryIO = open(self.path, "xb", buffering=0)
        self._schemas: dict[str, tuple[int, bytes]] = {}  # msgtype -> (id, record bytes)
        self._channels: dict[str, _Channel] = {}
        self._channel_records: list[bytes] = []
        self._last_log_time_ns = 0
        self._first_log_time_ns: int | None = None
        self._last_fsync = time.monotonic()
        self.message_count = 0
        self.closed = False
        self._write_all(_file_start(library))

    def _write_all(self, data: bytes) -> None:
        """Write one whole record or none of it: a write the file system refuses part way (a full disk accepts
        the bytes that fit, then fails) is truncated away, so a reader never meets half a record and later
        records (once there is space again) follow the last complete one."""
        start = self._file.tell()
        try:
            _write_fully(self._file, data)
        except OSError as exc:
            self._file.truncate(start)  # frees space: possible on a full disk too
            self._file.seek(start)
            raise BagWriteError(exc.errno, f"cannot write to bag {self.path}: {exc.strerror or exc}; "
                                           f"cut back to its last complete record") from exc

    # connections -------------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str) -> None:
        """Declare ``topic`` with ROS type ``msgtype`` (e.g. ``sensor_msgs/msg/Image``); idempotent."""
        if topic in self._channels:
            if self._channels[topic].msgtype != msgtype:
                raise BagError(f"topic {topic} already has type {self._channels[topic].msgtype}, not {msgtype}")
            return
        store = typestore()
        if msgtype not in store.types:
            raise BagError(f"unknown message type {msgtype!r} for topic {topic} (not in the rosbags typestore)")
        if msgtype not in self._schemas:
            msgdef = store.generate_msgdef(msgtype, ros_version=2)[0]
            sid = len(self._schemas) + 1
            rec = _record(_OP_SCHEMA, _u16(sid) + _str(msgtype) + _str("ros2msg") + _u32(len(msgdef.encode()))
                          + msgdef.encode())
            self._write_all(rec)
            self._schemas[msgtype] = (sid, rec)  # only once in the file: a refused write declares nothing
        cid = len(self._channels) + 1
        chan = _Channel(cid, self._schemas[msgtype][0], topic, msgtype)
        rec = _record(_OP_CHANNEL, _u16(cid) + _u16(chan.schema_id) + _str(topic) + _str("cdr")
                      + _map({"offered_qos_profiles": ""}))
        self._write_all(rec)
        self._channels[topic] = chan
        self._channel_records.append(rec)

    # messages ----------------------------------------------------------------------------------
    def write(self, topic: str, msg: Any, msgtype: str | None = None, log_time_ns: int | None = None) -> int:
        """Serialise ``msg`` (a rosbags message object) to CDR and append it; returns the log time used."""
        if self.closed:
            raise BagError(f"bag {self.path} is closed")
        msgtype = msgtype or getattr(msg, "__msgtype__", None)
        if not msgtype:
            raise BagError(f"cannot tell the message type of {type(msg).__name__} for topic {topic}")
        self.add_topic(topic, msgtype)
        data = typestore().serialize_cdr(msg, msgtype)
        return self.write_raw(topic, bytes(data), log_time_ns)

    def write_raw(self, topic: str, cdr: bytes, log_time_ns: int | None = None) -> int:
        """Append already-serialised CDR bytes on a declared topic."""
        chan = self._channels.get(topic)
        if chan is None:
            raise BagError(f"topic {topic} was not declared (call add_topic first)")
        if log_time_ns is None:
            log_time_ns = max(time.time_ns(), self._last_log_time_ns)
        elif log_time_ns < self._last_log_time_ns:
            raise BagError(f"log time {log_time_ns} ns on {topic} is before the previous message "
                           f"({self._last_log_time_ns} ns); an unindexed bag must be written in time order")
        body = _u16(chan.id) + _u32(chan.count + 1) + _u64(log_time_ns) + _u64(log_time_ns) + cdr
        self._write_all(_record(_OP_MESSAGE, body))  # unbuffered: in the kernel once this returns
        chan.count += 1
        self._last_log_time_ns = log_time_ns
        if self._first_log_time_ns is None:
            self._first_log_time_ns = log_time_ns
        self.message_count += 1
        if self.fsync_every_s is not None and time.monotonic() - self._last_fsync >= self.fsync_every_s:
            os.fsync(self._file.fileno())
            self._last_fsync = time.monotonic()
        return log_time_ns

    # closing -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Append DataEnd, the summary (schemas, channels, statistics) and the footer.

        On a full disk the summary is cut away again and :class:`BagWriteError` raised: the file is closed,
        readable up to its last message, and :func:`recover_mcap` finishes it once there is space."""
        if self.closed:
            return
        data_end = self._file.tell()
        try:
            _append_summary(self._file, data_end, [rec for _, rec in self._schemas.values()],
                            self._channel_records,
                            {c.id: c.count for c in self._channels.values()},
                            self._first_log_time_ns or 0, self._last_log_time_ns)
            os.fsync(self._file.fileno())
        except OSError as exc:
            self._file.truncate(data_end)
            self._file.close()
            self.closed = True
            raise BagWriteError(exc.errno, f"cannot finish bag {self.path}: {exc.strerror or exc}; left without "
                                           f"its summary, readable up to its last message") from exc
        self._file.close()
        self.closed = True

    def __enter__(self) -> "McapBagWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _write_fully(f: BinaryIO, data: bytes) -> None:
    """All of ``data`` to an unbuffered file, whose ``write`` may take only part of it (a signal, a full disk)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def _append_summary(f: BinaryIO, data_end_pos: int, schema_records: list[bytes], channel_records: list[bytes],
                    counts: dict[int, int], start_ns: int, end_ns: int) -> None:
    f.seek(data_end_pos)
    _write_fully(f, _record(_OP_DATA_END, _u32(0)))
    summary_start = f.tell()
    schema_start = f.tell()
    for rec in schema_records:
        _write_fully(f, rec)
    channel_start = f.tell()
    for rec in channel_records:
        _write_fully(f, rec)
    stats_start = f.tell()
    stats = (_u64(sum(counts.values())) + _u16(len(schema_records)) + _u32(len(channel_records)) + _u32(0)
             + _u32(0) + _u32(0) + _u64(start_ns) + _u64(end_ns)
             + _u32(len(counts) * 10) + b"".join(_u16(cid) + _u64(n) for cid, n in sorted(counts.items())))
    _write_fully(f, _record(_OP_STATISTICS, stats))
    offsets_start = f.tell()
    for op, start, end in ((_OP_SCHEMA, schema_start, channel_start), (_OP_CHANNEL, channel_start, stats_start),
                           (_OP_STATISTICS, stats_start, offsets_start)):
        if end > start:
            _write_fully(f, _record(_OP_SUMMARY_OFFSET, bytes([op]) + _u64(start) + _u64(end - start)))
    _write_fully(f, _record(_OP_FOOTER, _u64(summary_start) + _u64(offsets_start) + _u32(0)))
    _write_fully(f, MCAP_MAGIC)
    f.truncate()


# -- reading ---------------------------------------------------------------------------------------
@dataclass
class BagMessage:
    """One message read back: topic, ROS type, log time (ns) and the deserialised rosbags object."""

    topic: str
    msgtype: str
    log_time_ns: int
    msg: Any


@dataclass
class ScanResult:
    """What a record-by-record read of an MCAP file found, and whether the file was cut short."""

    messages: list[BagMessage] = field(default_factory=list)  # filled by scan_mcap only
    complete: bool = False          # footer present: the writer closed the file
    truncated_bytes: int = 0        # bytes after the last complete record (a record cut by the crash)
    data_end_pos: int = 0           # file offset after the last complete data record
    message_count: int = 0
    start_ns: int = 0               # first and last log time seen
    end_ns: int = 0
    schema_records: list[bytes] = field(default_factory=list)
    channel_records: list[bytes] = field(default_factory=list)
    channel_counts: dict[int, int] = field(default_factory=dict)
    dropped_bytes: int = 0          # recover_mcap only: bytes of a cut record (or a cut file start) dropped


def _read_str(buf: memoryview | bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", buf, pos)
    return bytes(buf[pos + 4: pos + 4 + n]).decode("utf-8"), pos + 4 + n


def _decompress(comp: str, data: bytes, where: Path) -> bytes:
    if comp == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14
        except ImportError:
            from backports import zstd  # type: ignore[no-redef]  # a rosbags dependency
        return zstd.decompress(data)
    if comp == "lz4":
        import lz4.frame  # lazy: optional SDK (lz4), not in install_requires

        return lz4.frame.decompress(data)
    if comp:
        raise BagError(f"{where}: chunk compression {comp!r} is not supported")
    return data


def iter_mcap(path: str | Path, *, decode: bool = True, topics: Sequence[str] | None = None,
              result: ScanResult | None = None) -> Iterator[BagMessage]:
    """Stream an MCAP file's messages record by record, tolerating a missing footer and a cut last record.

    Handles unchunked files (ours) and chunked ones (zstd/lz4/none, as rosbags and ros2 bag write them)
    as far as their complete chunks go. Types are built from the schemas in the file itself. Messages
    on other ``topics`` are counted, not decoded. ``result`` (optional) is filled as the file is read.
    """
    # lazy: optional SDK (rosbags), not in install_requires
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    path = Path(path)
    out = result if result is not None else ScanResult()
    wanted = set(topics) if topics is not None else None
    schemas: dict[int, tuple[str, str, str]] = {}
    channels: dict[int, tuple[str, int]] = {}
    store = get_typestore(Stores.EMPTY)
    registered: set[str] = set()

    def handle(op: int, body: memoryview | bytes, record: bytes | None) -> BagMessage | None:
        if op == _OP_SCHEMA:
            (sid,) = struct.unpack_from("<H", body, 0)
            name, p = _read_str(body, 2)
            enc, p = _read_str(body, p)
            (n,) = struct.unpack_from("<I", body, p)
            schemas[sid] = (name, enc, bytes(body[p + 4: p + 4 + n]).decode("utf-8"))
            out.schema_records.append(record or _record(op, bytes(body)))
        elif op == _OP_CHANNEL:
            cid, sid = struct.unpack_from("<HH", body, 0)
            topic, _ = _read_str(body, 4)
            channels[cid] = (topic, sid)
            out.channel_records.append(record or _record(op, bytes(body)))
        elif op == _OP_MESSAGE:
            cid, _seq, log_time = struct.unpack_from("<HIQ", body, 0)
            if cid not in channels or channels[cid][1] not in schemas:
                raise BagError(f"{path}: message on undeclared channel {cid}")
            topic, sid = channels[cid]
            msgtype, enc, definition = schemas[sid]
            out.channel_counts[cid] = out.channel_counts.get(cid, 0) + 1
            out.start_ns = log_time if not out.message_count else min(out.start_ns, log_time)
            out.end_ns = max(out.end_ns, log_time)
            out.message_count += 1
            if wanted is not None and topic not in wanted:
                return None
            msg = None
            if decode:
                if msgtype not in registered:
                    if enc != "ros2msg":
                        raise BagError(f"{path}: schema encoding {enc!r} of {msgtype} is not supported (ros2msg)")
                    store.register(get_types_from_msg(definition, msgtype))
                    registered.add(msgtype)
                msg = store.deserialize_cdr(bytes(body[22:]), msgtype)
            return BagMessage(topic, msgtype, log_time, msg)
        return None

    try:
        f = open(path, "rb")
    except OSError as exc:
        raise BagError(f"cannot read bag {path}: {exc.strerror}") from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        if f.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
            raise BagError(f"{path} is not an MCAP file (magic bytes missing)")
        pos = len(MCAP_MAGIC)
        while pos + 9 <= size:
            head = f.read(9)
            op = head[0]
            (length,) = struct.unpack_from("<Q", head, 1)
            if pos + 9 + length > size:
                break  # the record the crash interrupted (never allocate a garbage length)
            if op in (_OP_DATA_END, _OP_FOOTER):
                out.data_end_pos = pos
                f.seek(max(0, size - 45))
                tail = f.read()
                out.complete = tail.endswith(MCAP_MAGIC) and len(tail) >= 45 and tail[-37] == _OP_FOOTER
                return
            body = f.read(length)
            if op == _OP_CHUNK:
                _, _, _usize, _crc = struct.unpack_from("<QQQI", body, 0)
                comp, p = _read_str(body, 28)
                (csize,) = struct.unpack_from("<Q", body, p)
                inner = _decompress(comp, body[p + 8: p + 8 + csize], path)
                q = 0
                while q + 9 <= len(inner):
                    iop = inner[q]
                    (ilen,) = struct.unpack_from("<Q", inner, q + 1)
                    m = handle(iop, memoryview(inner)[q + 9: q + 9 + ilen], inner[q: q + 9 + ilen])
                    if m is not None:
                        yield m
                    q += 9 + ilen
            else:
                m = handle(op, body, head + body if op in (_OP_SCHEMA, _OP_CHANNEL) else None)
                if m is not None:
                    yield m
            pos += 9 + length
    out.data_end_pos = pos
    out.truncated_bytes = size - pos


def scan_mcap(path: str | Path, *, decode: bool = True) -> ScanResult:
    """All of :func:`iter_mcap` at once: the messages (in file order) and what the scan found."""
    result = ScanResult()
    result.messages = list(iter_mcap(path, decode=decode, result=result))
    return result


def recover_mcap(path: str | Path) -> ScanResult:
    """Finalise an MCAP file whose writer died: drop the cut last record, append summary and footer.

    A no-op on a complete file. Complete chunks of a chunked file are kept as they are; the summary then
    has no chunk index, so readers scan the file (as they do ours). A file cut before its header was whole
    (even an empty one) becomes a valid MCAP file with no messages. Raises BagError only for a file that is
    not an MCAP file at all.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            start = f.read(len(MCAP_MAGIC))
    except OSError as exc:
        raise BagError(f"cannot read bag {path}: {exc.strerror}") from exc
    scan = ScanResult()
    if start == MCAP_MAGIC:
        for _ in iter_mcap(path, decode=False, result=scan):
            pass
        if scan.complete:
            return scan
    elif MCAP_MAGIC.startswith(start):  # cut inside the magic bytes (or empty): the writer died at once
        scan.data_end_pos, scan.truncated_bytes = 0, len(start)
    else:
        raise BagError(f"{path} is not an MCAP file (magic bytes missing)")
    with open(path, "r+b", buffering=0) as f:  # unbuffered: a refused write is cut away, not left in a buffer
        if scan.data_end_pos <= len(MCAP_MAGIC):  # the header record never became whole: start the file again
            scan.truncated_bytes = os.fstat(f.fileno()).st_size
            f.seek(0)
            _write_fully(f, _file_start())
            scan.data_end_pos = f.tell()
        try:
            _append_summary(f, scan.data_end_pos, scan.schema_records, scan.channel_records, scan.channel_counts,
                            scan.start_ns, scan.end_ns)
            os.fsync(f.fileno())
        except OSError as exc:  # a full disk: leave the file as it was found, to be finished once there is space
            f.truncate(scan.data_end_pos)
            raise BagWriteError(exc.errno, f"cannot finish bag {path}: {exc.strerror or exc}") from exc
    final = ScanResult()
    for _ in iter_mcap(path, decode=False, result=final):
        pass
    final.dropped_bytes = scan.truncated_bytes
    return final


def write_empty_mcap(path: str | Path) -> ScanResult:
    """A valid MCAP file with no messages at ``path`` (a rollout whose bag is missing or unusable)."""
    path = Path(path)
    with open(path, "xb") as f:
        f.write(_file_start())
        _append_summary(f, f.tell(), [], [], {}, 0, 0)
        os.fsync(f.fileno())
    return recover_mcap(path)


def resolve_bag_path(path: str | Path) -> Path:
    """An episode folder (holding rollout.mcap), a rosbag2 folder (metadata.yaml) or a .mcap/.db3 file."""
    path = Path(path)
    if path.is_dir():
        if (path / "rollout.mcap").is_file():
            return path / "rollout.mcap"
        if (path / "metadata.yaml").is_file():
            return path
        mcaps = sorted(path.glob("*.mcap"))
        if len(mcaps) == 1:
            return mcaps[0]
        raise BagError(f"{path} holds no rollout.mcap, metadata.yaml or single .mcap file")
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    if path.suffix not in (".mcap", ".db3"):
        raise BagError(f"bag {path} must be a .mcap or .db3 file, a rosbag2 folder or an episode folder")
    return path


def read_bag(path: str | Path, topics: Sequence[str] | None = None) -> Iterator[BagMessage]:
    """Messages of a bag in log-time order; a truncated MCAP file is read up to its last complete message.

    Complete bags of any provenance go through rosbags' reader; an MCAP file without footer (a crashed
    writer) goes through :func:`scan_mcap` and a warning is logged.
    """
    bag = resolve_bag_path(path)
    wanted = set(topics) if topics is not None else None
    if bag.suffix == ".mcap":
        head = _tail_bytes(bag, 45)
        if not (head.endswith(MCAP_MAGIC) and len(head) >= 45 and head[-37] == _OP_FOOTER):
            scan = ScanResult()
            yield from iter_mcap(bag, topics=topics, result=scan)
            log.warning("%s has no MCAP footer (writer did not close it): read %d messages up to the last "
                        "complete record, %d trailing bytes dropped", bag, scan.message_count, scan.truncated_bytes)
            return
    from rosbags.highlevel import AnyReader  # lazy: optional SDK (rosbags), not in install_requires

    try:
        with AnyReader([bag]) as reader:
            conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
            for conn, t, raw in reader.messages(connections=conns):
                yield BagMessage(conn.topic, conn.msgtype, t, reader.deserialize(raw, conn.msgtype))
    except BagError:
        raise
    except Exception as exc:  # rosbags raises several types; name the bag in one error
        raise BagError(f"cannot read bag {bag}: {exc}") from exc


def _tail_bytes(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - n))
        return f.read()


__all__ = [
    "BagError", "BagMessage", "BagWriteError", "McapBagWriter", "ScanResult", "camera_info_msg", "depth_msg", "depth_to_m",
    "image_msg", "image_to_rgb", "iter_mcap", "joint_state_msg", "plan_msg", "read_bag",
    "recover_mcap", "resolve_bag_path", "scan_mcap", "stamp_to_ns", "string_msg", "typestore",
]
