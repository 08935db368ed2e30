"""Rollout recording at evaluation-campaign scale (issue 28): bytes per episode-minute, write rate, bounded loss under
SIGKILL, seeking in a one-hour session. Every ratio is measured in the same run against its baseline.

Frames are librealsense's own recording (a D400 colour + aligned depth frame of an office corner, 640x480,
test/fixtures/librealsense) scaled to 1280x720 (colour bilinear, depth nearest) with per-frame sensor noise
(colour sigma 2 levels, depth +-1 mm on valid pixels) and a 1-pixel pan per frame, so no two frames are alike.

Run: .venv/bin/python benchmarks/bench_rollout.py [--frames 60] [--kills 20] [--session-hours 1] (0 skips a part)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np

from mcap.reader import make_reader

from grounded_planner.cli.main import main as cli_main
from grounded_planner.rollout import bag as B
from grounded_planner.rollout.record import RecordingOptions, RolloutTopics

REPO = Path(__file__).resolve().parents[1]
W, H, FPS = 1280, 720, 2.0
TOPICS = RolloutTopics()
IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"


def real_frames(n: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``n`` (rgb, depth_mm, K) at 1280x720 from the librealsense recording (see the module docstring)."""
    from PIL import Image

    sys.path.insert(0, str(REPO / "test"))
    from helpers.realdata import real_frame

    frame = real_frame()
    rgb = np.asarray(Image.fromarray(frame.color_rgb).resize((W, H), Image.BILINEAR))
    depth = np.asarray(Image.fromarray(frame.depth_mm).resize((W, H), Image.NEAREST))
    K = frame.K.copy()
    K[0] *= W / 640
    K[1] *= H / 480
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        noisy = np.clip(np.roll(rgb, i, axis=1) + rng.normal(0, 2, rgb.shape), 0, 255).astype(np.uint8)
        d = np.roll(depth, i, axis=1).astype(np.int32)
        d = np.where(d > 0, d + rng.integers(-1, 2, d.shape), 0).astype(np.uint16)
        out.append((noisy, d, K))
    return out


def messages(frames, images: str, jpeg_quality: int = 90, png_level: int = 1) -> list[tuple[str, object, int]]:
    """One episode's messages as the recorder builds them: colour, depth, camera_info per frame at 2 frames/s."""
    out = []
    for i, (rgb, depth, K) in enumerate(frames):
        t = 1_000_000_000 + int(i * 1e9 / FPS)
        if images == "raw":
            out += [(TOPICS.color, B.image_msg(rgb, t), t), (TOPICS.depth, B.depth_msg(depth, t), t)]
        else:
            out += [
                (TOPICS.color_compressed, B.compressed_image_msg(rgb, t, quality=jpeg_quality), t),
                (TOPICS.depth_compressed, B.compressed_depth_msg(depth, t, png_level=png_level), t),
            ]
        out.append((TOPICS.camera_info, B.camera_info_msg(K.ravel(), W, H, t), t))
    return out


def _timed(write) -> tuple[float, float]:
    """(wall s, CPU s of this process) of ``write()``: the wall time is the goal's measure; the CPU time is the
    work done, which a busy moment of this shared machine disturbs less."""
    w0, c0 = time.perf_counter(), time.process_time()
    write()
    return time.perf_counter() - w0, time.process_time() - c0


def write_ours(path: Path, msgs, options: B.BagOptions) -> tuple[float, float]:
    def write():
        with B.McapBagWriter(path, options) as writer:
            for topic, msg, t in msgs:
                writer.write(topic, msg, log_time_ns=t)

    return _timed(write)


def write_rosbag2_mcap_defaults(path: Path, msgs) -> float:
    """What `ros2 bag record -s mcap` writes by default: rosbag2_storage_mcap hands mcap's McapWriterOptions
    defaults on (zstd, 768 KiB chunks, every index); the `mcap` library's Writer with the same settings."""
    from mcap.writer import CompressionType, Writer

    store = B.typestore()
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        writer = Writer(f, chunk_size=768 * 1024, compression=CompressionType.ZSTD)
        writer.start(profile="ros2", library="rosbag2-like")
        schemas: dict[str, int] = {}
        channels: dict[str, int] = {}
        for topic, msg, t in msgs:
            if topic not in channels:
                msgtype = msg.__msgtype__
                if msgtype not in schemas:
                    schemas[msgtype] = writer.register_schema(
                        msgtype, "ros2msg", store.generate_msgdef(msgtype, ros_version=2)[0].encode()
                    )
                channels[topic] = writer.register_channel(topic, "cdr", schemas[msgtype])
            writer.add_message(channels[topic], t, bytes(store.serialize_cdr(msg, msg.__msgtype__)), t)
        writer.finish()
    return time.perf_counter() - t0


