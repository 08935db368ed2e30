"""Rollout bags as the field's own readers see them (issue 28): the `mcap` library's indexed reader (summary,
per-channel counts, chunk indexes, seek by time), rosbags, image_transport's compressed formats on a real
RealSense frame, bounded loss under a real SIGKILL (a full disk: test_rollout_full_disk.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from mcap.reader import make_reader  # noqa: E402
from rosbags.highlevel import AnyReader  # noqa: E402

from helpers.killed import kill_when_ready  # noqa: E402
from grounded_planner.msgs.images import depth_to_numpy  # noqa: E402
from grounded_planner.rollout import bag as B  # noqa: E402
from grounded_planner.rollout.record import (
    RecordingOptions,
    RolloutRecorder,
    RolloutTopics,  # noqa: E402
    load_rollout,
    recover_rollout,
)

REPO = Path(__file__).resolve().parents[1]
TOPICS = RolloutTopics()
K = [500.0, 0.0, 32.0, 0.0, 500.0, 24.0, 0.0, 0.0, 1.0]


def _real_frame():
    """librealsense's own recording (a D400 frame of an office corner), read by librealsense."""
    pytest.importorskip("pyrealsense2")
    from helpers.realdata import real_frame

    return real_frame()


@pytest.fixture(scope="module")
def frame():
    return _real_frame()


def _summary(path: Path):
    with open(path, "rb") as f:
        return make_reader(f).get_summary()


def _channel_counts(summary) -> dict[str, int]:
    """topic -> messages, from the summary's statistics."""
    return {summary.channels[cid].topic: n for cid, n in summary.statistics.channel_message_counts.items()}


def _record_episode(folder: Path, frame, n: int = 6, options: RecordingOptions | None = None) -> None:
    clock = [1_000_000_000]

    def tick() -> int:
        clock[0] += 100_000_000  # 10 Hz log time
        return clock[0]

    with RolloutRecorder(folder, instruction="put the backpack on the chair", options=options, clock_ns=tick) as rec:
        for i in range(n):
            rec.log_frame(frame.color_rgb, frame.depth_mm, stamp_ns=10_000 + i)
            rec.log_camera_info(frame.K.ravel(), 640, 480, stamp_ns=10_000 + i)
            rec.log_joint_state(["fr3_finger_joint1"], [0.04 - 0.005 * i], stamp_ns=10_000 + i)


def test_compressed_by_default_as_image_transport_records_it(frame, tmp_path):
    _record_episode(tmp_path / "ep", frame)
    summary = _summary(tmp_path / "ep" / "rollout.mcap")
    topics = {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values()}
    assert topics[TOPICS.color_compressed] == topics[TOPICS.depth_compressed] == "sensor_msgs/msg/CompressedImage"
    assert TOPICS.color not in topics and TOPICS.depth not in topics
    color = [m for m in B.read_bag(tmp_path / "ep") if m.topic == TOPICS.color_compressed]
    depth = [m for m in B.read_bag(tmp_path / "ep") if m.topic == TOPICS.depth_compressed]
    # compressed_image_transport: "<encoding>; jpeg compressed bgr8"; compressedDepth: "<encoding>; compressedDepth png"
    assert color[0].msg.format == "rgb8; jpeg compressed bgr8" and bytes(color[0].msg.data[:2]) == b"\xff\xd8"
    assert depth[0].msg.format == "16UC1; compressedDepth png" and bytes(depth[0].msg.data[12:16]) == b"\x89PNG"
    # depth is lossless: every millimetre of the real frame comes back; colour is JPEG, close to the original
    counts, encoding = depth_to_numpy(depth[0].msg)
    assert encoding == "16UC1"
    np.testing.assert_array_equal(counts, frame.depth_mm)
    error = np.abs(B.image_to_rgb(color[0].msg).astype(int) - frame.color_rgb.astype(int))
    assert error.mean() < 4.0
    raw_bytes = frame.color_rgb.nbytes + frame.depth_mm.nbytes
    assert len(color[0].msg.data) + len(depth[0].msg.data) < raw_bytes / 3
    info = load_rollout(tmp_path / "ep").info
    assert info.recording["images"] == "compressed" and info.format == "grounded_planner.rollout/2"


