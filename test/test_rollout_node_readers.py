"""A rollout as Foxglove reads it (issue 28.5): @mcap/core's indexed reader (summary, per-channel counts, chunk
indexes, seek by time) and @foxglove/rosmsg2-serialization decoding every message, run by Node.js on a bag the
recorder wrote (compressed colour and depth, camera_info, plan, joint states). The npm packages are installed by
scripts/setup.sh into test/node/node_modules (versions pinned in test/node/package-lock.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from grounded_planner.plan import GroundedAction, GroundedPlan
from grounded_planner.rollout.bag import bag_info
from grounded_planner.rollout.record import RecordingOptions, RolloutRecorder, RolloutTopics

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed (scripts/apt-packages.txt lists nodejs and npm)"),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "@mcap" / "core").is_dir(),
        reason="Foxglove's npm packages are not installed (scripts/setup.sh: npm ci in test/node)",
    ),
]
TOPICS = RolloutTopics()


def _read_with_foxglove(path: Path, start_ns: int, end_ns: int) -> dict:
    out = subprocess.run(
        [NODE, str(NODE_DIR / "read_rollout.mjs"), str(path), str(start_ns), str(end_ns)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("compression", ["auto", "zstd", "lz4"])
def test_foxglove_indexed_reader_and_ros2_deserializer_read_a_rollout(tmp_path, compression):
    clock = [2_000_000_000]

    def tick() -> int:
        clock[0] += 100_000_000
        return clock[0]

    rng = np.random.default_rng(1)
    plan = GroundedPlan("put the cup on the plate", (64, 48), [GroundedAction("grasp", "cup", bbox=(1, 2, 10, 12))])
    options = RecordingOptions(compression=compression, chunk_size=20_000)  # many chunks
    with RolloutRecorder(
        tmp_path / "ep", instruction="put the cup on the plate", clock_ns=tick, options=options
    ) as rec:
        rec.log_plan(plan, stamp_ns=7)
        for i in range(6):
            rec.log_frame(
                rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
                np.full((48, 64), 0.75, np.float32),
                stamp_ns=1000 + i,
            )
            rec.log_camera_info([50.0, 0, 32, 0, 50.0, 24, 0, 0, 1], 64, 48, stamp_ns=1000 + i)
            rec.log_joint_state(["j1"], [0.01 * i])
    path = tmp_path / "ep" / "rollout.mcap"
    info = bag_info(path)
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        reader = make_reader(f)
        times = [m.log_time for _, _, m in reader.iter_messages()]
        kinds = {c.compression for c in reader.get_summary().chunk_indexes}
    # auto: these chunks are mostly JPEG bytes, stored as they are ("" = uncompressed; the mix: test_rollout_bag)
    assert kinds == ({""} if compression == "auto" else {compression})
    start, end = times[5], times[12]
    got = _read_with_foxglove(path, start, end)
    assert got["message_count"] == info.message_count == len(times) == 2 + 4 * 6
    assert got["counts"] == info.counts and got["counts"][TOPICS.color_compressed] == 6
    assert got["chunk_count"] == info.chunk_count > 1
    assert got["decoded"] == len(times)  # every message's CDR decoded by rosmsg2-serialization
    color = got["read"][TOPICS.color_compressed]
    assert color["format"] == "rgb8; jpeg compressed bgr8" and color["stamp_ns"] == "1000"
    assert got["read"][TOPICS.depth_compressed]["format"] == "16UC1; compressedDepth png"
    assert got["read"][TOPICS.camera_info]["width"] == 64
    assert got["read"][TOPICS.instruction]["text"] == "put the cup on the plate"
    # seek by time: @mcap/core's endTime is inclusive
    assert [int(t) for t in got["window"]] == [t for t in times if start <= t <= end]
    assert got["library"].startswith("grounded_planner; mcap-python")
