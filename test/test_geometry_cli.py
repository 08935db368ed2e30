"""`grounded-planner backproject` end to end on files: 16-bit PNG depth, camera YAML, extrinsics YAML, plan JSON.

The files come from ``python -m grounded_planner.geometry.synthetic`` (a ray-cast scene and its truth.json).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from grounded_planner.cli.main import main
from grounded_planner.geometry import Extrinsics


@pytest.fixture
def scene_files(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "grounded_planner.geometry.synthetic", "--seed", "21", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return tmp_path, json.loads((tmp_path / "truth.json").read_text())


def _gripper_yaw_diff_deg(a: float, b: float) -> float:
    d = math.degrees(a - b) % 180.0
    return min(d, 180.0 - d)


def test_backproject_prints_targets_in_the_base_frame(scene_files):
    folder, truth = scene_files
    exe = Path(sys.executable).with_name("grounded-planner")
    out = subprocess.run(
        [
            str(exe),
            "backproject",
            "--plan",
            str(folder / "plan.json"),
            "--depth",
            str(folder / "depth.png"),
            "--camera-info",
            str(folder / "camera.yaml"),
            "--extrinsics",
            str(folder / "extrinsics.yaml"),
            "--depth-scale",
            "0.001",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["frame"] == truth["frame"] == "panda_link0" and isinstance(data["warnings"], list)
    assert [t["index"] for t in data["targets"]] == [t["index"] for t in truth["targets"]] == list(range(8))
    for got, want in zip(data["targets"], truth["targets"]):
        assert (got["type"], got["object"]) == (want["type"], want["object"])
        err_m = np.linalg.norm(np.array(got["position"]) - np.array(want["position"]))
        if got["type"] == "grasp":
            assert got["method"] == "top_surface" and err_m < 0.01
            assert got["width"] > 0 and 0 < got["confidence"] <= 1
            if want["yaw"] is not None:
                assert _gripper_yaw_diff_deg(got["yaw"], want["yaw"]) < 5
        else:
            assert got["yaw"] is None and got["width"] is None and err_m < 0.005


def test_backproject_without_extrinsics_stays_in_the_optical_frame(scene_files, capsys):
    folder, truth = scene_files
    assert (
        main(
            [
                "backproject",
                "--plan",
                str(folder / "plan.json"),
                "--depth",
                str(folder / "depth.png"),
                "--camera-info",
                str(folder / "camera.yaml"),
                "--compact",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["frame"] == "camera_color_optical_frame"
    cam2base = Extrinsics.load(folder / "extrinsics.yaml")
    top_cam = cam2base.inverse().transform_points(truth["targets"][0]["position"])[0]
    assert np.linalg.norm(np.array(data["targets"][0]["position"]) - top_cam) < 0.01


def test_backproject_reports_bad_inputs_in_one_line(scene_files, capsys):
    folder, _ = scene_files
    base = ["backproject", "--plan", str(folder / "plan.json"), "--camera-info", str(folder / "camera.yaml")]
    Image.fromarray(np.zeros((480, 640, 3), np.uint8)).save(folder / "rgb.png")
    assert main(base + ["--depth", str(folder / "rgb.png")]) == 2
    assert "must be single-channel 16-bit (16UC1), got mode RGB" in capsys.readouterr().err

    (folder / "bad.yaml").write_text(
        "parent_frame: b\nchild_frame: c\ntranslation: [0, 0, 0]\nrotation: [0, 0, 0, 2]\n"
    )
    assert main(base + ["--depth", str(folder / "depth.png"), "--extrinsics", str(folder / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unit quaternion" in err

    Image.fromarray(np.zeros((480, 640), np.uint16)).save(folder / "empty.png")
    assert main(base + ["--depth", str(folder / "empty.png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("grounded-planner backproject: action 0 (grasp): no valid depth in bbox")

    assert main(base + ["--depth", str(folder / "depth.png"), "--depth-scale", "0"]) == 2
    assert "--depth-scale must be > 0" in capsys.readouterr().err
