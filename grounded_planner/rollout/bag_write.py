"""Writing rosbag2 MCAP files with the `mcap` library: chunked, compressed, indexed, with bounded loss on a crash.

The `mcap` library's ``Writer`` keeps the open chunk in memory and writes it, with its message indexes,
when it is full. :class:`McapBagWriter` also closes the open chunk once its first message is
``chunk_interval_s`` old (one background thread checks every writer of the process every 50 ms, so a quiet
topic is not kept back) and hands every finished chunk to the kernel at once. A process killed with
SIGKILL therefore loses at most the open chunk: the messages of the last ``chunk_interval_s`` (plus the
check period). ``fsync_every_s`` also forces the file to disk (power loss). A closed file has the summary
the field's indexed readers want: schemas, channels, statistics (per-channel message counts), chunk
indexes and summary offsets. :func:`grounded_planner.rollout.bag_recover.recover_mcap` rebuilds that
summary for a file whose writer died, from the chunks on disk.

Chunk compression: ``auto`` (the default) compresses a chunk with zstd unless at least half of its message
bytes are payloads compressed already (``sensor_msgs/CompressedImage``: JPEG colour, compressedDepth PNG),
which it stores uncompressed: zstd cannot shrink JPEG/PNG (it saves under 0.1 % of them) and compressing them
was most of the writer's time (``benchmarks/bench_rollout.py``). rosbag2's own MCAP writer (libmcap,
``forceCompression: false``) likewise stores a chunk uncompressed when compression does not shrink it, after
trying; here the message types say so without trying. ``zstd``, ``lz4`` and ``none`` apply to every chunk.

A full disk never leaves half a chunk: a write the file system refuses part way (it takes the bytes that
fit, then fails) is truncated away at once and raised as :class:`BagWriteError` (``errno`` ENOSPC), so the
file stays readable to its last complete chunk; the messages of the refused chunk are lost (the error
says so) and, once there is space, writing goes on after the last complete chunk. A refusal met by the
chunk timer is raised by the next ``write``. A file that lost a chunk gets its summary from the chunks on
disk at ``close()``; a ``close()`` on a full disk cuts its summary away again and raises, and ``rollouts
recover`` finishes the file later.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import tempfile
import threading
import time
import weakref
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Iterator

from grounded_planner.rollout.bag_common import (
    BagError,
    BagWriteError,
    MESSAGE_ENCODING,
    PROFILE,
    SCHEMA_ENCODING,
    library_name,
    typestore,
    write_fully,
)
from grounded_planner.rollout.bag_recover import recover_mcap

log = logging.getLogger(__name__)

COMPRESSIONS = ("auto", "zstd", "lz4", "none")
# payloads compressed already (JPEG, PNG): a chunk mostly of these is stored uncompressed under ``auto``
PRECOMPRESSED_MSGTYPES = frozenset({"sensor_msgs/msg/CompressedImage"})
AUTO_PRECOMPRESSED_SHARE = 0.5  # of a chunk's message bytes, from which ``auto`` stores it uncompressed


@dataclass(frozen=True)
class BagOptions:
    """How a bag is written (the rollout logger's recording options)."""

    compression: str = "auto"  # chunk compression: auto (zstd, but none for a chunk mostly of JPEG/PNG payloads),
    #                            zstd (rosbag2's choice) for every chunk, lz4 (faster, larger) or none
    chunk_size: int = 1024 * 1024  # bytes: a chunk is closed once its uncompressed records pass this size
    chunk_interval_s: float = 0.5  # s: ... or once its first message is this old; SIGKILL loses at most this
    #                                   (0 = a chunk per message: nothing lost, poor compression)
    fsync_every_s: float | None = 1.0  # s: force the file to disk at most this often and at close (power loss);
    #                                    None = never (the kernel writes it back in its own time)

    def __post_init__(self):
        if self.compression not in COMPRESSIONS:
            raise BagError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")
        if not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise BagError(f"chunk_size must be a positive number of bytes, got {self.chunk_size!r}")
        if not self.chunk_interval_s >= 0:
            raise BagError(f"chunk_interval_s must be >= 0 s, got {self.chunk_interval_s!r}")
        if self.fsync_every_s is not None and not self.fsync_every_s >= 0:
            raise BagError(f"fsync_every_s must be >= 0 s or None, got {self.fsync_every_s!r}")


class _FileSink:
    """The stream the mcap ``Writer`` writes into: records wait in memory until :meth:`commit` hands them to the
    kernel; a commit the file system refuses is cut back to the previous one, so the file ends on a whole chunk.
    The records are kept as the ``bytes`` the Writer hands over (not copied into one buffer: a chunk is ~1 MiB)."""

    def __init__(self, path: Path):
        try:
            self.file = open(path, "xb", buffering=0)
        except FileExistsError as exc:
            raise BagError(f"bag {path} exists already; refusing to overwrite a recording") from exc
        except OSError as exc:
            raise BagError(f"cannot create bag {path}: {exc.strerror}") from exc
        self.path = path
        self.committed = 0
        self.pending: list[bytes] = []
        self.pending_bytes = 0

    def write(self, data: bytes) -> int:
        data = data if isinstance(data, bytes) else bytes(data)  # kept until commit: must not change meanwhile
        self.pending.append(data)
        self.pending_bytes += len(data)
        return len(data)

    def tell(self) -> int:
        return self.committed + self.pending_bytes

    def flush(self) -> None:
        pass  # the mcap Writer's flush() ends here; McapBagWriter commits itself, to catch a refused write

    def commit(self, what: str = "write to") -> None:
        if not self.pending:
            return
        start, parts, size = self.committed, self.pending, self.pending_bytes
        self.pending, self.pending_bytes = [], 0
        try:
            self.file.seek(start)
            for data in parts:
                write_fully(self.file, data)
        except OSError as exc:
            try:
                self.file.truncate(start)  # frees the space the cut write took: possible on a full disk too
                self.file.seek(start)
            except OSError as trunc_exc:  # unusual: say so; the first error stands
                log.error("%s: cannot cut the unfinished write away (%s)", self.path, trunc_exc.strerror)
            raise BagWriteError(
                exc.errno,
                f"cannot {what} bag {self.path}: {exc.strerror or exc}; cut back to its "
                f"last complete chunk ({start} bytes), readable",
            ) from exc
        self.committed = start + size

    def fsync(self) -> None:
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


class _SpilledChunkIndexes:
    """The mcap ``Writer``'s list of chunk indexes (one ``ChunkIndex`` a closed chunk, written into the summary at
    ``finish()``), kept in an unnamed temporary file beside the bag instead of in memory, so that a writer open for
    hours (a session: a chunk every 0.5 s) holds constant memory: the library's list grew by ~630 bytes a chunk,
    4.5 MB an hour (``benchmarks/bench_rollout.py``). The file is unlinked from the start (gone when closed or when
    the process dies). A chunk index the disk refuses (full) is kept in memory instead, so ``finish()`` still has
    every one. Only what the Writer (mcap 1.6) does with the list is offered: ``append`` and iteration."""

    def __init__(self, directory: Path):
        self._memory: list = []  # indexes the spill file refused, after those in it
        self._spilled = 0  # ChunkIndex records in the file
        self._end = 0  # the file's length: its complete records
        try:
            self._file = tempfile.TemporaryFile(dir=directory, prefix=".chunk_indexes.", buffering=0)
        except OSError as exc:
            log.warning("%s: chunk indexes stay in memory (no spill file: %s)", directory, exc.strerror or exc)
            self._file = None

    def append(self, index) -> None:
        from mcap.data_stream import RecordBuilder  # lazy: optional SDK (mcap), not in install_requires

        if self._file is not None and not self._memory:  # in order: once one stayed in memory, all after it do
            builder = RecordBuilder()
            index.write(builder)
            try:
                write_fully(self._file, builder.end())
            except OSError as exc:
                try:
                    self._file.truncate(self._end)
                    self._file.seek(self._end)
                except OSError:
                    pass
                log.warning("chunk indexes stay in memory from here on (spill file: %s)", exc.strerror or exc)
            else:
                self._spilled += 1
                self._end = self._file.tell()
                return
        self._memory.append(index)

    def __iter__(self) -> Iterator:
        from mcap.stream_reader import StreamReader  # lazy: optional SDK (mcap), not in install_requires

        if self._spilled:
            # read once, at finish(), whole (the summary being built holds the same bytes); not through the file
            # object, which the reader's BufferedReader would close when it is collected
            data = bytearray()
            while len(data) < self._end:
                part = os.pread(self._file.fileno(), self._end - len(data), len(data))
                if not part:
                    raise BagError(f"the spilled chunk indexes end at {len(data)} of {self._end} bytes")
                data += part
            yield from itertools.islice(StreamReader(io.BytesIO(data), skip_magic=True).records, self._spilled)
        yield from self._memory

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class _ZlibWithFastCrc:
    """``zlib`` as the mcap Writer sees it (its module global; it calls only ``zlib.crc32``: every chunk's CRC, the
    summary's), with zlib-ng's ``crc32``: the same CRC-32 (equal values on every input), vectorised, 12.8 GB/s
    against Debian zlib 1.2.13's 3.2 GB/s here; the chunk CRC was a fifth of the writer's time on JPEG/PNG frames
    (``benchmarks/bench_rollout.py``). Everything else is zlib's."""

    def __init__(self, crc32):
        self.crc32 = crc32

    def __getattr__(self, name: str):
        return getattr(zlib, name)


def fast_crc(writer_module) -> bool:
    """Give the `mcap` library's writer module zlib-ng's CRC-32 (see :class:`_ZlibWithFastCrc`) where zlib-ng is
    installed (the rollout extra); True when it has it. Every Writer of the process then uses it; the files are
    byte for byte the same."""
    if isinstance(getattr(writer_module, "zlib", None), _ZlibWithFastCrc):
        return True
    try:
        from zlib_ng import zlib_ng  # lazy: optional (the rollout extra)
    except ImportError:
        return False
    if getattr(writer_module, "zlib", None) is not zlib:  # a library that no longer uses zlib so: leave it be
        return False
    writer_module.zlib = _ZlibWithFastCrc(zlib_ng.crc32)
    return True


class McapBagWriter:
    """rosbag2 MCAP writer over the `mcap` library, safe for many threads, that loses at most the open chunk on
    SIGKILL (see the module docstring).

    ``write`` with ``log_time_ns=None`` uses the wall clock, kept non-decreasing. Log times may also come out of
    order (the file is indexed). Use as a context manager or call :meth:`close`.

    Parameters
    ----------
    path : path
        The new file (must not exist).
    options : BagOptions, optional
        Compression, chunk size and interval, fsync period.
    fsync_every_s : float or None, optional
        Overrides ``options.fsync_every_s`` (kept for callers of the earlier writer).
    """

    def __init__(
        self,
        path: str | Path,
        options: BagOptions | None = None,
        *,
        fsync_every_s: float | None | str = "",
        library: str = "",
    ):
        import mcap.writer  # lazy: optional SDK (mcap), not in install_requires
        from mcap.writer import CompressionType, Writer  # lazy: optional SDK (mcap), as above

        fast_crc(mcap.writer)

        options = options or BagOptions()
        if fsync_every_s != "":
            options = BagOptions(options.compression, options.chunk_size, options.chunk_interval_s, fsync_every_s)
        self.options = options
        self.path = Path(path)
        self._sink = _FileSink(self.path)
        self._auto = options.compression == "auto"
        compression = {
            "auto": CompressionType.ZSTD,
            "zstd": CompressionType.ZSTD,
            "lz4": CompressionType.LZ4,
            "none": CompressionType.NONE,
        }[options.compression]
        self._writer = Writer(self._sink, chunk_size=options.chunk_size, compression=compression)
        self._chunk_indexes = None
        if hasattr(self._writer, _WRITER_CHUNK_INDEXES):  # constant memory over a long session (see the class)
            self._chunk_indexes = _SpilledChunkIndexes(self.path.parent)
            setattr(self._writer, _WRITER_CHUNK_INDEXES, self._chunk_indexes)
        else:
            log.warning(
                "mcap %s's Writer keeps no %s: its chunk indexes stay in memory (~630 bytes a chunk)",
                library_name(),
                _WRITER_CHUNK_INDEXES,
            )
        if self._auto and not hasattr(self._writer, _WRITER_COMPRESSION):
            log.warning(
                "mcap %s's Writer has no per-chunk compression setting (%s): compression auto writes every "
                "chunk with zstd",
                library_name(),
                _WRITER_COMPRESSION,
            )
            self._auto = False
        self._zstd, self._none = CompressionType.ZSTD, CompressionType.NONE
        self._chunk_compression = compression  # what the open chunk will be written with
        self._chunk_bytes = 0  # message bytes in the open chunk ...
        self._chunk_precompressed = 0  # ... and those of them on PRECOMPRESSED_MSGTYPES channels
        self._precompressed_channels: set[int] = set()
        self._lock = threading.RLock()
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, tuple[int, str]] = {}  # topic -> (channel id, msgtype)
        self._declared_since_commit: list[tuple[str, str]] = []  # ("schema", msgtype) / ("topic", topic)
        self._sequence: dict[int, int] = {}
        self._open_since: float | None = None  # monotonic time of the open chunk's first message
        self._last_log_time_ns = 0
        self._last_fsync = time.monotonic()
        self._refused: BagWriteError | None = None  # met by the chunk timer, raised by the next write
        self.damaged = False  # a chunk was refused: the summary comes from the file
        self.message_count = 0
        self.closed = False
        try:
            self._writer.start(profile=PROFILE, library=library or library_name())
            self._sink.commit()
        except BaseException:
            self._sink.close()
            raise
        if options.chunk_interval_s > 0:
            _CHUNK_TIMER.watch(self)

    # -- topics ------------------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str) -> int:
        """Declare ``topic`` with ROS type ``msgtype`` (e.g. ``sensor_msgs/msg/Image``); idempotent; the channel id."""
        with self._lock:
            if topic in self._channels:
                cid, known = self._channels[topic]
                if known != msgtype:
                    raise BagError(f"topic {topic} already has type {known}, not {msgtype}")
                return cid
            store = typestore()
            if msgtype not in store.types:
                raise BagError(f"unknown message type {msgtype!r} for topic {topic} (not in the rosbags typestore)")
            if msgtype not in self._schemas:
                self._schemas[msgtype] = self._writer.register_schema(msgtype, SCHEMA_ENCODING, _msgdef(msgtype))
                self._declared_since_commit.append(("schema", msgtype))
            # rosbag2 stores the publishers' QoS here; rosbags and ros2 bag read an empty value as the default
            cid = self._writer.register_channel(
                topic, MESSAGE_ENCODING, self._schemas[msgtype], {"offered_qos_profiles": ""}
            )
            self._channels[topic] = (cid, msgtype)
            if msgtype in PRECOMPRESSED_MSGTYPES:
                self._precompressed_channels.add(cid)
            self._declared_since_commit.append(("topic", topic))
            return cid

    @property
    def topics(self) -> dict[str, str]:
        """topic -> ROS type of every declared topic."""
        with self._lock:
            return {topic: msgtype for topic, (_, msgtype) in self._channels.items()}

    # -- messages ----------------------------------------------------------------------------------
    def write(self, topic: str, msg: Any, msgtype: str | None = None, log_time_ns: int | None = None) -> int:
        """Serialise ``msg`` (a rosbags message object) to CDR and add it; returns the log time used."""
        msgtype = msgtype or getattr(msg, "__msgtype__", None)
        if not msgtype:
            raise BagError(f"cannot tell the message type of {type(msg).__name__} for topic {topic}")
        data = typestore().serialize_cdr(msg, msgtype)
        with self._lock:
            self._check_open()
            self.add_topic(topic, msgtype)
            return self.write_raw(topic, data, log_time_ns)  # the memoryview: the Writer copies it into the chunk

    def write_raw(self, topic: str, cdr: bytes | memoryview, log_time_ns: int | None = None) -> int:
        """Add already-serialised CDR bytes on a declared topic; returns the log time used.

        Raises BagWriteError when the file system refused the chunk this message closed (or one the chunk timer
        closed before): that chunk's messages are lost, the file ends on the chunk before it.
        """
        with self._lock:
            self._check_open()
            if self._refused is not None:
                refused, self._refused = self._refused, None
                raise refused
            if topic not in self._channels:
                raise BagError(f"topic {topic} was not declared (add_topic) in bag {self.path}")
            cid = self._channels[topic][0]
            if log_time_ns is None:
                log_time_ns = max(time.time_ns(), self._last_log_time_ns)
            log_time_ns = int(log_time_ns)
            seq = self._sequence.get(cid, 0) + 1
            self._sequence[cid] = seq
            if self._auto:  # before add_message: a full chunk is written inside it, with this message
                self._chunk_bytes += len(cdr)
                if cid in self._precompressed_channels:
                    self._chunk_precompressed += len(cdr)
                self._set_chunk_compression(
                    self._none
                    if self._chunk_precompressed >= AUTO_PRECOMPRESSED_SHARE * self._chunk_bytes
                    else self._zstd
                )
            self._writer.add_message(cid, log_time_ns, cdr, log_time_ns, seq)
            self.message_count += 1
            self._last_log_time_ns = max(self._last_log_time_ns, log_time_ns)
            if self._sink.pending:  # the writer closed a full chunk
                self._commit_chunk()
            elif self._open_since is None:
                self._open_since = time.monotonic()
            if self.options.chunk_interval_s == 0 or (
                self._open_since is not None and time.monotonic() - self._open_since >= self.options.chunk_interval_s
            ):
                self.flush()
            return log_time_ns

    def flush(self) -> None:
        """Close the open chunk and hand it to the kernel now (what the chunk timer does)."""
        with self._lock:
            self._check_open()
            self._writer.flush()  # finishes the open chunk (and its message indexes) into the sink
            self._commit_chunk()

    def _set_chunk_compression(self, compression) -> None:
        """The compression the library's Writer gives the open chunk when it writes it. mcap-python (1.6) has no
        option for this: it reads its private ``__compression`` when it writes a chunk (libmcap, rosbag2's
        writer, decides per chunk on its own). Checked at start; a behaviour test reads the chunks back."""
        if compression != self._chunk_compression:
            setattr(self._writer, _WRITER_COMPRESSION, compression)
            self._chunk_compression = compression

    def _commit_chunk(self) -> None:
        self._open_since = None
        self._chunk_bytes = self._chunk_precompressed = 0
        try:
            self._sink.commit()
        except BagWriteError:
            self.damaged = True
            # what the refused chunk declared is not in the file: declare it again with the next message
            for kind, name in self._declared_since_commit:
                (self._schemas if kind == "schema" else self._channels).pop(name, None)
            self._declared_since_commit.clear()
            raise
        self._declared_since_commit.clear()
        fsync_s = self.options.fsync_every_s
        if fsync_s is not None and time.monotonic() - self._last_fsync >= fsync_s:
            self._sink.fsync()
            self._last_fsync = time.monotonic()

    def _check_open(self) -> None:
        if self.closed:
            raise BagError(f"bag {self.path} is closed")

    def _close_aged_chunk(self) -> None:
        with self._lock:
            if self.closed or self._open_since is None:
                return
            if time.monotonic() - self._open_since >= self.options.chunk_interval_s:
                try:
                    self.flush()
                except BagWriteError as exc:  # the next write raises it: its caller learns of the loss
                    log.error("%s", exc)
                    self._refused = exc

    # -- closing -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Write the open chunk, then the summary (schemas, channels, statistics, chunk indexes) and the footer.

        On a full disk the summary is cut away again and BagWriteError raised: the file is closed, readable up
        to its last complete chunk, and ``rollouts recover`` (:func:`recover_mcap`) finishes it once there is space.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True  # the chunk timer forgets a closed writer
            try:
                self._writer.flush()
                self._commit_chunk()
                if not self.damaged:
                    self._writer.finish()
                    self._sink.commit("finish")
                    if self.options.fsync_every_s is not None:  # None: never forced to disk, at close neither
                        self._sink.fsync()
            except OSError as exc:
                raise BagWriteError(
                    exc.errno,
                    f"cannot finish bag {self.path}: {exc.strerror or exc}; left without "
                    f"its summary, readable up to its last complete chunk",
                ) from exc
            finally:
                self._sink.close()
                if self._chunk_indexes is not None:
                    self._chunk_indexes.close()
            if self.damaged:  # the mcap Writer's own index counts the refused chunk: index the file as it is
                recover_mcap(self.path)

    def __enter__(self) -> "McapBagWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_WRITER_COMPRESSION = "_Writer__compression"  # mcap.writer.Writer's chunk compression (name-mangled private)
_WRITER_CHUNK_INDEXES = "_Writer__chunk_indices"  # ... and its list of chunk indexes for the summary


@cache
def _msgdef(msgtype: str) -> bytes:
    """The ``ros2msg`` schema of a type (its definition and those it uses), built once per process."""
    return typestore().generate_msgdef(msgtype, ros_version=2)[0].encode()


class _ChunkTimer:
    """One thread for every open writer of the process (a campaign opens thousands, one after another): every
    ``PERIOD_S`` it closes the open chunks that are ``chunk_interval_s`` old. Writers are held weakly: one dropped
    without close() is collected and forgotten."""

    PERIOD_S = 0.05

    def __init__(self):
        self._writers: "weakref.WeakSet[McapBagWriter]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, writer: McapBagWriter) -> None:
        with self._lock:
            self._writers.add(writer)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="mcap chunk timer")
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.PERIOD_S)
            with self._lock:
                for writer in [w for w in self._writers if w.closed]:
                    self._writers.discard(writer)
                writers = list(self._writers)
            for writer in writers:
                writer._close_aged_chunk()
            del writers


_CHUNK_TIMER = _ChunkTimer()
