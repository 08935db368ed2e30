"""`rollouts recover` finishes every rollout folder a killed recorder leaves (issue 18.4): killed (real SIGKILL)
before its first complete message, while writing, before rollout.json existed, with an unreadable bag. After
recover: status cut_short with the reason, the message count in rollout.json true, and the bag readable by the
`mcap` library's default reader and by rosbags."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcap.reader import make_reader
from rosbags.highlevel import AnyReader

from grounded_planner.cli.main import main
from grounded_planner.rollout.record import find_unfinished, load_rollout, recover_rollout

REPO = Path(__file__).resolve().parents[1]
# A recorder in a child process: logs `count` joint states (none: killed before any complete message), says
# "ready", then keeps logging while `busy` (so the kill lands mid-record) or waits to be killed.
WRITER = textwrap.dedent("""
    import sys, time
    from grounded_planner.rollout.record import RolloutRecorder
    rec = RolloutRecorder(sys.argv[1], fsync_every_s=None)
    count, busy = int(sys.argv[2]), sys.argv[3] == "busy"
    for i in range(count):
        rec.log_joint_state(["j1", "j2"], [0.01 * i, 0.2])
    if not busy:
        time.sleep(0.6)  # past chunk_interval_s + 0.1 s: what a kill may not lose
        print("ready", flush=True)
        sys.stdin.readline()
    i, ready_at = count, time.monotonic() + 0.7  # busy: ready once there are chunks older than 0.6 s, writing on
    while True:
        rec.log_joint_state(["j1", "j2"] * 200, [0.01 * i, 0.2] * 200)
        i += 1
        if time.monotonic() > ready_at:
            print("ready", flush=True)
            ready_at = float("inf")
""")


def kill_writer(episode: Path, count: int, busy: bool = False) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(episode), str(count), "busy" if busy else "wait"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()


def mcap_messages(bag: Path) -> int:
    """Messages the mcap library's default reader (make_reader) returns."""
    with open(bag, "rb") as f:
        return sum(1 for _ in make_reader(f).iter_messages())


def assert_finished(episode: Path, messages: int | None = None) -> dict:
    data = json.loads((episode / "rollout.json").read_text())
    assert data["status"] == "cut_short"
    assert data["recovery"]["reason"] and data["error"]
    count = mcap_messages(episode / "rollout.mcap")
    assert data["bag"]["messages"] == count
    if messages is not None:
        assert count == messages
    with AnyReader([episode / "rollout.mcap"]) as reader:
        assert reader.message_count == count
    return data


def test_killed_before_its_first_complete_message(tmp_path):
    episode = tmp_path / "ep0"
    kill_writer(episode, 0)
    with open(episode / "rollout.mcap", "rb") as f, pytest.raises(Exception):  # noqa: B017 - mcap raises several kinds for a cut file
        list(make_reader(f).iter_messages())  # the cut file, before recover
    assert find_unfinished([tmp_path]) == [episode]
    recover_rollout(episode)
    data = assert_finished(episode, messages=0)
    assert "before its first complete message" in data["recovery"]["reason"]
    assert find_unfinished([tmp_path]) == []


def test_killed_while_writing_counts_what_survived(tmp_path):
    episode = tmp_path / "busy"
    kill_writer(episode, 3, busy=True)
    stale = json.loads((episode / "rollout.json").read_text())["bag"]["messages"]
    recover_rollout(episode)
    data = assert_finished(episode)
    assert data["bag"]["messages"] >= 3 and stale < data["bag"]["messages"]  # rollout.json's count was stale


@pytest.mark.parametrize("keep_bytes", [0, 5, 8, 20])
def test_killed_during_the_bag_header(tmp_path, keep_bytes):
    # a real kill before any message, then the bag cut back to where a kill during the header write leaves it
    episode = tmp_path / f"cut{keep_bytes}"
    kill_writer(episode, 0)
    with open(episode / "rollout.mcap", "r+b") as f:
        f.truncate(keep_bytes)
    recover_rollout(episode)
    assert_finished(episode, messages=0)


def test_killed_before_rollout_json_was_written(tmp_path):
    episode = tmp_path / "orphan"
    kill_writer(episode, 2)
    (episode / "rollout.json").unlink()  # the recorder writes the bag header first, rollout.json next
    assert find_unfinished([tmp_path]) == [episode]
    recover_rollout(episode)
    data = assert_finished(episode, messages=2)
    assert "never written" in data["recovery"]["reason"]
    assert load_rollout(episode).status == "cut_short"


def test_an_unreadable_bag_is_kept_aside_and_the_folder_finished(tmp_path):
    episode = tmp_path / "garbage"
    kill_writer(episode, 1)
    (episode / "rollout.mcap").write_bytes(b"not a bag at all")
    recover_rollout(episode)
    data = assert_finished(episode, messages=0)
    assert (episode / "rollout.mcap.corrupt").read_bytes() == b"not a bag at all"
    assert "rollout.mcap.corrupt" in data["recovery"]["reason"]


def test_recover_command_finishes_every_folder(tmp_path, capsys):
    for name, count in (("a", 0), ("b", 4)):
        kill_writer(tmp_path / name, count)
    assert main(["rollouts", "recover", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recovered 0 bag messages, status cut_short" in out and "recovered 4 bag messages" in out
    assert_finished(tmp_path / "a", 0)
    assert_finished(tmp_path / "b", 4)
    assert main(["rollouts", "recover", str(tmp_path)]) == 0
    assert "nothing to recover" in capsys.readouterr().out
