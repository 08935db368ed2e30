"""Reading rollout bags: the `mcap` library's indexed reader for closed files, a record scan for cut ones, rosbags for
rosbag2 folders and sqlite3.

A closed MCAP file is read through its summary (chunk indexes): a time window (an episode inside a session
file) reads only the chunks that overlap it. A file without footer (its writer died and nobody ran
``rollouts recover`` yet) is scanned record by record up to its last complete chunk, with a warning.
"""

from __future__ import annotations

import io
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Sequence

from grounded_planner.rollout.bag_common import BagError, BagMessage, SchemaTypes

log = logging.getLogger(__name__)

MCAP_MAGIC = b"\x89MCAP0\r\n"
_FOOTER_AND_MAGIC = 1 + 8 + 20 + len(MCAP_MAGIC)  # footer record (opcode, length, 20-byte body) + magic
_OP_FOOTER = 0x02


@dataclass
class ScanResult:
    """What a record-by-record read of an MCAP file found, and whether the file was cut short."""

    messages: list[BagMessage] = field(default_factory=list)  # filled by scan_mcap only
    complete: bool = False  # footer present: the writer closed the file
    truncated_bytes: int = 0  # bytes after the last complete record (a record cut by the crash)
    data_end_pos: int = 0  # file offset after the last complete data record
    message_count: int = 0
    chunk_count: int = 0
    start_ns: int = 0  # first and last log time seen
    end_ns: int = 0
    channel_counts: dict[int, int] = field(default_factory=dict)
    dropped_bytes: int = 0  # recover_mcap only: bytes of a cut record (or a cut file start) dropped


class _CountingFile:
    """A file read through the `mcap` StreamReader: counts the bytes it hands out and notices a read cut by EOF."""

    def __init__(self, f: BinaryIO, start: int = 0):
        self.f = f
        self.pos = start
        self.short = False

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.pos += len(data)
        if n is not None and n >= 0 and len(data) < n:
            self.short = True
        return data


@dataclass
class RawRecord:
    """One top-level record of an MCAP file and where it lies (``end`` is the offset after it)."""

    start: int
    end: int
    record: Any


def has_footer(path: str | Path) -> bool:
    """Does the file end with an MCAP footer and the closing magic (its writer closed it)?"""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size < len(MCAP_MAGIC) * 2 + _FOOTER_AND_MAGIC - len(MCAP_MAGIC):
            return False
        f.seek(size - _FOOTER_AND_MAGIC)
        tail = f.read()
    return tail.endswith(MCAP_MAGIC) and tail[0] == _OP_FOOTER


def scan_records(path: str | Path, result: ScanResult | None = None) -> Iterator[RawRecord]:
    """Every complete top-level record of an MCAP file, in file order, through the `mcap` library's StreamReader.

    Stops quietly at the first record the file does not hold whole (a crash cut it) or whose chunk does not
    decompress; ``result`` gets ``data_end_pos`` (where the complete records end), ``truncated_bytes`` and
    ``complete`` (the footer was reached). Raises BagError for a file that is not MCAP at all.
    """
    # lazy: optional SDK (mcap), not in install_requires
    from mcap.exceptions import McapError
    from mcap.records import Chunk, DataEnd, Footer  # lazy: optional SDK (mcap)
    from mcap.stream_reader import StreamReader, breakup_chunk  # lazy: optional SDK (mcap)

    path = Path(path)
    out = result if result is not None else ScanResult()
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise BagError(f"cannot read bag {path}: {exc.strerror}") from exc
    with f:
        size = os.fstat(f.fileno()).st_size
        start = f.read(len(MCAP_MAGIC))
        if start != MCAP_MAGIC:
            if MCAP_MAGIC.startswith(start):  # cut inside the magic (or empty): nothing complete
                out.data_end_pos, out.truncated_bytes = 0, len(start)
                return
            raise BagError(f"{path} is not an MCAP file (magic bytes missing)")
        src = _CountingFile(f, len(MCAP_MAGIC))
        # a record longer than the file is a cut one; the limit also keeps a cut length from allocating gigabytes
        records = StreamReader(src, skip_magic=True, emit_chunks=True, record_size_limit=max(size, 1)).records
        out.data_end_pos = prev = src.pos
        while True:
            try:
                record = next(records)
            except StopIteration:
                break
            except (McapError, struct.error, ValueError, UnicodeDecodeError, EOFError):
                break  # a record cut by the crash (or garbage after it): the file ends before it
            if src.short:
                break
            if isinstance(record, Chunk):
                try:
                    breakup_chunk(record, validate_crc=True)
                except (McapError, ValueError, RuntimeError, struct.error, UnicodeDecodeError):
                    break  # zstd/lz4 raise their own errors, all ValueError/RuntimeError subclasses
            if isinstance(record, (DataEnd, Footer)):
                out.complete = isinstance(record, Footer) or has_footer(path)
                out.data_end_pos = prev
                out.truncated_bytes = 0
                if isinstance(record, DataEnd) or out.complete:
                    yield RawRecord(prev, src.pos, record)
                return
            yield RawRecord(prev, src.pos, record)
            prev = out.data_end_pos = src.pos
        out.truncated_bytes = size - out.data_end_pos


