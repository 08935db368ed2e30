"""Command flags off their defaults (issue 31.2) that no other test names: `rollouts label --relabel`,
`rollouts export --only-success --fps` (`summary --by --json --plot`: test_rollout_stats.py), the `console` flags,
`sim run|eval --executor-config`, `sim so101-bus --calibration-dir`, `calibrate --method --board`, `replay
--color-topic --plan-topic --instruction-topic` and `spabench session --plan-timeout --execute-timeout`. Each reaches
what the command hands on, so that a flag the command drops fails here. Rollouts recorded by the real
RolloutRecorder, labelled as the stack labels them."""

from __future__ import annotations

import io
import sys

import pytest

pytest.importorskip("rosbags")

from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.rollout.record import RolloutRecorder, load_rollout  # noqa: E402
from helpers.calls import record_calls  # noqa: E402


def _record(folder, success):
    with RolloutRecorder(
        folder, instruction="put the cup on the plate", task="placement", condition="original", scene_id=folder.name
    ) as rec:
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
    assert (
        main(
            [
                "rollouts",
                "export",
                str(tmp_path),
                "--repo-id",
                "me/cups",
                "--root",
                str(tmp_path / "ds"),
                "--only-success",
                "--fps",
                "7",
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert calls == [(["ok0", "ok1"], "me/cups", str(tmp_path / "ds"), 7)]  # the default fps is 15


def test_console_flags_reach_the_console_node(tmp_path, monkeypatch, capsys):
    """`grounded-planner console`'s flags become console_node's parameters (what each does:
    test_ros_params_off_default.py, test_console_browser.py)."""
    pytest.importorskip("rclpy")
    calls = []
    monkeypatch.setattr("grounded_planner.ros.console_node.run_console", calls.append)
    (tmp_path / "executor.yaml").write_text("safety:\n  workspace_max_m: [0.4, 0.45, 0.6]\n")
    assert (
        main(
            [
                "console",
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--token",
                "sixteen-chars-tok",
                "--rollouts-dir",
                str(tmp_path / "r"),
                "--session",
                str(tmp_path / "cards"),
                "--executor-config",
                str(tmp_path / "executor.yaml"),
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert calls == [
        {
            "host": "0.0.0.0",
            "port": 0,
            "token": "sixteen-chars-tok",
            "rollouts_dir": str(tmp_path / "r"),
            "session_dir": str(tmp_path / "cards"),
            "executor_config_file": str(tmp_path / "executor.yaml"),
        }
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["sim", "run", "config/scenarios/box_in_bowl.yaml", "--targets", "gt"],
        [
            "sim",
            "eval",
            "config/scenarios/box_in_bowl.yaml",
            "--seeds",
            "1",
            "--conditions",
            "open_loop",
            "--planner",
            "gt",
            "--out",
            "{tmp}/eval",
        ],
    ],
    ids=["run", "eval"],
)
def test_sim_executor_config_reaches_the_scenario_run(tmp_path, monkeypatch, capsys, command):
    from grounded_planner.execution.config import ExecutorConfig
    from grounded_planner.sim.workcell import SimError

    calls = record_calls(monkeypatch, "grounded_planner.cli.sim.run_scenario", error=SimError("stopped by the test"))
    (tmp_path / "executor.yaml").write_text("executor:\n  approach_height_m: 0.0625\n")
    main([arg.format(tmp=tmp_path) for arg in command] + ["--executor-config", str(tmp_path / "executor.yaml")])
    assert "stopped by the test" in capsys.readouterr().err
    ((_, kwargs),) = calls
    assert kwargs["executor_config"].approach_height_m == 0.0625 != ExecutorConfig().approach_height_m


def test_calibrate_method_reaches_the_hand_eye_solver(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    import numpy as np

    from grounded_planner.geometry import GeometryError

    samples = SimpleNamespace(
        effector2base=[np.eye(4)] * 3,
        target2cam=[np.eye(4)] * 3,
        setup="eye_to_hand",
        base_frame="fr3_link0",
        effector_frame="fr3_hand",
        camera_frame="camera_color_optical_frame",
    )
    record_calls(monkeypatch, "grounded_planner.cli.geometry.load_pose_samples", samples)
    calls = record_calls(
        monkeypatch, "grounded_planner.cli.geometry.calibrate_hand_eye", error=GeometryError("stopped by the test")
    )
    main(
        [
            "calibrate",
            "--from-samples",
            str(tmp_path / "s.yaml"),
            "--out",
            str(tmp_path / "ext.yaml"),
            "--method",
            "park",
        ]
    )
    assert "stopped by the test" in capsys.readouterr().err
    ((_, kwargs),) = calls
    assert kwargs["method"] == "park"  # the default, auto, tries every solver and keeps the best


def test_calibrate_method_on_charuco_samples_chooses_the_solver(tmp_path, capsys):
    """`calibrate --samples DIR --method NAME`: on ChArUco images (rendered by OpenCV into a camera at known poses)
    the extrinsics are solved by NAME, then refined; the default, auto, keeps the best of every solver, so NAME is
    one that auto did not keep on the same images."""
    import math

    import numpy as np
    import yaml

    cv2 = pytest.importorskip("cv2")
    from grounded_planner.geometry import Extrinsics
    from grounded_planner.geometry.handeye import METHODS, CharucoBoardSpec
    from grounded_planner.geometry.synthetic import look_at, realsense_camera, render_board_view
    from grounded_planner.geometry.transforms import invert_transform, make_transform, rotation_about_axis

    spec = CharucoBoardSpec(squares_x=7, squares_y=5, square_length_m=0.04, marker_length_m=0.03)
    camera = realsense_camera(1280, 720)
    shots = tmp_path / "shots"
    shots.mkdir()
    camera.save_yaml(shots / "camera.yaml")
    (shots / "board.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    cam2base = look_at([0.9, 0.3, 0.6], [0.3, 0.0, 0.1], parent_frame="panda_link0").matrix
    board2flange = make_transform(rotation_about_axis([1, 0, 0], 0.3), [0.02, -0.01, 0.08])
    board_img = spec.render(120)
    rng = np.random.default_rng(5)
    half = np.array([7 * 0.04 / 2, 5 * 0.04 / 2, 0.0])
    for i in range(5):  # eye_to_hand: the board on the flange, seen 0.5-0.75 m away, tilted up to 30 deg
        R = rotation_about_axis(rng.normal(size=3), math.radians(rng.uniform(-30, 30)))
        board2cam = make_transform(
            R, np.array([rng.uniform(-0.1, 0.1), rng.uniform(-0.06, 0.06), rng.uniform(0.5, 0.75)]) - R @ half
        )
        cv2.imwrite(str(shots / f"{i:03d}.png"), render_board_view(board_img, 0.04, 120, camera, board2cam))
        flange2base = cam2base @ board2cam @ invert_transform(board2flange)
        flange2base[:3, 3] += rng.normal(scale=0.002, size=3)  # robot poses as a real arm reports them
        Extrinsics.from_matrix(flange2base, "panda_link0", "panda_hand").save(shots / f"{i:03d}.yaml")

    def solved_by(*flags):
        out = tmp_path / f"ext{len(flags)}.yaml"
        assert main(["calibrate", "--samples", str(shots), "--out", str(out), *flags]) == 0, capsys.readouterr().err
        return Extrinsics.load(out).metadata["calibration"]["method"]

    kept = solved_by()  # auto
    other = next(name for name in METHODS if f"{name}+refined" != kept)
    assert solved_by("--method", other) == f"{other}+refined" != kept
    assert f"method {other}+refined" in capsys.readouterr().out


def test_calibrate_board_names_the_board_spec_read(tmp_path, monkeypatch, capsys):
    pytest.importorskip("cv2")
    from grounded_planner.geometry import GeometryError

    record_calls(monkeypatch, "grounded_planner.cli.geometry.CameraModel.from_camera_info_yaml")
    calls = record_calls(
        monkeypatch, "grounded_planner.cli.geometry.CharucoBoardSpec.load", error=GeometryError("stopped by the test")
    )
    main(
        [
            "calibrate",
            "--samples",
            str(tmp_path / "shots"),
            "--out",
            str(tmp_path / "ext.yaml"),
            "--board",
            str(tmp_path / "a3_board.yaml"),
        ]
    )
    assert "stopped by the test" in capsys.readouterr().err
    assert [str(args[0]) for args, _ in calls] == [str(tmp_path / "a3_board.yaml")]  # default: DIR/board.yaml


def test_replay_topic_flags_choose_the_topics_read_from_the_bags(tmp_path, monkeypatch, capsys):
    from grounded_planner.rollout.bag import BagError

    calls = record_calls(
        monkeypatch, "grounded_planner.cli.replay.episodes_for_replay", error=BagError("stopped by the test")
    )
    main(
        [
            "replay",
            str(tmp_path / "bag"),
            "--out",
            str(tmp_path / "p.jsonl"),
            "--color-topic",
            "/cam/rgb",
            "--plan-topic",
            "/other/plan",
            "--instruction-topic",
            "/other/instruction",
        ]
    )
    assert "stopped by the test" in capsys.readouterr().err
    (((_, _, topics, _), _),) = calls
    assert (topics.color, topics.plan, topics.instruction) == ("/cam/rgb", "/other/plan", "/other/instruction")


def test_spabench_session_timeouts_reach_the_live_stack(tmp_path, monkeypatch, capsys):
    pytest.importorskip("rclpy")
    from grounded_planner.spabench.errors import SpaBenchError
    from helpers.spabench_cards import make_cards

    make_cards(tmp_path / "cards", [("relational_placement", "id", 0)])
    calls = record_calls(
        monkeypatch, "grounded_planner.ros.spabench_stack.live_stack", error=SpaBenchError("stopped by the test")
    )
    main(["spabench", "session", str(tmp_path / "cards"), "--plan-timeout", "7.5", "--execute-timeout", "42"])
    capsys.readouterr()
    assert calls == [((), {"plan_timeout_s": 7.5, "execute_timeout_s": 42.0})]  # defaults 120 and 600


def test_so101_bus_writes_its_calibration_into_calibration_dir(tmp_path):
    """`sim so101-bus --calibration-dir DIR` (a child process, as LeRobot's tests would start it): the calibration
    file LeRobot is pointed at lies in DIR (default: a temporary folder) and is there while the bus runs."""
    import json
    import os
    import signal
    import subprocess

    pytest.importorskip("mujoco")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grounded_planner.cli.main",
            "sim",
            "so101-bus",
            "--calibration-dir",
            str(tmp_path / "cal"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=30)[1]
        calibration = json.loads(line)["calibration"]
        assert os.path.dirname(calibration) == str(tmp_path / "cal") and os.path.isfile(calibration)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
