"""Rollout recording: crash safety under SIGKILL, bag round trips, compatibility with other bag readers."""

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

pytest.importorskip("rosbags")

from grounded_planner.msgs.plan import plan_from_msg  # noqa: E402
from grounded_planner.plan import GroundedAction, GroundedPlan, Target, TargetSet  # noqa: E402
from grounded_planner.rollout import bag as B  # noqa: E402
from grounded_planner.rollout.record import (  # noqa: E402
    RecordingOptions,
    RolloutError,
    RolloutRecorder,
    RolloutTopics,
    find_rollouts,
    load_rollout,
    recover_rollout,
)

REPO = Path(__file__).resolve().parents[1]
CHUNK_INTERVAL_S = RecordingOptions().chunk_interval_s
K = [500.0, 0.0, 32.0, 0.0, 500.0, 24.0, 0.0, 0.0, 1.0]


def _frame(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    rgb = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    depth_m = np.round(rng.uniform(0.3, 1.5, (48, 64)), 3).astype(np.float32)
    return rgb, depth_m


def _plan() -> GroundedPlan:
    return GroundedPlan(
        "put the spoon on the plate",
        (64, 48),
        [
            GroundedAction("grasp", "spoon", bbox=(1.5, 2.0, 10.0, 12.25)),
            GroundedAction("place", "spoon", "plate", point=(30.5, 20.0)),
        ],
    )


# The child writes a known sequence and reports each message on stdout; the parent kills it with SIGKILL.
# It draws the same frames as _frame() (same seeds) and logs the same plan as _plan().
CHILD = textwrap.dedent("""
    import sys, numpy as np
    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.rollout.record import RecordingOptions, RolloutRecorder
    # raw images: these tests check every pixel survives the crash (compression has tests of its own)
    rec = RolloutRecorder({episode!r}, instruction="put the spoon on the plate", task="placement",
                          condition="original", scene_id="s1", fsync_every_s=None,
                          options=RecordingOptions(images="raw"))
    rec.log_camera_info({K!r}, 64, 48, stamp_ns=1)
    rec.log_plan(GroundedPlan("put the spoon on the plate", (64, 48), [
        GroundedAction("grasp", "spoon", bbox=(1.5, 2.0, 10.0, 12.25)),
        GroundedAction("place", "spoon", "plate", point=(30.5, 20.0))]), stamp_ns=2)
    print("ready", flush=True)
    i = 0
    while True:
        rng = np.random.default_rng(i)
        rgb = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        depth_m = np.round(rng.uniform(0.3, 1.5, (48, 64)), 3).astype(np.float32)
        rec.log_frame(rgb, depth_m, stamp_ns=1000 + i)
        print(i, flush=True)
        i += 1
        if i == {stop_after}:
            sys.stdin.readline()  # wait here to be killed
""")


def _spawn_writer(episode: Path, stop_after: int) -> subprocess.Popen:
    code = CHILD.format(K=K, episode=str(episode), stop_after=stop_after)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_frames_back(episode: Path) -> list[int]:
    """Indices of the color frames in the bag; asserts each frame and its depth are intact."""
    topics = RolloutTopics()
    msgs = list(B.read_bag(episode))
    colors = [m for m in msgs if m.topic == topics.color]
    depths = [m for m in msgs if m.topic == topics.depth]
    indices = []
    for m in colors:
        i = B.stamp_to_ns(m.msg.header.stamp) - 1000
        rgb, depth_m = _frame(i)
        np.testing.assert_array_equal(B.image_to_rgb(m.msg), rgb)
        indices.append(i)
    for m in depths:
        i = B.stamp_to_ns(m.msg.header.stamp) - 1000
        np.testing.assert_allclose(B.depth_to_m(m.msg), _frame(i)[1], atol=5e-4)
    assert len(depths) in (len(colors), len(colors) - 1)  # the kill may fall between color and depth
    return indices


def test_sigkill_at_known_point_keeps_every_message_and_marks_record_cut_short(tmp_path):
    episode = tmp_path / "ep_kill"
    proc = _spawn_writer(episode, stop_after=7)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(8)]
        assert lines[0] == "ready", proc.stderr.read()
        assert lines[-1] == "6"
        time.sleep(CHUNK_INTERVAL_S + 0.1)  # the bounded loss: a chunk reaches the file at least this often
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    assert _read_frames_back(episode) == list(range(7))
    record = load_rollout(episode)
    assert record.cut_short and record.status == "in_progress"
    assert not record.writer_alive()
    assert record.data["plan"]["actions"][1]["point"] == [30.5, 20.0]  # written before the kill
    plan_msgs = [m for m in B.read_bag(episode) if m.topic == RolloutTopics().plan]
    assert plan_from_msg(plan_msgs[0].msg).to_dict()["actions"] == _plan().to_dict()["actions"]

    # recovery: the bag gets its summary and footer, so rosbags' own reader and the mcap library open it
    recovered = recover_rollout(episode)
    assert recovered.status == "cut_short" and recovered.cut_short
    assert load_rollout(episode).status == "cut_short"
    from rosbags.highlevel import AnyReader

    with AnyReader([episode / "rollout.mcap"]) as reader:
        assert reader.message_count == 3 + 7 * 2  # instruction, camera info, plan, then color + depth per frame
    mcap = pytest.importorskip("mcap.reader")
    with open(episode / "rollout.mcap", "rb") as f:
        assert mcap.make_reader(f).get_summary().statistics.message_count == 17