ROSBAGS_SETTINGS = (
    "rosbags {version} rosbag2.Writer(path, version=9, storage_plugin=StoragePlugin.MCAP), its defaults: "
    "CompressionMode.NONE, so chunks uncompressed, each closed once past 1 MiB, chunk CRCs 0 (none computed), "
    "message + chunk indexes, statistics, metadata.yaml; no time-based chunk closing, no fsync"
)


def write_rosbags(path: Path, msgs, zstd: bool = False) -> tuple[float, float]:
    """rosbags' own writer with its defaults (ROSBAGS_SETTINGS; read in rosbags/rosbag2/storage_mcap.py), or with
    ``set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)``: every chunk zstd (level 3), as ours."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

    store = B.typestore()

    def write():
        writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
        if zstd:
            writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        with writer:
            conns = {}
            for topic, msg, t in msgs:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=store)
                writer.write(conns[topic], t, store.serialize_cdr(msg, msg.__msgtype__))

    return _timed(write)


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size


def bench_size_and_rate(tmp: Path, n_frames: int) -> None:
    frames = real_frames(n_frames)
    minutes = n_frames / FPS / 60
    t0 = time.perf_counter()
    compressed = messages(frames, "compressed")
    encode_s = (time.perf_counter() - t0) / n_frames
    raw = messages(frames, "raw")
    opts = RecordingOptions()
    print(
        f"episode: {n_frames} frames of {W}x{H} colour + aligned depth + camera_info at {FPS:g} frames/s "
        f"({n_frames / FPS:.0f} s); recorder defaults: JPEG quality {opts.jpeg_quality}, depth PNG level "
        f"{opts.png_level} (lossless), chunk compression {opts.compression}, chunk_interval_s {opts.chunk_interval_s}"
    )
    print(f"  compressing one frame (JPEG + PNG): {1e3 * encode_s:.0f} ms ({1 / encode_s / FPS:.0f}x the 2 frames/s)")
    rows = []
    write_ours(tmp / "raw_none.mcap", raw, B.BagOptions(compression="none", fsync_every_s=None))
    rows.append(("today's raw: rgb8 + 16UC1 Images, no chunk compression", size(tmp / "raw_none.mcap")))
    write_rosbag2_mcap_defaults(tmp / "raw_rosbag2.mcap", raw)
    rows.append(("raw Images, rosbag2's MCAP settings (zstd, 768 KiB chunks)", size(tmp / "raw_rosbag2.mcap")))
    write_rosbag2_mcap_defaults(tmp / "comp_rosbag2.mcap", compressed)
    rows.append(("compressed images, rosbag2's MCAP settings", size(tmp / "comp_rosbag2.mcap")))
    write_ours(tmp / "comp_zstd.mcap", compressed, B.BagOptions(compression="zstd", fsync_every_s=None))
    rows.append(("ours, compression zstd: compressed images, every chunk zstd", size(tmp / "comp_zstd.mcap")))
    write_ours(tmp / "comp_ours.mcap", compressed, B.BagOptions(fsync_every_s=None))
    rows.append(
        (f"ours (default, {opts.compression}): compressed images, 0.5 s / 1 MiB chunks", size(tmp / "comp_ours.mcap"))
    )
    with open(tmp / "comp_ours.mcap", "rb") as f:
        kinds = Counter(c.compression or "none" for c in make_reader(f).get_summary().chunk_indexes)
    baseline = rows[0][1]
    print("  bytes per episode-minute:")
    for name, nbytes in rows:
        print(f"    {name:<66} {nbytes / minutes / 1e6:8.1f} MB/min  ({nbytes / baseline:.3f} of raw)")
    print(f"  (the default's chunks: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    q95 = messages(frames[:4], "compressed", jpeg_quality=95, png_level=9)
    q90 = compressed[:12]
    per95 = sum(len(m.data) for _, m, _ in q95 if hasattr(m, "format")) / 4
    per90 = sum(len(m.data) for _, m, _ in q90 if hasattr(m, "format")) / 4
    print(
        f"  image_transport's own defaults (JPEG 95, PNG level 9): {per95 / 1e3:.0f} kB per frame pair vs ours "
        f"{per90 / 1e3:.0f} kB"
    )

    import importlib.metadata

    print(
        "write rate, same messages, each writer serialising them (CDR) itself, best of 5 runs taken in turn, no "
        "fsync in either; rosbags' writer as "
        + ROSBAGS_SETTINGS.format(version=importlib.metadata.version("rosbags"))
        + "; ours computes a CRC-32 of every chunk (what `rollouts recover` checks a chunk by):"
    )
    writers = {
        "ours auto (default)": lambda p, m: write_ours(p, m, B.BagOptions(fsync_every_s=None)),
        "ours zstd": lambda p, m: write_ours(p, m, B.BagOptions(compression="zstd", fsync_every_s=None)),
        "ours lz4": lambda p, m: write_ours(p, m, B.BagOptions(compression="lz4", fsync_every_s=None)),
        "ours none": lambda p, m: write_ours(p, m, B.BagOptions(compression="none", fsync_every_s=None)),
        "rosbags default (none)": lambda p, m: write_rosbags(p, m),
        "rosbags zstd": lambda p, m: write_rosbags(p, m, zstd=True),
    }
    pairs = (("ours auto (default)", "rosbags default (none)"), ("ours none", "rosbags default (none)"))
    pairs += (("ours zstd", "rosbags zstd"),)
    for label, msgs in (("compressed", compressed), ("raw", raw)):
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        for k in range(5):  # in turn, so that a busy moment of this shared machine hits every writer alike
            for i, (name, write) in enumerate(writers.items()):
                w, c = write(tmp / f"rate_{label}_{i}_{k}", msgs)
                wall.setdefault(name, []).append(w)
                cpu.setdefault(name, []).append(c)
            for path in tmp.glob(f"rate_{label}_*"):  # keep the disk and page cache small
                path.unlink() if path.is_file() else [f.unlink() for f in path.iterdir()]
        print(
            f"  {label} ({len(msgs)} messages, {sum(len(bytes(B.typestore().serialize_cdr(m, m.__msgtype__))) for _, m, _ in msgs) / 1e6:.0f} MB):"
        )
        for name in writers:
            print(
                f"    {name:<24} {len(msgs) / min(wall[name]):6.0f} msg/s wall, "
                f"{len(msgs) / min(cpu[name]):6.0f} msg/s of CPU time"
            )
        for ours, theirs in pairs:
            print(
                f"    {ours} / {theirs}: {min(wall[theirs]) / min(wall[ours]):.2f}x (wall), "
                f"{min(cpu[theirs]) / min(cpu[ours]):.2f}x (CPU)"
            )


KILLED = textwrap.dedent("""
    import sys, time
    import numpy as np
    from grounded_planner.rollout.record import RolloutRecorder
    now = [0]
    rec = RolloutRecorder(sys.argv[1], fsync_every_s=None, clock_ns=lambda: now[0])  # the recorder's defaults
    frame = np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    i = 0
    while True:
        now[0] = time.time_ns()  # this message's log time
        if i % 50 == 0:  # a compressed frame every 0.5 s beside 100 Hz joint states
            rec.log_color(frame, stamp_ns=now[0])
        rec.log_joint_state(["j1", "j2"], [0.001 * i, 0.0], stamp_ns=now[0])
        print(now[0], flush=True)
        i += 1
        time.sleep(0.01)