def test_raw_and_quality_are_settings_that_take_effect(frame, tmp_path):
    _record_episode(tmp_path / "raw", frame, 2, RecordingOptions(images="raw"))
    _record_episode(tmp_path / "q40", frame, 2, RecordingOptions(jpeg_quality=40))
    _record_episode(tmp_path / "q90", frame, 2)
    raw = {m.topic: m for m in B.read_bag(tmp_path / "raw")}
    assert raw[TOPICS.color].msgtype == "sensor_msgs/msg/Image" and raw[TOPICS.color].msg.encoding == "rgb8"
    np.testing.assert_array_equal(B.image_to_rgb(raw[TOPICS.color].msg), frame.color_rgb)
    assert raw[TOPICS.depth].msg.encoding == "16UC1"

    def jpeg_bytes(folder):
        return len(next(m for m in B.read_bag(folder) if m.topic == TOPICS.color_compressed).msg.data)

    assert jpeg_bytes(tmp_path / "q40") < 0.7 * jpeg_bytes(tmp_path / "q90")
    with pytest.raises(ValueError, match="jpeg_quality must be an integer 1-100"):
        RecordingOptions(jpeg_quality=0)
    with pytest.raises(ValueError, match="compression must be one of auto, zstd, lz4, none, got 'gzip'"):
        RecordingOptions(compression="gzip")


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_mcap_indexed_reader_sees_summary_counts_chunks_and_seeks_by_time(frame, tmp_path, compression):
    # small chunks so that the episode spans many of them
    _record_episode(tmp_path / "ep", frame, 8, RecordingOptions(compression=compression, chunk_size=200_000))
    path = tmp_path / "ep" / "rollout.mcap"
    summary = _summary(path)
    assert summary is not None and summary.statistics is not None
    counts = _channel_counts(summary)
    assert counts == {
        TOPICS.instruction: 1,
        TOPICS.color_compressed: 8,
        TOPICS.depth_compressed: 8,
        TOPICS.camera_info: 8,
        TOPICS.joint_states: 8,
    }
    assert len(summary.chunk_indexes) >= 4 and {c.compression for c in summary.chunk_indexes} == {compression}
    assert summary.statistics.chunk_count == len(summary.chunk_indexes)
    with open(path, "rb") as f:
        everything = [m.log_time for _, _, m in make_reader(f).iter_messages()]
    assert everything == sorted(everything) and len(everything) == 33
    middle = everything[16]
    with open(path, "rb") as f:
        window = [
            (c.topic, m.log_time)
            for _, c, m in make_reader(f).iter_messages(starting_at=middle, ending_before=middle + 250_000_000)
        ]
    assert [t for _, t in window] == [t for t in everything if middle <= t < middle + 250_000_000]
    # our own reader seeks through the same index
    assert [m.log_time_ns for m in B.read_bag(path, start_ns=middle, end_ns=middle + 250_000_000)] == [
        t for _, t in window
    ]
    info = B.bag_info(path)
    assert info.counts == counts and info.compression == compression