def test_sigkill_while_writing_loses_at_most_the_open_chunk(tmp_path):
    episode = tmp_path / "ep_busy"
    proc = _spawn_writer(episode, stop_after=10**9)
    reported: list[tuple[int, float]] = []  # (frame index, when the child said it was logged)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        while not reported or reported[-1][0] < 40 or time.monotonic() - reported[0][1] < 1.5:
            reported.append((int(proc.stdout.readline()), time.monotonic()))
        os.kill(proc.pid, signal.SIGKILL)  # the child keeps writing until the signal lands
        killed_at = time.monotonic()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    indices = _read_frames_back(episode)
    assert indices == list(range(len(indices)))  # a gap-free prefix
    old = [i for i, t in reported if t < killed_at - (CHUNK_INTERVAL_S + 0.1)]
    assert old and len(indices) >= old[-1] + 1  # nothing logged more than chunk_interval_s + 0.1 s ago is lost
    assert load_rollout(episode).cut_short


def test_torn_last_chunk_is_dropped_and_file_recovered(tmp_path):
    path = tmp_path / "torn.mcap"
    with B.McapBagWriter(path, B.BagOptions(chunk_interval_s=0)) as writer:  # a chunk per message
        for i in range(5):
            writer.write("/chatter", B.string_msg(f"message {i}"), log_time_ns=100 + i)
    full = path.read_bytes()
    scan_full = B.scan_mcap(path)
    assert scan_full.complete and len(scan_full.messages) == 5
    # cut inside the 5th chunk, as a crash while writing it would
    last = max(B.bag_info(path).chunk_count, 1)
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        fifth = sorted(make_reader(f).get_summary().chunk_indexes, key=lambda c: c.chunk_start_offset)[last - 1]
    cut = fifth.chunk_start_offset + fifth.chunk_length - 7
    path.write_bytes(full[:cut])
    scan = B.scan_mcap(path)
    assert not scan.complete and scan.truncated_bytes > 0
    assert [m.msg.data for m in scan.messages] == [f"message {i}" for i in range(4)]
    assert [m.msg.data for m in B.read_bag(path)] == [f"message {i}" for i in range(4)]
    B.recover_mcap(path)
    from rosbags.rosbag2 import Reader

    with Reader(path) as reader:
        assert reader.message_count == 4


