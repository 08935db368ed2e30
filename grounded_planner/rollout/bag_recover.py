"""Recovering an MCAP file whose writer died: keep every complete chunk, rebuild indexes, summary and footer in place.

What a SIGKILL leaves of a :class:`~grounded_planner.rollout.bag_write.McapBagWriter` file: the header, complete
chunks each followed by its message indexes, then perhaps a chunk (or its indexes) cut short. Recovery
reads the records with the `mcap` library's StreamReader, cuts the file after the last complete chunk,
writes that chunk's message indexes again if they were cut, and appends DataEnd, the summary (schemas,
channels, statistics, chunk indexes, summary offsets) and the footer, with the records of the `mcap`
library. Unchunked files (what this project wrote before) keep their messages the same way.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grounded_planner.rollout.bag_common import PROFILE, BagWriteError, library_name, write_fully
from grounded_planner.rollout.bag_read import MCAP_MAGIC, ScanResult, iter_mcap, scan_records


@dataclass
class _ChunkSeen:
    start: int
    end: int  # offset after the chunk record
    chunk: Any
    channel_times: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # channel -> [(log time, offset)]
    index_offsets: dict[int, int] = field(default_factory=dict)  # message index records after it
    index_end: int = 0


def _chunk_contents(chunk: Any, schemas: dict, channels: dict) -> dict[int, list[tuple[int, int]]]:
    """Schemas and channels a chunk declares (into ``schemas``/``channels``), and where its messages lie in it."""
    from mcap.data_stream import ReadDataStream  # lazy: optional SDK (mcap), not in install_requires
    from mcap.opcode import Opcode  # lazy: optional SDK (mcap)
    from mcap.records import Channel, Schema  # lazy: optional SDK (mcap)
    from mcap.stream_reader import get_chunk_data_stream  # lazy: optional SDK (mcap)

    stream, length = get_chunk_data_stream(chunk)
    times: dict[int, list[tuple[int, int]]] = {}
    while stream.count < length:
        offset = stream.count
        opcode, size = stream.read1(), stream.read8()
        body = ReadDataStream(_Bytes(stream.read(size)))
        if opcode == Opcode.SCHEMA:
            schema = Schema.read(body)
            schemas[schema.id] = schema
        elif opcode == Opcode.CHANNEL:
            channel = Channel.read(body)
            channels[channel.id] = channel
        elif opcode == Opcode.MESSAGE:
            channel_id, _sequence, log_time = body.read2(), body.read4(), body.read8()
            times.setdefault(channel_id, []).append((log_time, offset))
    return times


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def recover_mcap(path: str | Path) -> ScanResult:
    """Finalise an MCAP file whose writer died (a no-op on a closed file); returns what the file now holds.

    Every complete chunk is kept. A file cut before its header was whole (even an empty one) becomes a valid
    MCAP file with no messages. Raises BagError only for a file that is not an MCAP file at all.
    """
    # lazy: optional SDK (mcap), not in install_requires
    from mcap.records import Channel, Chunk, DataEnd, Footer, Message, MessageIndex, Schema

    path = Path(path)
    scan = ScanResult()
    schemas: dict[int, Any] = {}
    channels: dict[int, Any] = {}
    chunks: list[_ChunkSeen] = []
    loose: dict[int, list[int]] = {}  # unchunked files: channel -> log times
    keep_end = 0
    header_whole = False
    for raw in scan_records(path, scan):
        rec = raw.record
        if isinstance(rec, (DataEnd, Footer)):
            break
        if isinstance(rec, Chunk):
            try:
                times = _chunk_contents(rec, schemas, channels)
            except (ValueError, struct.error, UnicodeDecodeError):
                break  # decompressed, but its records are not whole: the chunk is not kept
            chunks.append(_ChunkSeen(raw.start, raw.end, rec, times, index_end=raw.end))
        elif isinstance(rec, MessageIndex) and chunks and chunks[-1].index_end == raw.start:
            chunks[-1].index_offsets[rec.channel_id] = raw.start
            chunks[-1].index_end = raw.end
        elif isinstance(rec, Schema):
            schemas[rec.id] = rec
        elif isinstance(rec, Channel):
            channels[rec.id] = rec
        elif isinstance(rec, Message):
            loose.setdefault(rec.channel_id, []).append(rec.log_time)
        header_whole = True
        keep_end = raw.end
    if scan.complete:
        return _final_scan(path, 0)
    dropped = os.path.getsize(path) - keep_end if os.path.exists(path) else 0
    if not header_whole:  # cut inside the magic or the header: start the file again
        with open(path, "r+b", buffering=0) as f:
            return _rewrite_empty(f, path, dropped)
    last = chunks[-1] if chunks else None
    if last is not None and set(last.index_offsets) != set(last.channel_times):
        keep_end = last.end  # its message indexes were cut: write them again
        last.index_offsets.clear()
    # unbuffered: a refused write is cut away at once, never left half in the file
    with open(path, "r+b", buffering=0) as f:
        f.truncate(keep_end)
        f.seek(keep_end)
        try:
            _finish(f, last, keep_end, chunks, schemas, channels, loose)
        except OSError as exc:  # a full disk: leave the file ending on its last complete chunk, for a later try
            f.truncate(keep_end)
            raise BagWriteError(exc.errno, f"cannot finish bag {path}: {exc.strerror or exc}") from exc
    return _final_scan(path, dropped)


def _finish(
    f,
    last: _ChunkSeen | None,
    keep_end: int,
    chunks: list[_ChunkSeen],
    schemas: dict,
    channels: dict,
    loose: dict[int, list[int]],
) -> None:
    """Message indexes of a cut last chunk, then DataEnd, the summary and the footer, after ``keep_end``."""
    from mcap.records import ChunkIndex, MessageIndex  # lazy: optional SDK (mcap), not in install_requires

    if last is not None and not last.index_offsets:
        builder = _builder()
        for channel_id, records in sorted(last.channel_times.items()):
            last.index_offsets[channel_id] = keep_end + builder.count
            MessageIndex(channel_id=channel_id, records=records).write(builder)
        write_fully(f, builder.end())
        last.index_end = f.tell()
    indexes = [
        ChunkIndex(
            message_start_time=c.chunk.message_start_time,
            message_end_time=c.chunk.message_end_time,
            chunk_start_offset=c.start,
            chunk_length=c.end - c.start,
            message_index_offsets=dict(c.index_offsets),
            message_index_length=c.index_end - c.end,
            compression=c.chunk.compression,
            compressed_size=len(c.chunk.data),
            uncompressed_size=c.chunk.uncompressed_size,
        )
        for c in chunks
    ]
    counts: dict[int, int] = {cid: len(t) for cid, t in loose.items()}
    all_times = [t for times in loose.values() for t in times]
    for c in chunks:
        for cid, recs in c.channel_times.items():
            counts[cid] = counts.get(cid, 0) + len(recs)
            all_times += [t for t, _ in recs]
    _append_summary(
        f,
        list(schemas.values()),
        list(channels.values()),
        counts,
        indexes,
        min(all_times, default=0),
        max(all_times, default=0),
    )
    os.fsync(f.fileno())


def _builder():
    from mcap.data_stream import RecordBuilder  # lazy: optional SDK (mcap), not in install_requires

    return RecordBuilder()


def _append_summary(
    f, schemas: list, channels: list, counts: dict[int, int], chunk_indexes: list, start_ns: int, end_ns: int
) -> None:
    """DataEnd, the summary section and the footer, laid out as the `mcap` library's Writer.finish lays them out."""
    from mcap.opcode import Opcode  # lazy: optional SDK (mcap), not in install_requires
    from mcap.records import DataEnd, Footer, Statistics, SummaryOffset  # lazy: optional SDK (mcap)

    head = _builder()
    DataEnd(0).write(head)
    write_fully(f, head.end())
    summary_start = f.tell()
    summary = _builder()
    offsets = []
    groups = (
        (Opcode.SCHEMA, schemas),
        (Opcode.CHANNEL, channels),
        (
            Opcode.STATISTICS,
            [
                Statistics(
                    message_count=sum(counts.values()),
                    schema_count=len(schemas),
                    channel_count=len(channels),
                    attachment_count=0,
                    metadata_count=0,
                    chunk_count=len(chunk_indexes),
                    message_start_time=start_ns,
                    message_end_time=end_ns,
                    channel_message_counts=dict(counts),
                )
            ],
        ),
        (Opcode.CHUNK_INDEX, chunk_indexes),
    )
    for opcode, records in groups:
        group_start = summary.count
        for rec in records:
            rec.write(summary)
        if summary.count > group_start:
            offsets.append(
                SummaryOffset(
                    group_opcode=opcode,
                    group_start=summary_start + group_start,
                    group_length=summary.count - group_start,
                )
            )
    offset_start = summary_start + summary.count
    for rec in offsets:
        rec.write(summary)
    data = summary.end()
    crc = zlib.crc32(struct.pack("<BQQQ", Opcode.FOOTER, 20, summary_start, offset_start), zlib.crc32(data))
    write_fully(f, data)
    tail = _builder()
    Footer(summary_start=summary_start, summary_offset_start=offset_start, summary_crc=crc).write(tail)
    write_fully(f, tail.end() + MCAP_MAGIC)


def _rewrite_empty(f, path: Path, dropped: int) -> ScanResult:
    from mcap.records import Header  # lazy: optional SDK (mcap), not in install_requires

    f.seek(0)
    f.truncate(0)
    head = _builder()
    Header(profile=PROFILE, library=library_name()).write(head)
    try:
        write_fully(f, MCAP_MAGIC + head.end())
        _append_summary(f, [], [], {}, [], 0, 0)
        os.fsync(f.fileno())
    except OSError as exc:
        raise BagWriteError(exc.errno, f"cannot finish bag {path}: {exc.strerror or exc}") from exc
    f.close()
    return _final_scan(path, dropped)


def _final_scan(path: Path, dropped: int) -> ScanResult:
    final = ScanResult()
    for _ in iter_mcap(path, decode=False, result=final):
        pass
    final.dropped_bytes = dropped
    return final


def write_empty_mcap(path: str | Path) -> ScanResult:
    """A valid MCAP file with no messages at ``path`` (a rollout whose bag is missing or unusable)."""
    path = Path(path)
    with open(path, "xb", buffering=0) as f:
        return _rewrite_empty(f, path, 0)