def test_default_compression_stores_jpeg_png_chunks_as_they_are_and_zstd_the_rest(frame, tmp_path):
    """`auto` (the default): a chunk mostly of CompressedImage payloads (JPEG, PNG: zstd cannot shrink them) is
    stored uncompressed, every other chunk zstd; the file reads back whole in the mcap indexed reader and rosbags."""
    assert RecordingOptions().compression == "auto"
    clock = [1_000_000_000]

    def tick() -> int:
        clock[0] += 1_000_000
        return clock[0]

    joints = [f"fr3_joint{j}" for j in range(1, 8)]
    options = RecordingOptions(chunk_size=100_000)  # an image pair fills a chunk; ~600 joint states do
    with RolloutRecorder(
        tmp_path / "ep", instruction="put the cup on the plate", options=options, clock_ns=tick
    ) as rec:
        for i in range(4):  # planning: frames only
            rec.log_frame(frame.color_rgb, frame.depth_mm, stamp_ns=10_000 + i)
        moving_from = clock[0] + 1
        for i in range(3000):  # execution: joint states only
            rec.log_joint_state(joints, [0.001 * i + j for j in range(7)], stamp_ns=20_000 + i)
    path = tmp_path / "ep" / "rollout.mcap"
    summary = _summary(path)
    image_chunks = [c for c in summary.chunk_indexes if c.message_end_time < moving_from]
    joint_chunks = [c for c in summary.chunk_indexes if c.message_start_time >= moving_from]
    assert len(image_chunks) >= 2 and len(joint_chunks) >= 2
    assert len(image_chunks) + len(joint_chunks) == len(summary.chunk_indexes)  # no chunk holds both
    assert {c.compression for c in image_chunks} == {""}
    assert all(c.compressed_size == c.uncompressed_size for c in image_chunks)
    assert {c.compression for c in joint_chunks} == {"zstd"}
    assert all(c.compressed_size < c.uncompressed_size / 2 for c in joint_chunks)  # compressed, really
    counts = _channel_counts(summary)
    frames = {TOPICS.color_compressed: 4, TOPICS.depth_compressed: 4}
    assert counts == {TOPICS.instruction: 1, **frames, TOPICS.joint_states: 3000}
    with open(path, "rb") as f:
        times = [m.log_time for _, _, m in make_reader(f).iter_messages(topics=[TOPICS.joint_states])]
    seek = moving_from + 1500 * 1_000_000
    with open(path, "rb") as f:  # into the zstd part, through the chunk index
        _, _, first = next(make_reader(f).iter_messages(topics=[TOPICS.joint_states], starting_at=seek))
    assert len(times) == 3000 and first.log_time == min(t for t in times if t >= seek)
    with AnyReader([path]) as reader:
        assert reader.message_count == 3009
        conns = [c for c in reader.connections if c.topic == TOPICS.depth_compressed]
        depths = [reader.deserialize(raw, conns[0].msgtype) for _, _, raw in reader.messages(connections=conns)]
        conns = [c for c in reader.connections if c.topic == TOPICS.joint_states]
        last = [reader.deserialize(raw, conns[0].msgtype) for _, _, raw in reader.messages(connections=conns)][-1]
    assert len(depths) == 4
    np.testing.assert_array_equal(depth_to_numpy(depths[-1])[0], frame.depth_mm)
    assert list(last.name) == joints and last.position[0] == pytest.approx(2.999)
    assert B.bag_info(path).compression == "mixed"


def test_rosbags_reads_the_recorders_bag(frame, tmp_path):
    _record_episode(tmp_path / "ep", frame, 3)
    with AnyReader([tmp_path / "ep" / "rollout.mcap"]) as reader:
        assert reader.message_count == 1 + 4 * 3
        conns = [c for c in reader.connections if c.topic == TOPICS.depth_compressed]
        _, _, raw = next(reader.messages(connections=conns))
        msg = reader.deserialize(raw, conns[0].msgtype)
    np.testing.assert_array_equal(depth_to_numpy(msg)[0], frame.depth_mm)


# A writer in a child process: messages every 20 ms; prints the log time of each once write() returned.
KILLED = textwrap.dedent("""
    import sys, time
    from grounded_planner.rollout import bag as B
    w = B.McapBagWriter(sys.argv[1], B.BagOptions(chunk_interval_s=float(sys.argv[2]), fsync_every_s=None))
    i = 0
    while True:
        t = w.write("/chatter", B.string_msg("x" * 2000 + str(i)))
        print(t, flush=True)
        i += 1
        time.sleep(0.02)
""")