def test_recorder_closes_with_auto_labels_and_rejects_reuse(tmp_path):
    from grounded_planner.rollout.bag import typestore

    episode = tmp_path / "ep1"
    with RolloutRecorder(
        episode, instruction="put the spoon on the plate", task="placement", config={"backend": "openai", "model": "m"}
    ) as rec:
        rgb, depth = _frame(0)
        rec.log_frame(rgb, depth, stamp_ns=5)
        rec.log_plan(_plan(), planning_time_s=1.25)
        rec.log_targets({"frame": "base", "targets": [], "warnings": []})
        rec.log_feedback(0, "moving")
        rec.log_result(
            {
                "success": False,
                "message": "grasp failed",
                "steps": [{"index": 0, "type": "grasp", "outcome": "grasp_failed", "message": "empty"}],
            }
        )
        rec.log_joint_state(["j1", "j2"], [0.1, 0.2])
    data = load_rollout(episode).data
    assert data["status"] == "complete" and data["ended_at"]
    assert (data["success"], data["failure_mode"], data["label_source"]) == (False, "grasp_failure", "auto")
    assert data["timings_s"]["plan"] == 1.25 and len(data["config_hash"]) == 16
    assert data["steps"][0]["outcome"] == "grasp_failed"
    assert data["bag"]["messages"] == 8  # instruction, color, depth, plan, targets, feedback, result, joints
    messages = list(B.read_bag(episode))
    topics = [m.topic for m in messages]
    assert topics.count(RolloutTopics().feedback) == 1 and RolloutTopics().joint_states in topics
    # typed messages a ROS tool can show, no JSON in std_msgs/String
    types = {m.topic: m.msgtype for m in messages}
    assert types[RolloutTopics().targets] == "grounded_planner_interfaces/msg/GroundedPlan"
    assert types[RolloutTopics().feedback] == "grounded_planner_interfaces/msg/ExecutionEvent"
    assert types[RolloutTopics().result] == "grounded_planner_interfaces/msg/ExecutionResult"
    result = next(m.msg for m in messages if m.topic == RolloutTopics().result)
    assert not result.success and [s.outcome for s in result.steps] == ["grasp_failed"]
    assert typestore() is typestore()

    with pytest.raises(RolloutError, match="already holds a rollout"):
        RolloutRecorder(episode)
    with pytest.raises(RolloutError, match="closed"):
        rec.log_instruction("again")


def test_closed_loop_attempts_and_the_result_share_the_step_outcome_message(tmp_path):
    from grounded_planner.execution.closed_loop import Attempt

    tries = [
        Attempt(
            step=0,
            attempt=1,
            plan_index=0,
            type="grasp",
            object="spoon",
            outcome="grasp_failed",
            check="grasp_failure",
            message="empty",
            duration_s=1.5,
            recovery="reground",
        ),
        Attempt(
            step=0,
            attempt=2,
            plan_index=0,
            type="grasp",
            object="spoon",
            outcome="ok",
            check="ok",
            message="",
            duration_s=1.25,
        ),
    ]
    with RolloutRecorder(tmp_path / "ep", instruction="put the spoon on the plate", condition="closed_loop") as rec:
        rec.log_attempt(tries[0])
        rec.log_attempt(tries[1].to_dict())  # the dict a recorder in another process gets
        rec.log_result(
            {
                "success": True,
                "message": "done",
                "steps": [{"index": 0, "type": "grasp", "outcome": "ok", "message": "", "attempts": 2, "check": "ok"}],
            }
        )
    data = load_rollout(tmp_path / "ep").data
    assert [(a["step"], a["attempt"], a["check"], a["recovery"]) for a in data["attempts"]] == [
        (0, 1, "grasp_failure", "reground"),
        (0, 2, "ok", ""),
    ]  # rollout.json keeps the Attempt's own keys
    messages = list(B.read_bag(tmp_path / "ep"))
    attempts = [m for m in messages if m.topic == RolloutTopics().attempts]
    assert {m.msgtype for m in attempts} == {"grounded_planner_interfaces/msg/StepOutcome"}
    assert [(a.msg.index, a.msg.attempts, a.msg.type, a.msg.outcome, a.msg.check, a.msg.message) for a in attempts] == [
        (0, 1, "grasp", "grasp_failed", "grasp_failure", "empty"),
        (0, 2, "grasp", "ok", "ok", ""),
    ]
    assert [round(a.msg.duration_s, 3) for a in attempts] == [1.5, 1.25]
    result = next(m.msg for m in messages if m.topic == RolloutTopics().result)
    assert [(s.index, s.attempts, s.outcome, s.check) for s in result.steps] == [(0, 2, "ok", "ok")]