def iter_mcap(
    path: str | Path,
    *,
    decode: bool = True,
    topics: Sequence[str] | None = None,
    result: ScanResult | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> Iterator[BagMessage]:
    """Messages of an MCAP file in file order, read record by record; a missing footer and a cut chunk are fine.

    Handles chunked files (zstd, lz4, none) and unchunked ones (what this project wrote before the `mcap`
    library did) as far as their complete records go; types come from the schemas in the file. Messages on
    other ``topics`` or outside [``start_ns``, ``end_ns``) are counted, not decoded.
    """
    from mcap.records import Channel, Chunk, Message, Schema  # lazy: optional SDK (mcap)
    from mcap.stream_reader import breakup_chunk  # lazy: optional SDK (mcap)

    path = Path(path)
    out = result if result is not None else ScanResult()
    wanted = set(topics) if topics is not None else None
    schemas: dict[int, Any] = {}
    channels: dict[int, Any] = {}
    types = SchemaTypes(path)

    def message(m) -> BagMessage | None:
        channel = channels.get(m.channel_id)
        if channel is None or channel.schema_id not in schemas:
            raise BagError(f"{path}: message on undeclared channel {m.channel_id}")
        out.channel_counts[m.channel_id] = out.channel_counts.get(m.channel_id, 0) + 1
        out.start_ns = m.log_time if not out.message_count else min(out.start_ns, m.log_time)
        out.end_ns = max(out.end_ns, m.log_time)
        out.message_count += 1
        if (
            (wanted is not None and channel.topic not in wanted)
            or (start_ns is not None and m.log_time < start_ns)
            or (end_ns is not None and m.log_time >= end_ns)
        ):
            return None
        schema = schemas[channel.schema_id]
        msg = types.deserialize(m.data, schema.name, schema.encoding, schema.data) if decode else None
        return BagMessage(channel.topic, schema.name, m.log_time, msg)

    for raw in scan_records(path, out):
        inner = breakup_chunk(raw.record) if isinstance(raw.record, Chunk) else [raw.record]
        out.chunk_count += isinstance(raw.record, Chunk)
        for rec in inner:
            if isinstance(rec, Schema):
                schemas[rec.id] = rec
            elif isinstance(rec, Channel):
                channels[rec.id] = rec
            elif isinstance(rec, Message):
                m = message(rec)
                if m is not None:
                    yield m


def scan_mcap(path: str | Path, *, decode: bool = True) -> ScanResult:
    """All of :func:`iter_mcap` at once: the messages (in file order) and what the scan found."""
    result = ScanResult()
    result.messages = list(iter_mcap(path, decode=decode, result=result))
    return result


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


def read_bag(
    path: str | Path, topics: Sequence[str] | None = None, *, start_ns: int | None = None, end_ns: int | None = None
) -> Iterator[BagMessage]:
    """Messages of a bag in log-time order, optionally only those on ``topics`` in [``start_ns``, ``end_ns``).

    A closed MCAP file is read with the `mcap` library's indexed reader (only the chunks that overlap the
    window are read); an MCAP file without footer (a crashed writer) is scanned up to its last complete
    chunk, with a warning; rosbag2 folders and sqlite3 files go through rosbags.
    """
    bag = resolve_bag_path(path)
    if bag.suffix == ".mcap":
        if has_footer(bag):
            yield from _read_indexed(bag, topics, start_ns, end_ns)
            return
        scan = ScanResult()
        found = list(iter_mcap(bag, topics=topics, result=scan, start_ns=start_ns, end_ns=end_ns))
        log.warning(
            "%s has no MCAP footer (writer did not close it): read %d messages up to the last complete "
            "chunk, %d trailing bytes dropped",
            bag,
            scan.message_count,
            scan.truncated_bytes,
        )
        yield from sorted(found, key=lambda m: m.log_time_ns)
        return
    from rosbags.highlevel import AnyReader  # lazy: optional SDK (rosbags), not in install_requires

    wanted = set(topics) if topics is not None else None
    try:
        with AnyReader([bag]) as reader:
            conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
            for conn, t, raw in reader.messages(connections=conns, start=start_ns, stop=end_ns):
                yield BagMessage(conn.topic, conn.msgtype, t, reader.deserialize(raw, conn.msgtype))
    except BagError:
        raise
    except Exception as exc:  # rosbags raises several types; name the bag in one error
        raise BagError(f"cannot read bag {bag}: {exc}") from exc


def _read_indexed(
    bag: Path, topics: Sequence[str] | None, start_ns: int | None, end_ns: int | None
) -> Iterator[BagMessage]:
    from mcap.exceptions import McapError  # lazy: optional SDK (mcap), not in install_requires
    from mcap.reader import make_reader  # lazy: optional SDK (mcap)

    types = SchemaTypes(bag)
    try:
        with open(bag, "rb") as f:
            reader = make_reader(f)
            for schema, channel, message in reader.iter_messages(
                topics=list(topics) if topics is not None else None, starting_at=start_ns, ending_before=end_ns
            ):
                if schema is None:
                    raise BagError(f"{bag}: channel {channel.topic} has no schema (expected ROS 2 messages)")
                yield BagMessage(
                    channel.topic,
                    schema.name,
                    message.log_time,
                    types.deserialize(message.data, schema.name, schema.encoding, schema.data),
                )
    except (McapError, struct.error, io.UnsupportedOperation) as exc:
        raise BagError(f"cannot read bag {bag}: {exc}") from exc
    except OSError as exc:
        raise BagError(f"cannot read bag {bag}: {exc.strerror or exc}") from exc


@dataclass
class BagInfo:
    """What a closed bag's summary says (no message is read)."""

    path: Path
    message_count: int
    chunk_count: int
    start_ns: int
    end_ns: int
    topics: dict[str, str]  # topic -> ROS type
    counts: dict[str, int]  # topic -> messages
    compression: str  # of the chunks ("" none, "mixed")


def bag_info(path: str | Path) -> BagInfo:
    """A closed MCAP file's summary: message counts per topic, chunks, time span (raises BagError without one)."""
    from mcap.exceptions import McapError  # lazy: optional SDK (mcap), not in install_requires
    from mcap.reader import make_reader  # lazy: optional SDK (mcap)

    path = Path(path)
    try:
        with open(path, "rb") as f:
            summary = make_reader(f).get_summary()
    except (McapError, struct.error, OSError) as exc:
        raise BagError(f"cannot read the summary of {path}: {exc}") from exc
    if summary is None or summary.statistics is None:
        raise BagError(f"{path} has no summary with statistics (run `grounded-planner rollouts recover`)")
    stats = summary.statistics
    topics = {
        c.topic: (summary.schemas[c.schema_id].name if c.schema_id in summary.schemas else "")
        for c in summary.channels.values()
    }
    counts = {
        summary.channels[cid].topic: n for cid, n in stats.channel_message_counts.items() if cid in summary.channels
    }
    kinds = {c.compression for c in summary.chunk_indexes}
    return BagInfo(
        path,
        stats.message_count,
        stats.chunk_count,
        stats.message_start_time,
        stats.message_end_time,
        topics,
        counts,
        kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else ""),
    )