def _kill_after(path: Path, interval_s: float, run_s: float) -> tuple[list[int], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(path), str(interval_s)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    written: list[int] = []
    try:
        first = proc.stdout.readline()  # the child is up (imports take a while on a loaded machine)
        assert first, proc.stderr.read()
        written.append(int(first))
        deadline = time.monotonic() + run_s
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            written.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        kill_ns = time.time_ns()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return written, kill_ns


def test_sigkill_loses_at_most_the_open_chunk_and_recover_rebuilds_the_index(tmp_path):
    path = tmp_path / "killed.mcap"
    written, kill_ns = _kill_after(path, 0.5, 2.0)
    assert not B.has_footer(path)
    with open(path, "rb") as f, pytest.raises(Exception):  # noqa: B017 - mcap raises several kinds for a cut file
        make_reader(f).get_summary()  # no footer: the indexed reader cannot open it
    scan = B.recover_mcap(path)
    with open(path, "rb") as f:
        kept = [m.log_time for _, _, m in make_reader(f).iter_messages()]
    old = [t for t in written if t < kill_ns - int(0.6e9)]
    assert old and set(old) <= set(kept)  # everything older than chunk_interval_s + 0.1 s survived
    assert kept == written[: len(kept)]  # a gap-free prefix of what was written
    assert _summary(path).statistics.message_count == len(kept) == scan.message_count
    assert len(_summary(path).chunk_indexes) >= 3


def test_a_long_chunk_interval_is_what_a_kill_loses(tmp_path):
    # the setting off its default: with 30 s chunks nothing of a 1.5 s run was handed to the kernel yet
    path = tmp_path / "slow.mcap"
    written, _ = _kill_after(path, 30.0, 1.5)
    assert len(written) > 20
    assert B.recover_mcap(path).message_count == 0


def test_recover_keeps_every_complete_chunk_wherever_the_file_is_cut(tmp_path):
    path = tmp_path / "full.mcap"
    with B.McapBagWriter(path, B.BagOptions(chunk_interval_s=0, fsync_every_s=None)) as w:  # a chunk per message
        for i in range(6):
            w.write("/chatter", B.string_msg(f"message {i}"), log_time_ns=100 + i)
    full = path.read_bytes()
    chunk_ends = sorted(c.chunk_start_offset + c.chunk_length for c in _summary(path).chunk_indexes)
    for cut in range(8, chunk_ends[-1] + 1, 7):
        path.write_bytes(full[:cut])
        B.recover_mcap(path)
        summary = _summary(path)
        whole = sum(1 for end in chunk_ends if end <= cut)
        assert summary.statistics.message_count == whole, cut
        with open(path, "rb") as f:
            assert [m.data for _, _, m in make_reader(f).iter_messages()] == [
                B.typestore().serialize_cdr(B.string_msg(f"message {i}"), "std_msgs/msg/String").tobytes()
                for i in range(whole)
            ]


def test_cut_short_rollout_recovers_with_the_episode_count(frame, tmp_path):
    episode = tmp_path / "ep"
    child = textwrap.dedent(f"""
        import sys, time, numpy as np
        from grounded_planner.rollout.record import RolloutRecorder
        rec = RolloutRecorder({str(episode)!r}, instruction="x", fsync_every_s=None)
        for i in range(5):
            rec.log_joint_state(["j"], [0.1 * i])
        time.sleep(0.8)  # past chunk_interval_s + 0.1 s: all five are in the file
        print("ready", flush=True)
        sys.stdin.readline()
    """)
    kill_when_ready(child)
    record = recover_rollout(episode)
    assert record.status == "cut_short" and record.info.bag.messages == 6  # instruction + 5 joint states
    assert json.loads((episode / "rollout.json").read_text())["recovery"]["bag_messages"] == 6


def test_every_chunk_crc_is_right_when_zlib_ngs_crc_computes_it(frame, tmp_path):
    """The writer computes each chunk's CRC-32 with zlib-ng (the rollout extra): the mcap library's reader, checking
    every chunk's CRC against its own zlib, finds each one right (a different checksum would fail it)."""
    import zlib

    import mcap.writer
    from mcap.stream_reader import StreamReader
    from mcap.records import Chunk

    with B.McapBagWriter(tmp_path / "crc.mcap", B.BagOptions(compression="none", fsync_every_s=None)) as w:
        for i in range(6):
            w.write(TOPICS.color_compressed, B.compressed_image_msg(frame.color_rgb, i), log_time_ns=1_000 + i)
            w.flush()
    assert mcap.writer.zlib.crc32 is not zlib.crc32, "the writer's CRC is still the stdlib's"
    chunks = [r for r in StreamReader(str(tmp_path / "crc.mcap"), emit_chunks=True, validate_crcs=True).records]
    chunks = [r for r in chunks if isinstance(r, Chunk)]
    assert len(chunks) == 6 and all(c.uncompressed_crc != 0 for c in chunks)
    with open(tmp_path / "crc.mcap", "rb") as f:
        assert len(list(make_reader(f, validate_crcs=True).iter_messages())) == 6


def test_without_zlib_ng_the_writer_keeps_the_libraries_own_crc(monkeypatch):
    import types
    import zlib

    from grounded_planner.rollout.bag_write import fast_crc

    monkeypatch.setitem(sys.modules, "zlib_ng", None)  # not installed: its import raises ImportError
    writer_module = types.SimpleNamespace(zlib=zlib)
    assert fast_crc(writer_module) is False and writer_module.zlib is zlib