def test_a_result_whose_steps_are_not_all_steps_still_closes_the_record_and_says_so(tmp_path):
    # an executor in another process may send anything; the record must still close on disk, labelled from the
    # steps it can read, and say which entries it could not
    with RolloutRecorder(tmp_path / "ep", instruction="put the spoon on the plate") as rec:
        rec.log_result(
            {
                "success": False,
                "message": "grasp failed",
                "steps": ["step 1 went wrong", {"index": 0, "type": "grasp", "outcome": "grasp_failed"}, None],
            }
        )
    data = json.loads((tmp_path / "ep" / "rollout.json").read_text())
    assert data["status"] == "complete" and data["ended_at"]
    assert (data["success"], data["failure_mode"], data["label_source"]) == (False, "grasp_failure", "auto")
    assert data["execution"]["steps"][0] == "step 1 went wrong"  # kept as it came, in the result
    assert data["steps"] == [{"index": 0, "type": "grasp", "outcome": "grasp_failed"}]  # what readers take as steps
    assert any("2 of its 3 steps are not steps" in w and "step 1 went wrong" in w for w in data["warnings"])
    result = next(m.msg for m in B.read_bag(tmp_path / "ep") if m.topic == RolloutTopics().result)
    assert [s.outcome for s in result.steps] == ["grasp_failed"]
    # `rollouts label` shows the episode (it died on the string with AttributeError); "s" skips it
    import io

    from grounded_planner.rollout.label import label_rollouts

    shown = io.StringIO()
    assert label_rollouts([load_rollout(tmp_path / "ep")], io.StringIO("s\n"), shown, relabel=True).skipped == 1
    assert "  step 0: grasp -> grasp_failed" in shown.getvalue()


def test_exception_in_episode_closes_record_as_aborted(tmp_path):
    with pytest.raises(RuntimeError):
        with RolloutRecorder(tmp_path / "ep", instruction="x") as rec:
            rec.log_color(_frame(0)[0])
            raise RuntimeError("camera unplugged")
    data = json.loads((tmp_path / "ep" / "rollout.json").read_text())
    assert data["status"] == "aborted" and "camera unplugged" in data["error"]
    assert len(list(B.read_bag(tmp_path / "ep"))) == 2  # instruction + frame, bag closed properly
    assert [r.episode_id for r in find_rollouts([tmp_path])] == ["ep"]


def test_empty_plan_in_no_action_trial_is_auto_success(tmp_path):
    empty = GroundedPlan("put the third cup away", (64, 48), [], reason="there is no third cup")
    with RolloutRecorder(tmp_path / "a", expects_action=False) as rec:
        rec.log_plan(empty)
    with RolloutRecorder(tmp_path / "b", expects_action=True) as rec:
        rec.log_plan(empty)
    assert load_rollout(tmp_path / "a").success is True
    assert (load_rollout(tmp_path / "b").success, load_rollout(tmp_path / "b").failure_mode) == (False, "no_action")


def test_bad_inputs_get_named_errors(tmp_path):
    with RolloutRecorder(tmp_path / "ep") as rec:
        with pytest.raises(B.BagError, match=r"\(H, W, 3\) uint8"):
            rec.log_color(np.zeros((4, 4), np.uint8))
        with pytest.raises(B.BagError, match="does not fit 16UC1"):
            rec.log_depth(np.full((4, 4), 100.0))
        with pytest.raises(ValueError, match="unknown failure mode"):
            rec.set_label(False, "dropped_it")
    writer = B.McapBagWriter(tmp_path / "order.mcap")  # indexed: log times may come out of order
    writer.write("/a", B.string_msg("x"), log_time_ns=10)
    writer.write("/a", B.string_msg("y"), log_time_ns=5)
    with pytest.raises(B.BagError, match="already has type std_msgs/msg/String"):
        writer.add_topic("/a", "sensor_msgs/msg/Image")
    writer.close()
    assert [m.msg.data for m in B.read_bag(tmp_path / "order.mcap")] == ["y", "x"]
    with pytest.raises(B.BagError, match="exists already"):
        B.McapBagWriter(tmp_path / "order.mcap")
    with pytest.raises(B.BagError, match="not an MCAP file"):
        (tmp_path / "junk.mcap").write_bytes(b"hello")
        list(B.read_bag(tmp_path / "junk.mcap"))


