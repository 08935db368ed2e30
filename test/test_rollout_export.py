"""Export to LeRobotDataset: the fixed-rate resampling, and the write and read-back with LeRobot 0.4.4 itself."""

from __future__ import annotations

import json

import sys

import numpy as np
import pytest

pytest.importorskip("rosbags")

from grounded_planner.rollout.export import ExportError, lerobot_features, resample_rollout  # noqa: E402
from grounded_planner.rollout.record import RolloutRecorder, load_rollout  # noqa: E402

MS = 1_000_000


def _image(i: int) -> np.ndarray:
    return np.full((24, 32, 3), 10 * i, dtype=np.uint8)


def _record(directory, with_joints=True):
    """Frames every 100 ms (t = 0..500 ms), joint states every 50 ms + 1 ns; log times from a clock we set."""
    now_ns = [0]
    events = [(i * 100 * MS, "frame", i) for i in range(6)]
    if with_joints:
        events += [(j * 50 * MS + 1, "joints", j) for j in range(11)]
    with RolloutRecorder(directory, instruction="stack the cups", task="stacking", clock_ns=lambda: now_ns[0]) as rec:
        for t, kind, i in sorted(events):
            now_ns[0] = t
            if kind == "frame":
                rec.log_color(_image(i))
            else:
                rec.log_joint_state(["shoulder", "elbow"], [0.1 * i, -0.1 * i])
        rec.set_label(True)
    return load_rollout(directory)


def test_resample_holds_last_frame_and_joint_state(tmp_path):
    record = _record(tmp_path / "ep")
    ep = resample_rollout(record, fps=20)  # every 50 ms over 0..500 ms
    assert len(ep) == 11 and ep.task == "stack the cups"
    # at t = 50 k ms: the frame logged at or before (frame k // 2), joint state logged at 50 k + 1 ms not yet
    for k in range(11):
        assert ep.images[k][0, 0, 0] == 10 * (k // 2)
        assert ep.states[k] == pytest.approx([0.1 * max(k - 1, 0), -0.1 * max(k - 1, 0)])
    assert ep.joint_names == ["shoulder", "elbow"]
    features = lerobot_features(ep)
    assert features["observation.images.color"]["shape"] == (24, 32, 3)
    assert features["observation.state"]["names"] == ["shoulder", "elbow"] and "action" in features


def test_resample_without_joints_and_errors(tmp_path):
    ep = resample_rollout(_record(tmp_path / "ep", with_joints=False), fps=10)
    assert len(ep) == 6 and ep.states is None and "action" not in lerobot_features(ep)
    with RolloutRecorder(tmp_path / "empty", instruction="x"):
        pass
    with pytest.raises(ExportError, match="no color frames"):
        resample_rollout(load_rollout(tmp_path / "empty"), fps=10)
    with pytest.raises(ExportError, match="fps"):
        resample_rollout(load_rollout(tmp_path / "empty"), fps=0)


def _lerobot_dataset():
    try:
        import lerobot.datasets.lerobot_dataset as module
    except Exception:  # ImportError, or torchvision built for another torch raising RuntimeError
        return None
    return module


def test_export_cli_without_lerobot_says_what_is_missing(tmp_path, capsys, monkeypatch):
    # a machine without lerobot: a None entry in sys.modules makes `import lerobot...` raise ImportError, as there
    for name in ("lerobot", "lerobot.datasets", "lerobot.datasets.lerobot_dataset"):
        monkeypatch.setitem(sys.modules, name, None)
    from grounded_planner.cli.main import main

    _record(tmp_path / "rollouts" / "ep")
    code = main(["rollouts", "export", str(tmp_path / "rollouts"), "--repo-id", "me/x", "--root", str(tmp_path / "ds")])
    assert code == 3 and "needs lerobot" in capsys.readouterr().err


def test_export_to_lerobot_dataset_round_trip(tmp_path):
    """Written with LeRobot 0.4.4's own LeRobotDataset.create/add_frame/save_episode (make setup installs it) and
    read back with LeRobotDataset: every frame's image, state, action (the next state) and task."""
    lerobot_dataset = _lerobot_dataset()
    if lerobot_dataset is None:
        pytest.skip("lerobot does not import here (make setup installs lerobot 0.4.4)")
    from grounded_planner.rollout.export import SIDECAR, export_lerobot

    records = [_record(tmp_path / f"ep{i}") for i in range(2)]
    info = export_lerobot(records, "local/grounded_rollouts", tmp_path / "ds", fps=20)
    assert (info["episodes"], info["frames"]) == (2, 22)
    dataset = lerobot_dataset.LeRobotDataset("local/grounded_rollouts", root=tmp_path / "ds")
    assert len(dataset) == 22 and dataset.meta.total_episodes == 2 and dataset.fps == 20
    assert dataset.meta.features["observation.state"]["names"] == ["shoulder", "elbow"]
    for index in range(22):
        item = dataset[index]
        k = index % 11  # frame within its episode
        assert int(item["episode_index"]) == index // 11 and int(item["frame_index"]) == k
        assert item["task"] == "stack the cups"
        state = [0.1 * max(k - 1, 0), -0.1 * max(k - 1, 0)]
        following = [0.1 * max(min(k + 1, 10) - 1, 0), -0.1 * max(min(k + 1, 10) - 1, 0)]
        assert np.asarray(item["observation.state"]) == pytest.approx(state, abs=1e-6)
        assert np.asarray(item["action"]) == pytest.approx(following, abs=1e-6)
        image = np.asarray(item["observation.images.color"])  # (3, H, W) float in [0, 1], LeRobot's convention
        assert image.shape == (3, 24, 32)
        assert image * 255 == pytest.approx(np.full((3, 24, 32), 10 * (k // 2)), abs=1.0)
    lines = [json.loads(x) for x in (tmp_path / "ds" / SIDECAR).read_text().splitlines()]
    assert [x["success"] for x in lines] == [True, True]