""")


def bench_kills(tmp: Path, kills: int) -> None:
    rng = random.Random(0)
    budget_s = RecordingOptions().chunk_interval_s + 0.1
    lost_old = unreadable = 0
    kept_total = written_total = 0
    worst_gap_s = 0.0
    for k in range(kills):
        folder = tmp / f"kill{k}"
        path = folder / "rollout.mcap"
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(folder)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        written = [int(proc.stdout.readline())]  # the writer is up
        time.sleep(rng.uniform(0.2, 3.0))  # a random moment (the pipe holds what it reports meanwhile)
        os.kill(proc.pid, signal.SIGKILL)
        kill_ns = time.time_ns()
        proc.wait()
        written += [int(x) for x in proc.stdout.read().split()]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli_main(["rollouts", "recover", str(folder)]) == 0
            with open(path, "rb") as f:
                kept = {m.log_time for _, _, m in make_reader(f).iter_messages(topics=["/joint_states"])}
        except Exception as exc:  # noqa: BLE001 - counted: the benchmark reports unreadable files, whatever the cause
            print(f"  kill {k}: unreadable after recover: {exc}")
            unreadable += 1
            continue
        old = [t for t in written if t < kill_ns - int(budget_s * 1e9)]
        lost_old += sum(1 for t in old if t not in kept)
        missing = [t for t in written if t not in kept]
        if missing:
            worst_gap_s = max(worst_gap_s, (kill_ns - min(missing)) / 1e9)
        kept_total += len(kept)
        written_total += len(written)
    print(
        f"SIGKILL of a RolloutRecorder at {kills} random moments (0.2-3 s into 100 Hz joint states + 2 JPEG "
        f"frames/s), then `grounded-planner rollouts recover`: "
        f"{unreadable} unreadable files; messages older than chunk_interval_s + 0.1 s = {budget_s:.1f} s lost: "
        f"{lost_old}; kept {kept_total}/{written_total} reported; oldest lost message {worst_gap_s:.2f} s before "
        f"the kill"
    )


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def bench_session(tmp: Path, hours: float) -> None:
    """A SessionRecorder over ``hours`` of log time: an episode a minute, 2 frames/s of compressed 1280x720 colour +
    depth and 30 Hz joint states in each (pre-serialised, written as fast as the disk takes them)."""
    from grounded_planner.rollout.record import load_rollout
    from grounded_planner.rollout.session import SessionRecorder

    frames = real_frames(6)
    color = [
        bytes(B.typestore().serialize_cdr(B.compressed_image_msg(f[0], 0), "sensor_msgs/msg/CompressedImage"))
        for f in frames
    ]
    depth = [
        bytes(B.typestore().serialize_cdr(B.compressed_depth_msg(f[1], 0), "sensor_msgs/msg/CompressedImage"))
        for f in frames
    ]
    joint = bytes(B.typestore().serialize_cdr(B.joint_state_msg(["j"], [0.0], 0), "sensor_msgs/msg/JointState"))
    n = int(hours * 3600 * 30)
    start = 1_000_000_000_000
    clock = [start]
    rss: list[float] = []
    t0 = time.perf_counter()
    with SessionRecorder(tmp / "session", RecordingOptions(fsync_every_s=None), clock_ns=lambda: clock[0]) as session:
        w = session.writer
        for topic in (TOPICS.color_compressed, TOPICS.depth_compressed):
            w.add_topic(topic, "sensor_msgs/msg/CompressedImage")
        w.add_topic(TOPICS.joint_states, "sensor_msgs/msg/JointState")
        episode = None
        for i in range(n):  # log times as in the hour
            t = start + i * 33_333_333
            if i % 1800 == 0:  # an episode a minute
                if episode is not None:
                    clock[0] = t - 1  # its end marker before the next episode's first message
                    episode.close()
                clock[0] = t
                episode = session.episode(instruction=f"minute {i // 1800}")
            w.write_raw(TOPICS.joint_states, joint, t)
            if i % 15 == 0:
                w.write_raw(TOPICS.color_compressed, color[i % 6], t)
                w.write_raw(TOPICS.depth_compressed, depth[i % 6], t)
            if i % 15 == 14:
                w.flush()  # a chunk per 0.5 s of log time, as the chunk timer makes them in real time
            if i % (n // 4) == n // 4 - 1:
                rss.append(_rss_mb())
        episode.close()
    write_s = time.perf_counter() - t0
    path = tmp / "session" / "session.mcap"
    middle = start + n * 33_333_333 // 2
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        first = next(reader.iter_messages(topics=[TOPICS.color_compressed], starting_at=middle))
    seek_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    got = next(iter(B.read_bag(path, [TOPICS.color_compressed], start_ns=middle)))
    ours_s = time.perf_counter() - t1
    n_episodes = len(session.episodes)
    t2 = time.perf_counter()
    record = load_rollout(tmp / "session" / session.episodes[n_episodes // 2]["folder"])
    ep_frames = sum(1 for _ in record.messages([TOPICS.color_compressed]))
    episode_s = time.perf_counter() - t2
    print(
        f"one {hours:g}-hour session ({n_episodes} episodes, {n} joint states, {n // 15} colour + depth frames, "
        f"{path.stat().st_size / 1e9:.2f} GB, {len(summary.chunk_indexes)} chunks, written in {write_s:.0f} s; "
        f"process RSS at 1/4, 2/4, 3/4, 4/4 of it: {', '.join(f'{r:.0f}' for r in rss)} MB):"
    )
    print(
        f"  open + seek to the middle + first frame: {seek_s:.3f} s with the mcap indexed reader, {ours_s:.3f} s "
        f"through read_bag (decoded), frame at {(first[2].log_time - start) / 3.6e12:.3f} h / "
        f"{(got.log_time_ns - start) / 3.6e12:.3f} h; the middle episode's {ep_frames} frames, decoded, "
        f"in {episode_s:.2f} s"
    )


def _kept_per_chunk(write_chunk, chunks: int) -> float:
    """Bytes of Python memory kept per chunk over ``chunks`` chunks written by ``write_chunk(i)`` (tracemalloc,
    after gc, after 100 chunks to warm caches and first allocations)."""
    import gc
    import tracemalloc

    for i in range(100):
        write_chunk(i)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(100, 100 + chunks):
        write_chunk(i)
    gc.collect()
    grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    return grown / chunks


def bench_index_memory(tmp: Path, chunks: int = 2000) -> None:
    """What an open writer keeps per closed chunk (tracemalloc, after gc): ours spills the `mcap` Writer's chunk
    indexes (times, offsets, sizes, one message-index offset per channel in the chunk) to an unnamed file beside the
    bag; the baseline, in the same run, is the library's Writer on its own, which keeps them in a list. Chunks as a
    session's: colour, depth and joint states in each."""
    from mcap.writer import CompressionType, Writer

    store = B.typestore()
    joint = bytes(store.serialize_cdr(B.joint_state_msg(["j"], [0.0], 0), "sensor_msgs/msg/JointState"))
    image = bytes(store.serialize_cdr(B.compressed_image_msg(np.zeros((8, 8, 3), np.uint8), 0), IMAGE_TYPE))
    topics = ((TOPICS.color_compressed, image), (TOPICS.depth_compressed, image), (TOPICS.joint_states, joint))
    with B.McapBagWriter(tmp / "index_memory.mcap", B.BagOptions(fsync_every_s=None, chunk_interval_s=0.5)) as w:
        for topic, _ in topics[:2]:
            w.add_topic(topic, IMAGE_TYPE)
        w.add_topic(TOPICS.joint_states, "sensor_msgs/msg/JointState")

        def ours(i: int) -> None:
            t = 1_000_000_000 + i * 500_000_000
            for topic, data in topics:
                w.write_raw(topic, data, t)
            w.flush()

        per_chunk = _kept_per_chunk(ours, chunks)
    with open(tmp / "index_memory.mcap", "rb") as f:
        summary = make_reader(f).get_summary()
    summary_bytes = (tmp / "index_memory.mcap").stat().st_size - summary.chunk_indexes[-1].chunk_start_offset
    with open(tmp / "index_memory_library.mcap", "wb") as f:
        lib = Writer(f, chunk_size=1 << 20, compression=CompressionType.NONE)
        lib.start(profile="ros2", library="baseline")
        ids = []
        for topic, _ in topics:
            schema = lib.register_schema(topic, "ros2msg", b"")
            ids.append(lib.register_channel(topic, "cdr", schema))

        def library(i: int) -> None:
            t = 1_000_000_000 + i * 500_000_000
            for channel, (_, data) in zip(ids, topics):
                lib.add_message(channel, t, data, t)
            lib._Writer__finalize_chunk()  # the chunk closed as ours closes it every chunk_interval_s

        baseline = _kept_per_chunk(library, chunks)
        lib.finish()
    print(
        f"memory an open writer keeps per closed chunk (3 channels in each; tracemalloc over {chunks} chunks): "
        f"ours {per_chunk:.0f} bytes ({per_chunk * 7200 / 1e6:.2f} MB per hour of 0.5 s chunks; "
        f"{len(summary.chunk_indexes)} chunk indexes in its summary), the mcap library's Writer alone "
        f"{baseline:.0f} bytes ({baseline * 7200 / 1e6:.1f} MB per hour); on disk the summary holds "
        f"{summary_bytes / (chunks + 100):.0f} bytes per chunk"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--frames", type=int, default=60, help="frames of the episode (2 frames/s) [60 = 30 s; 0: skip]"
    )
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs at random moments [20; 0: skip]")
    parser.add_argument("--session-hours", type=float, default=1.0, help="session to seek in, hours [1; 0: skip]")
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        B.typestore()  # built outside the timings
        # the session first, so that its process memory is the recorder's: run after the episode benchmarks
        # (277 MB of raw frames, written 30 times) it measured ~680 MB at every quarter of the hour
        if args.session_hours > 0:
            bench_session(tmp, args.session_hours)
        bench_index_memory(tmp)
        if args.frames > 0:
            bench_size_and_rate(tmp, args.frames)
        if args.kills > 0:
            bench_kills(tmp, args.kills)


if __name__ == "__main__":
    main()
