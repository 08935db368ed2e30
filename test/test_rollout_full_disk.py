"""A full disk never leaves half a record in a bag (issue 30.2): a write the file system cuts short is truncated away,
the bag stays readable by the `mcap` library and rosbags up to its last complete record, the writer goes on once
there is space again, and `rollouts recover` on a full disk exits 1 (a failure at run time), not 2 (bad input).

The writer is the `mcap` library's (issue 28): its records reach the file a chunk at a time, so these tests use a chunk
per message (``chunk_interval_s=0``) wherever they count messages write by write; a refused chunk is cut away whole.

Two ways to fill a disk: a test double of the file (``FullDiskFile``) that mirrors Linux write(2) on a nearly full
file system (it takes the bytes that still fit and returns that short count; the next call fails with ENOSPC), and
a real 256 KiB tmpfs mounted in a user+mount namespace (``unshare -rm``), skipped with the reason where the machine
does not permit that mount.
"""

from __future__ import annotations

import errno
import os
import textwrap
from pathlib import Path

import pytest
from mcap.reader import make_reader
from rosbags.highlevel import AnyReader

from grounded_planner.rollout import bag as B
from helpers.tmpfs import run_in_namespace

REPO = Path(__file__).resolve().parents[1]


class FullDiskFile:
    """Test double of an unbuffered file (io.FileIO) on a file system with ``free`` bytes left, as Linux write(2)
    behaves there: a write larger than the free space writes what fits and returns that short count; a write with
    no space left raises OSError(ENOSPC). ``truncate`` gives the space back, as on a real file system."""

    def __init__(self, real, free: int):
        self._real, self.free = real, free

    def write(self, data) -> int:
        if self.free <= 0 and len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self._real.write(bytes(data[: self.free]))
        self.free -= n
        return n

    def truncate(self, size=None):
        before = os.fstat(self._real.fileno()).st_size
        result = self._real.truncate(size)
        self.free += before - os.fstat(self._real.fileno()).st_size
        return result

    def __getattr__(self, name):  # tell, seek, fileno, close: the real file's
        return getattr(self._real, name)


def joint(i: int):
    return B.joint_state_msg(["j1", "j2"], [0.01 * i, 0.2], 1_000 + i)


def mcap_positions(path: Path) -> list[float]:
    """First joint position of every /joint_states message, read by the mcap library's default reader."""
    store = B.typestore()
    with open(path, "rb") as f:
        return [
            float(store.deserialize_cdr(m.data, "sensor_msgs/msg/JointState").position[0])
            for _, _, m in make_reader(f).iter_messages(topics=["/joint_states"])
        ]


def test_a_write_cut_short_by_a_full_disk_is_truncated_away_and_writing_goes_on(tmp_path):
    path = tmp_path / "cut.mcap"
    writer = B.McapBagWriter(path, B.BagOptions(chunk_interval_s=0))  # a chunk per message
    for i in range(3):
        writer.write("/joint_states", joint(i), log_time_ns=10 + i)
    size_before = path.stat().st_size
    writer._sink.file = FullDiskFile(writer._sink.file, free=40)  # less than one chunk (~200 bytes): cut part way

    with pytest.raises(B.BagWriteError) as refused:
        writer.write("/joint_states", joint(3), log_time_ns=13)
    assert refused.value.errno == errno.ENOSPC
    assert str(path) in str(refused.value)
    assert path.stat().st_size == size_before  # the 40 bytes that fitted are gone again
    scan = B.scan_mcap(path)
    assert (scan.message_count, scan.truncated_bytes) == (3, 0)
    # a new topic refused on the full disk declares nothing: no channel pointing at a schema not in the file
    with pytest.raises(B.BagWriteError):
        writer.write("/other", B.string_msg("x"), log_time_ns=13)
    assert {m.topic for m in B.scan_mcap(path).messages} == {"/joint_states"} and path.stat().st_size == size_before

    writer._sink.file.free = 10**9  # space again: the next records follow the last complete one
    writer.write("/joint_states", joint(4), log_time_ns=14)
    writer.write("/other", B.string_msg("y"), log_time_ns=15)
    writer.close()
    assert mcap_positions(path) == pytest.approx([0.0, 0.01, 0.02, 0.04])
    with AnyReader([path]) as reader:
        assert reader.message_count == 5
        assert [c.topic for c in reader.connections] == ["/joint_states", "/other"]
    assert B.scan_mcap(path).complete


def test_close_on_a_full_disk_leaves_a_bag_that_recover_finishes_later(tmp_path):
    path = tmp_path / "close.mcap"
    writer = B.McapBagWriter(path, B.BagOptions(chunk_interval_s=0))  # every message already in the file
    for i in range(4):
        writer.write("/joint_states", joint(i), log_time_ns=10 + i)
    writer._sink.file = FullDiskFile(writer._sink.file, free=30)  # DataEnd fits, the summary does not
    with pytest.raises(B.BagWriteError, match="cannot finish bag"):
        writer.close()
    assert writer.closed
    scan = B.scan_mcap(path)
    assert (scan.complete, scan.message_count, scan.truncated_bytes) == (False, 4, 0)
    assert len(list(B.read_bag(path))) == 4  # readable without its summary
    assert B.recover_mcap(path).complete  # once there is space
    assert mcap_positions(path) == pytest.approx([0.0, 0.01, 0.02, 0.03])


