"""The `rollouts` command's flags off their defaults (issue 31.2) that no other test names: `label --relabel` and
`export --only-success --fps` (`summary --by --json --plot`: test_rollout_stats.py). Rollouts recorded by the real
RolloutRecorder, labelled as the stack labels them."""

from __future__ import annotations

import io
import sys

import pytest

pytest.importorskip("rosbags")

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.rollout.record import RolloutRecorder, load_rollout  # noqa: E402


def _record(folder, success):
    with RolloutRecorder(folder, instruction="put the cup on the plate", task="placement", condition="original",
                         scene_id=folder.name) as rec:
        if success is not None:
            rec.set_label(success, None if success else "wrong_object", source="human")


def test_label_relabel_asks_again_for_labelled_rollouts(tmp_path, monkeypatch, capsys):
    _record(tmp_path / "ep0", True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\npremature_release\nlet go early\n"))
    assert main(["rollouts", "label", str(tmp_path), "--relabel"]) == 0
    assert "labelled 1, skipped 0, already labelled 0" in capsys.readouterr().out
    record = load_rollout(tmp_path / "ep0")
    assert (record.success, record.failure_mode) == (False, "premature_release")


def test_export_only_success_and_fps_reach_the_exporter(tmp_path, monkeypatch, capsys):
    for name, success in (("ok0", True), ("bad", False), ("ok1", True), ("unlabelled", None)):
        _record(tmp_path / name, success)
    calls = []

    def export_lerobot(records, repo_id, root, fps):  # the real one needs lerobot: the CLI's call is what is checked
        calls.append((sorted(r.directory.name for r in records), repo_id, root, fps))
        return {"episodes": len(records)}

    monkeypatch.setattr("grounded_planner.cli.rollouts.export_lerobot", export_lerobot)
    assert main(["rollouts", "export", str(tmp_path), "--repo-id", "me/cups", "--root", str(tmp_path / "ds"),
                 "--only-success", "--fps", "7"]) == 0, capsys.readouterr().err
    assert calls == [(["ok0", "ok1"], "me/cups", str(tmp_path / "ds"), 7)]  # the default fps is 15