def test_bag_messages_deserialize_with_rclpy(tmp_path):
    """Our CDR is rclpy's: the real rclpy deserializer reads the image and plan back."""
    serialization = pytest.importorskip("rclpy.serialization")
    msgs_mod = pytest.importorskip("grounded_planner_interfaces.msg")
    from sensor_msgs.msg import Image

    mcap = pytest.importorskip("mcap.reader")
    path = tmp_path / "x.mcap"
    rgb, _ = _frame(3)
    with B.McapBagWriter(path) as writer:
        writer.write("/c", B.image_msg(rgb, 7))
        located = _plan().with_targets(
            TargetSet(
                "base",
                [
                    Target(0, "grasp", "spoon", (0.1, 0.2, 0.3), yaw=0.0, width=0.02),
                    Target(1, "place", "spoon", (0.4, 0.0, 0.0)),
                ],
            )
        )
        writer.write("/p", B.plan_msg(located, 7))
        writer.write("/j", B.joint_state_msg(["fr3_joint1", "fr3_finger_joint1"], [0.5, 0.04], 7, [0.1, 0.0]))
    with open(path, "rb") as f:
        raw = [m.data for _, _, m in mcap.make_reader(f).iter_messages()]
    from sensor_msgs.msg import JointState

    joints = serialization.deserialize_message(raw[2], JointState)
    assert list(joints.name) == ["fr3_joint1", "fr3_finger_joint1"] and list(joints.position) == [0.5, 0.04]
    assert list(joints.velocity) == [0.1, 0.0] and joints.header.stamp.nanosec == 7
    image = serialization.deserialize_message(raw[0], Image)
    assert (image.width, image.height, image.encoding) == (64, 48, "rgb8")
    np.testing.assert_array_equal(np.asarray(image.data, dtype=np.uint8).reshape(48, 64, 3), rgb)
    plan = serialization.deserialize_message(raw[1], msgs_mod.GroundedPlan)
    assert plan.instruction == "put the spoon on the plate"
    assert plan.actions[0].pose.header.frame_id == "base" and plan.actions[0].pose.pose.position.z == pytest.approx(0.3)
    assert plan.actions[0].width == pytest.approx(0.02) and plan.actions[1].pose.header.frame_id == "base"


def test_recover_cli_refuses_live_recording_and_finalises_dead_one(tmp_path, capsys):
    from grounded_planner.cli.main import main
    from grounded_planner.rollout.record import write_json_atomic

    rec = RolloutRecorder(tmp_path / "live", instruction="x")
    rec.log_color(_frame(0)[0])
    time.sleep(CHUNK_INTERVAL_S + 0.1)  # the chunk timer has put both messages in the file
    assert main(["rollouts", "recover", str(tmp_path)]) == 1
    assert "still being recorded" in capsys.readouterr().err
    # the same record as if its writer had died: a pid that no longer runs
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    data = load_rollout(tmp_path / "live").data
    data["writer"]["pid"] = int(dead.stdout)
    write_json_atomic(tmp_path / "live" / "rollout.json", data)
    assert main(["rollouts", "recover", str(tmp_path)]) == 0
    assert "recovered 2 bag messages" in capsys.readouterr().out
    assert load_rollout(tmp_path / "live").status == "cut_short"
    assert B.scan_mcap(tmp_path / "live" / "rollout.mcap").complete


def test_reads_sqlite3_rosbag2_written_by_rosbags(tmp_path):
    """Bags from other recorders (ros2 bag's default sqlite3 storage) are read through rosbags."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = B.typestore()
    rgb, _ = _frame(5)
    with Writer(tmp_path / "db_bag", version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        conn = writer.add_connection("/camera/camera/color/image_raw", "sensor_msgs/msg/Image", typestore=store)
        writer.write(conn, 42, store.serialize_cdr(B.image_msg(rgb, 42), "sensor_msgs/msg/Image"))
    (msg,) = list(B.read_bag(tmp_path / "db_bag"))
    assert msg.log_time_ns == 42
    np.testing.assert_array_equal(B.image_to_rgb(msg.msg), rgb)


def test_footerless_chunked_zstd_bag_from_rosbags_writer_is_read_up_to_last_chunk(tmp_path):
    """rosbags' own writer, never closed (as when killed): its complete zstd chunks are still read."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

    store = B.typestore()
    writer = Writer(tmp_path / "theirs", version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    writer.open()
    conn = writer.add_connection("/camera/camera/color/image_raw", "sensor_msgs/msg/Image", typestore=store)
    for i in range(300):
        writer.write(
            conn, 100 + i, store.serialize_cdr(B.image_msg(_frame(i % 7)[0], 100 + i), "sensor_msgs/msg/Image")
        )
    writer.storage.bio.flush()  # what the kernel would hold after SIGKILL (rosbags has no per-message flush)
    msgs = list(B.read_bag(tmp_path / "theirs"))
    assert 100 <= len(msgs) < 300  # whole 1 MiB chunks only: the open chunk is lost
    assert [m.log_time_ns for m in msgs] == list(range(100, 100 + len(msgs)))
    np.testing.assert_array_equal(B.image_to_rgb(msgs[-1].msg), _frame((len(msgs) - 1) % 7)[0])
    writer.storage.bio.close()