# -- a real full tmpfs ---------------------------------------------------------------------------------
# Run inside `unshare -rm` (own user and mount namespace, so no root is needed where user namespaces are allowed):
# mount a 256 KiB tmpfs, put 64 KiB of other data on it, record 20 KB images until the disk is full, delete the
# other data, record more, close; copy the bag
# out before the namespace (and its mount) goes. Then a recorder dies (os._exit) on a disk filled to the last
# byte, and `rollouts recover` runs on it, and again once the filler is deleted: the exit codes are reported.
TMPFS_SCRIPT = textwrap.dedent("""
    import errno, json, os, shutil, subprocess, sys
    import numpy as np
    from grounded_planner.rollout import bag as B
    from grounded_planner.cli.main import main
    out, mnt = sys.argv[1], os.path.join(sys.argv[1], "mnt")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt], check=True)
    report = {}
    with open(os.path.join(mnt, "filler0"), "wb") as f:  # other data on the disk, deleted later to make space
        f.write(b"x" * 65536)
    writer = B.McapBagWriter(os.path.join(mnt, "full.mcap"), B.BagOptions(chunk_interval_s=0))  # a chunk per message
    rng = np.random.default_rng(0)
    written, t = 0, 0
    try:
        while True:
            t += 1
            writer.write("/camera/color", B.image_msg(rng.integers(0, 255, (80, 80, 3), dtype=np.uint8), t),
                         log_time_ns=t)
            written += 1
    except B.BagWriteError as exc:
        report["errno"], report["message"] = exc.errno, str(exc)
    report["written_before_full"] = written
    scan = B.scan_mcap(os.path.join(mnt, "full.mcap"), decode=False)
    report["scan_on_full_disk"] = [scan.message_count, scan.truncated_bytes]
    try:
        # as large as the refused one (a zero image would compress, in its zstd chunk, into the space freed)
        writer.write("/camera/color", B.image_msg(rng.integers(0, 255, (80, 80, 3), dtype=np.uint8), t),
                     log_time_ns=t)
        report["second_refusal"] = None
    except B.BagWriteError as exc:
        report["second_refusal"] = exc.errno
    os.remove(os.path.join(mnt, "filler0"))  # space again
    for k in range(3):
        t += 1
        writer.write("/camera/color", B.image_msg(np.full((80, 80, 3), k, np.uint8), t), log_time_ns=t)
    writer.close()
    shutil.copy(os.path.join(mnt, "full.mcap"), os.path.join(out, "full.mcap"))

    # `rollouts recover` on a full disk (a 64 KiB tmpfs of its own): a recorder that died there, the disk then
    # filled to the last byte
    mnt2 = os.path.join(out, "mnt2")
    os.makedirs(mnt2)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt2], check=True)
    ep = os.path.join(mnt2, "episode")
    subprocess.run([sys.executable, "-c", "import os, sys\\n"
                    "from grounded_planner.rollout.record import RolloutRecorder\\n"
                    "rec = RolloutRecorder(sys.argv[1], fsync_every_s=None)\\n"
                    "[rec.log_joint_state(['j1'], [0.1 * i]) for i in range(5)]\\n"
                    "import time; time.sleep(0.6)\\n"  # past chunk_interval_s + 0.1 s: in the file, as a crash leaves it
                    "os._exit(0)", ep], check=True)
    filler = os.path.join(mnt2, "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
        try:
            while True:
                f.write(b"x")
        except OSError:
            pass
    report["recover_full"] = main(["rollouts", "recover", ep])
    report["status_full"] = json.load(open(os.path.join(ep, "rollout.json")))["status"]
    os.remove(filler)
    report["recover_space"] = main(["rollouts", "recover", ep])
    report["status_space"] = json.load(open(os.path.join(ep, "rollout.json")))["status"]
    shutil.copy(os.path.join(ep, "rollout.mcap"), os.path.join(out, "recovered.mcap"))
    print("REPORT " + json.dumps(report))
""")


def test_a_real_full_tmpfs_cuts_no_record_in_half_and_recover_exits_1(tmp_path):
    report, stderr = run_in_namespace(TMPFS_SCRIPT, tmp_path)
    assert report["errno"] == errno.ENOSPC and "full.mcap" in report["message"]
    assert report["written_before_full"] > 5
    assert report["scan_on_full_disk"] == [report["written_before_full"], 0]  # nothing half-written left
    assert report["second_refusal"] == errno.ENOSPC  # still refused, and still nothing left behind
    # written on after space came back, closed with a summary: both readers read every message
    bag = tmp_path / "full.mcap"
    with open(bag, "rb") as f:
        assert sum(1 for _ in make_reader(f).iter_messages()) == report["written_before_full"] + 3
    with AnyReader([bag]) as reader:
        assert reader.message_count == report["written_before_full"] + 3
    # recover on a full disk: a failure at run time (exit 1, as documented), the folder left for a later try
    assert report["recover_full"] == 1
    assert "No space left on device" in stderr
    assert report["status_full"] == "in_progress"
    assert (report["recover_space"], report["status_space"]) == (0, "cut_short")
    with open(tmp_path / "recovered.mcap", "rb") as f:
        assert sum(1 for _ in make_reader(f).iter_messages()) == 5
