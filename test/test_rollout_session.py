"""Long sessions (issue 28.3): many episodes in one indexed MCAP file, episode markers, session.json, every
`rollouts` command per episode, and a killed session finished by `rollouts recover`; the typed rollout record
(28.4) read back from old and new files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from helpers.killed import kill_when_ready
from grounded_planner.cli.main import main
from grounded_planner.rollout import bag as B
from grounded_planner.rollout.info import RolloutInfo, read_info
from grounded_planner.rollout.record import RolloutTopics, find_rollouts, load_rollout
from grounded_planner.rollout.session import SessionRecorder

TOPICS = RolloutTopics()


def _session(root: Path, episodes: int = 3) -> Path:
    clock = [5_000_000_000]

    def tick() -> int:
        clock[0] += 50_000_000
        return clock[0]

    rng = np.random.default_rng(0)
    with SessionRecorder(root / "s1", clock_ns=tick) as session:
        for e in range(episodes):
            with session.episode(
                instruction=f"task {e}", task="placement", condition="original", scene_id=f"scene{e}"
            ) as rec:
                for i in range(4 + e):
                    rec.log_frame(
                        rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
                        np.full((48, 64), 0.5 + 0.1 * e, np.float32),
                        stamp_ns=i,
                    )
                    rec.log_joint_state(["fr3_finger_joint1"], [0.04 - 0.01 * i])
                rec.set_label(e != 1, None if e != 1 else "grasp_failure")
    return root / "s1"


def test_one_file_many_episodes_each_read_alone(tmp_path):
    session = _session(tmp_path)
    assert sorted(p.name for p in session.iterdir()) == [
        "episode_0000",
        "episode_0001",
        "episode_0002",
        "session.json",
        "session.mcap",
    ]
    index = json.loads((session / "session.json").read_text())
    assert index["status"] == "complete" and [e["status"] for e in index["episodes"]] == ["complete"] * 3
    records = find_rollouts([session])
    assert [r.episode_id for r in records] == ["episode_0000", "episode_0001", "episode_0002"]
    for e, record in enumerate(records):
        messages = list(record.messages())
        colors = [m for m in messages if m.topic == TOPICS.color_compressed]
        assert len(colors) == 4 + e  # only this episode's frames
        depth = next(m for m in messages if m.topic == TOPICS.depth_compressed)
        assert float(np.median(B.depth_to_m(depth.msg))) == pytest.approx(0.5 + 0.1 * e)
        markers = [json.loads(m.msg.data) for m in messages if m.topic == TOPICS.episodes]
        assert [(m["event"], m["episode_id"]) for m in markers] == [
            ("start", record.episode_id),
            ("end", record.episode_id),
        ]
        assert record.info.bag.messages == len(messages) == index["episodes"][e]["messages"]
        assert record.bag_path.resolve() == (session / "session.mcap").resolve()
    with open(session / "session.mcap", "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary.statistics.message_count == sum(r.info.bag.messages for r in records)


def test_rollouts_commands_work_per_episode_in_a_session(tmp_path, capsys):
    session = _session(tmp_path)
    assert main(["rollouts", "summary", str(session), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert sum(g["n"] for g in groups) == 3
    from grounded_planner.rollout.export import resample_rollout
    from grounded_planner.v2gp.rollouts import RolloutDataset

    frames = resample_rollout(load_rollout(session / "episode_0002"), fps=20)
    assert len(frames.images) >= 6 and frames.joint_names == ["fr3_finger_joint1"]
    dataset = RolloutDataset(session, gripper="fr3_finger_joint1")
    episode = dataset.episode(1)
    assert len(episode.frame_indices) == 5 and episode.instruction == "task 1"
    assert episode.frame(4).shape == (48, 64, 3)
    from grounded_planner.rollout.replay import episodes_for_replay

    replayed = episodes_for_replay([session])  # the session folder stands for its episodes, each its own window
    assert [(e.id, e.instruction) for e in replayed] == [(f"episode_000{e}", f"task {e}") for e in range(3)]
    assert replayed[2].image_rgb.shape == (48, 64, 3)


KILLED_SESSION = textwrap.dedent("""
    import sys, time
    from grounded_planner.rollout.session import SessionRecorder
    s = SessionRecorder(sys.argv[1])
    with s.episode(instruction="first") as rec:
        rec.log_joint_state(["j"], [0.0])
    rec = s.episode(instruction="second")
    for i in range(5):
        rec.log_joint_state(["j"], [0.1 * i])
    time.sleep(0.7)  # past chunk_interval_s + 0.1 s
    print("ready", flush=True)
    sys.stdin.readline()
