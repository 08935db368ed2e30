"""Rollout logging: write throughput of the crash-safe MCAP writer vs rosbags' own writer, and what SIGKILL leaves.

Run: .venv/bin/python benchmarks/bench_rollout.py [--frames 150]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from grounded_planner.rollout import bag as B

W, H = 640, 480
K = [615.0, 0.0, 320.0, 0.0, 615.0, 240.0, 0.0, 0.0, 1.0]


def _frames(n: int):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    depth = rng.uniform(0.4, 1.2, (H, W)).astype(np.float32)
    for i in range(n):
        yield np.roll(base, i, axis=1), np.roll(depth, i, axis=0)


def _messages(n: int):
    for i, (rgb, depth) in enumerate(_frames(n)):
        t = 1_000_000_000 + i * 33_333_333
        yield "/camera/camera/color/image_raw", B.image_msg(rgb, t), t
        yield "/camera/camera/aligned_depth_to_color/image_raw", B.depth_msg(depth, t), t
        yield "/camera/camera/color/camera_info", B.camera_info_msg(K, W, H, t), t


def bench_ours(path: Path, n: int) -> dict:
    msgs = list(_messages(n))
    latencies = []
    t0 = time.perf_counter()
    with B.McapBagWriter(path, fsync_every_s=None) as writer:
        for topic, msg, t in msgs:
            s = time.perf_counter()
            writer.write(topic, msg, log_time_ns=t)
            latencies.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    return {"s": total, "bytes": path.stat().st_size, "lat": np.array(latencies)}


def bench_rosbags(path: Path, n: int) -> dict:
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = B.typestore()
    msgs = list(_messages(n))
    latencies = []
    t0 = time.perf_counter()
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {}
        for topic, msg, t in msgs:
            s = time.perf_counter()
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=store)
            writer.write(conns[topic], t, store.serialize_cdr(msg, msg.__msgtype__))
            latencies.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in path.iterdir())
    return {"s": total, "bytes": size, "lat": np.array(latencies)}


CHILD = textwrap.dedent("""
    import sys, numpy as np
    from grounded_planner.rollout import bag as B
    which, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rgb = np.zeros((48, 64, 3), np.uint8)
    if which == "ours":
        w = B.McapBagWriter(path, fsync_every_s=None)
        write = lambda i: w.write("/c", B.image_msg(rgb, i), log_time_ns=i)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer
        store = B.typestore()
        w = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP); w.open()
        c = w.add_connection("/c", "sensor_msgs/msg/Image", typestore=store)
        write = lambda i: w.write(c, i, store.serialize_cdr(B.image_msg(rgb, i), "sensor_msgs/msg/Image"))
    for i in range(n):
        write(i + 1)
    print("written", flush=True)
    sys.stdin.readline()
""")


def killed_writer_survivors(which: str, workdir: Path, n: int) -> int:
    path = workdir / f"killed_{which}" if which == "rosbags" else workdir / f"killed_{which}.mcap"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, which, str(path), str(n)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    mcap = path if path.suffix == ".mcap" else next(path.glob("*.mcap"))
    try:
        return len(B.scan_mcap(mcap).messages)
    except B.BagError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=150, help="RGB-D frames (3 messages each) [150 = 5 s at 30 Hz]")
    args = parser.parse_args()
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"workload: {args.frames} frames of {W}x{H} rgb8 + 16UC1 depth + camera_info "
          f"({args.frames * 3} messages, {args.frames / 30:.1f} s of a 30 Hz camera)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        B.typestore()  # build the typestore outside the timings
        ours = bench_ours(tmp / "ours.mcap", args.frames)
        base = bench_rosbags(tmp / "rosbags_bag", args.frames)
        for name, r in (("crash-safe McapBagWriter (flush per message)", ours),
                        ("baseline: rosbags Writer, MCAP, 1 MiB chunks", base)):
            fps = args.frames / r["s"]
            print(f"{name}: {fps:.0f} frames/s ({fps / 30:.1f}x real time at 30 Hz), "
                  f"{r['bytes'] / r['s'] / 1e6:.0f} MB/s, per message p50 {1e3 * np.median(r['lat']):.2f} ms, "
                  f"p99 {1e3 * np.percentile(r['lat'], 99):.2f} ms, file {r['bytes'] / 1e6:.1f} MB")
        t0 = time.perf_counter()
        n_read = sum(1 for _ in B.read_bag(tmp / "ours.mcap"))
        print(f"read back (rosbags AnyReader on our closed file): {n_read} messages in {time.perf_counter() - t0:.2f} s")
        (tmp / "cut.mcap").write_bytes((tmp / "ours.mcap").read_bytes()[: (tmp / "ours.mcap").stat().st_size // 2])
        t0 = time.perf_counter()
        scan = B.scan_mcap(tmp / "cut.mcap")
        print(f"recovery scan of the same file cut in half: {len(scan.messages)} messages in "
              f"{time.perf_counter() - t0:.2f} s ({scan.truncated_bytes} trailing bytes dropped)")
        n = 200
        print(f"SIGKILL after {n} small messages written (process alive, writer not closed): "
              f"ours keeps {killed_writer_survivors('ours', tmp, n)}/{n}, "
              f"rosbags Writer keeps {killed_writer_survivors('rosbags', tmp, n)}/{n}")


if __name__ == "__main__":
    main()
