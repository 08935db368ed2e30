"""`grounded-planner backproject` end to end on files: 16-bit PNG depth, camera YAML, extrinsics YAML, plan JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.geometry_scenes import BASE, tabletop
from PIL import Image

from grounded_planner.cli.main import main
from grounded_planner.plan import GroundedAction, GroundedPlan, save_plan

PLACE_WORLD = np.array([0.0, 0.02, 0.0])


@pytest.fixture
def scene_files(tmp_path):
    rendered = tabletop(21)
    Image.fromarray(rendered.depth_units.astype(np.uint16)).save(tmp_path / "depth.png")
    rendered.camera.save_yaml(tmp_path / "camera.yaml")
    rendered.cam2base.save(tmp_path / "cam2base.yaml")
    actions = []
    for k, obj in enumerate(rendered.scene.objects):
        actions.append(GroundedAction("grasp", obj.name, bbox=rendered.scene.bbox_of(k, rendered.labels)))
        actions.append(GroundedAction("place", obj.name, point=rendered.scene.pixel_of(PLACE_WORLD)))
    save_plan(GroundedPlan("tidy up", (640, 480), actions).validate(), tmp_path / "plan.json")
    return tmp_path, rendered


def test_backproject_prints_targets_in_the_base_frame(scene_files):
    folder, rendered = scene_files
    exe = Path(sys.executable).with_name("grounded-planner")
    out = subprocess.run([str(exe), "backproject", "--plan", str(folder / "plan.json"), "--depth", str(folder / "depth.png"),
                          "--camera-info", str(folder / "camera.yaml"), "--extrinsics", str(folder / "cam2base.yaml"),
                          "--depth-scale", "0.001"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["frame"] == BASE and isinstance(data["warnings"], list)
    assert [t["index"] for t in data["targets"]] == list(range(8))
    for k, obj in enumerate(rendered.scene.objects):
        grasp, place = data["targets"][2 * k], data["targets"][2 * k + 1]
        assert (grasp["type"], grasp["object"], grasp["method"]) == ("grasp", obj.name, "top_surface")
        assert np.linalg.norm(np.array(grasp["position"]) - obj.top_center(0.0)) < 0.01
        assert grasp["width"] > 0 and -1.58 < grasp["yaw"] < 1.58 and 0 < grasp["confidence"] <= 1
        assert place["type"] == "place" and place["yaw"] is None and place["width"] is None
        assert np.linalg.norm(np.array(place["position"]) - PLACE_WORLD) < 0.005


def test_backproject_without_extrinsics_stays_in_the_optical_frame(scene_files, capsys):
    folder, rendered = scene_files
    assert main(["backproject", "--plan", str(folder / "plan.json"), "--depth", str(folder / "depth.png"),
                 "--camera-info", str(folder / "camera.yaml"), "--compact"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["frame"] == "camera_color_optical_frame"
    top = rendered.cam2base.inverse().transform_points(rendered.scene.objects[0].top_center(0.0))[0]
    assert np.linalg.norm(np.array(data["targets"][0]["position"]) - top) < 0.01


def test_backproject_reports_bad_inputs_in_one_line(scene_files, capsys):
    folder, _ = scene_files
    base = ["backproject", "--plan", str(folder / "plan.json"), "--camera-info", str(folder / "camera.yaml")]
    Image.fromarray(np.zeros((480, 640, 3), np.uint8)).save(folder / "rgb.png")
    assert main(base + ["--depth", str(folder / "rgb.png")]) == 2
    assert "must be single-channel 16-bit (16UC1), got mode RGB" in capsys.readouterr().err

    (folder / "bad.yaml").write_text("parent_frame: b\nchild_frame: c\ntranslation: [0, 0, 0]\nrotation: [0, 0, 0, 2]\n")
    assert main(base + ["--depth", str(folder / "depth.png"), "--extrinsics", str(folder / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unit quaternion" in err

    Image.fromarray(np.zeros((480, 640), np.uint16)).save(folder / "empty.png")
    assert main(base + ["--depth", str(folder / "empty.png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("grounded-planner backproject: action 0 (grasp): no valid depth in bbox")