""")


def test_a_killed_session_is_finished_by_recover(tmp_path, capsys):
    kill_when_ready(KILLED_SESSION, str(tmp_path / "s"))
    assert main(["rollouts", "recover", str(tmp_path)]) == 0
    assert "session recovered, 2 episodes, status cut_short" in capsys.readouterr().out
    first, second = (load_rollout(tmp_path / "s" / f"episode_000{i}") for i in range(2))
    assert first.status == "complete" and second.status == "cut_short"
    assert [json.loads(m.msg.data)["event"] for m in second.messages() if m.topic == TOPICS.episodes] == ["start"]
    assert second.info.bag.messages == 1 + 1 + 5  # start marker, instruction, five joint states
    index = json.loads((tmp_path / "s" / "session.json").read_text())
    assert index["status"] == "cut_short" and index["episodes"][1]["status"] == "cut_short"
    assert index["episodes"][1]["end_ns"] == second.info.bag.end_ns
    assert main(["rollouts", "recover", str(tmp_path)]) == 0
    assert "nothing to recover" in capsys.readouterr().out


def test_one_open_episode_at_a_time(tmp_path):
    with SessionRecorder(tmp_path / "s") as session:
        session.episode()
        with pytest.raises(ValueError, match="episode_0000 of session .* is still open"):
            session.episode()
    assert load_rollout(tmp_path / "s" / "episode_0000").status == "aborted"


def test_typed_record_reads_version_1_files_and_keeps_unknown_keys(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    old = {
        "format": "grounded_planner.rollout/1",
        "episode_id": "old",
        "status": "complete",
        "instruction": "x",
        "task": "t",
        "trial": 2,
        "success": None,
        "failure_mode": None,
        "bag": {"file": "rollout.mcap", "messages": 3},
        "operator_badge": "K-17",
    }
    (folder / "rollout.json").write_text(json.dumps(old))
    record = load_rollout(folder)
    assert isinstance(record.info, RolloutInfo) and record.info.trial == 2 and record.info.bag.messages == 3
    record.save_label(False, "wrong_object")
    again = json.loads((folder / "rollout.json").read_text())
    assert again["format"] == "grounded_planner.rollout/2" and again["operator_badge"] == "K-17"
    assert (again["success"], again["failure_mode"], again["label_source"]) == (False, "wrong_object", "human")
    assert read_info(folder).failure_mode == "wrong_object"
    (folder / "rollout.json").write_text(json.dumps({**old, "trial": "two"}))
    with pytest.raises(ValueError, match="'trial' must be a non-negative integer"):
        load_rollout(folder)


@pytest.mark.parametrize("images", ["raw", "compressed"])
def test_every_reader_takes_raw_and_compressed_frames(tmp_path, images):
    """Replay, LeRobot export's resampling and V2GP's rollout reader on the same episode stored either way."""
    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.rollout.export import resample_rollout
    from grounded_planner.rollout.record import RecordingOptions, RolloutRecorder
    from grounded_planner.rollout.replay import episodes_from_bag
    from grounded_planner.v2gp.rollouts import RolloutDataset

    rng = np.random.default_rng(3)
    frames = [np.repeat(np.repeat(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), 8, 0), 8, 1) for _ in range(4)]
    clock = [10**9]

    def tick() -> int:
        clock[0] += 100_000_000
        return clock[0]

    with RolloutRecorder(
        tmp_path / "ep", instruction="put the cup away", clock_ns=tick, options=RecordingOptions(images=images)
    ) as rec:
        for i, rgb in enumerate(frames):
            rec.log_frame(rgb, np.full((48, 64), 0.8, np.float32), stamp_ns=100 + i)
            rec.log_joint_state(["fr3_finger_joint1"], [0.04 - 0.01 * i])
            if i == 1:
                rec.log_plan(
                    GroundedPlan("put the cup away", (64, 48), [GroundedAction("grasp", "cup", bbox=(1, 1, 9, 9))]),
                    stamp_ns=101,
                )

    def which(image: np.ndarray) -> int:
        """The logged frame an image is (bit for bit when raw; JPEG quality 90 when compressed)."""
        errors = [np.abs(image.astype(int) - f).mean() for f in frames]
        best = int(np.argmin(errors))
        assert errors[best] == 0 if images == "raw" else errors[best] < 15, errors  # others: 70+
        return best

    (replayed,) = episodes_from_bag(tmp_path / "ep")
    assert replayed.frame_stamp_ns == 101 and which(replayed.image_rgb) == 1
    exported = resample_rollout(load_rollout(tmp_path / "ep"), fps=10)
    assert len(exported.images) >= 4 and which(exported.images[-1]) == 3
    episode = RolloutDataset(tmp_path, gripper="fr3_finger_joint1").episode(0)
    assert len(episode.frame_indices) == 4 and which(episode.frame(2)) == 2


def _chunks(path: Path, n: int, before=None) -> float:
    """``n`` chunks of joint states into a new bag at ``path`` (one each, closed at once, as the chunk timer closes
    them in a session); returns the Python memory the open writer kept per chunk after the first 50 (tracemalloc,
    after gc)."""
    import gc
    import tracemalloc

    joint = bytes(B.typestore().serialize_cdr(B.joint_state_msg(["j"], [0.0], 0), "sensor_msgs/msg/JointState"))
    with B.McapBagWriter(path, B.BagOptions(fsync_every_s=None)) as w:
        w.add_topic(TOPICS.joint_states, "sensor_msgs/msg/JointState")
        for i in range(50):
            w.write_raw(TOPICS.joint_states, joint, 1_000_000_000 + i * 500_000_000)
            w.flush()
        gc.collect()
        tracemalloc.start()
        try:
            start = tracemalloc.take_snapshot()
            for i in range(50, n):
                w.write_raw(TOPICS.joint_states, joint, 1_000_000_000 + i * 500_000_000)
                w.flush()
            gc.collect()
            grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(start, "filename"))
        finally:
            tracemalloc.stop()
    return grown / (n - 50)


def test_an_open_writer_keeps_no_memory_per_chunk_and_its_summary_indexes_every_chunk(tmp_path):
    """A session open for hours closes a chunk every 0.5 s: the mcap Writer's chunk indexes (~630 bytes each in
    its list, 4.5 MB an hour) go to a file beside the bag, and still every one reaches the summary."""
    kept = _chunks(tmp_path / "long.mcap", 850)
    assert kept < 64, f"the open writer kept {kept:.0f} bytes per chunk"
    with open(tmp_path / "long.mcap", "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        middle = 1_000_000_000 + 425 * 500_000_000
        first = next(reader.iter_messages(starting_at=middle))
    assert len(summary.chunk_indexes) == 850 and summary.statistics.message_count == 850
    assert [c.message_start_time for c in summary.chunk_indexes] == [
        1_000_000_000 + i * 500_000_000 for i in range(850)
    ]
    assert first[2].log_time == middle
    assert [p.name for p in tmp_path.iterdir()] == ["long.mcap"], "the spill file is left behind"


def test_where_no_spill_file_can_be_made_the_chunk_indexes_stay_in_memory_and_the_bag_is_whole(
    tmp_path, monkeypatch, caplog
):
    import errno
    import tempfile

    def refused(*args, **kwargs):  # a directory that takes the bag but no second file (quota, full disk)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    kept = _chunks(tmp_path / "memory.mcap", 250)
    assert kept > 300, f"{kept:.0f} bytes per chunk: not the library's list"
    assert "chunk indexes stay in memory" in caplog.text and "No space left" in caplog.text
    with open(tmp_path / "memory.mcap", "rb") as f:
        assert len(make_reader(f).get_summary().chunk_indexes) == 250
