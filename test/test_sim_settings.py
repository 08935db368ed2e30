"""`sim` command settings at non-default values: --no-depth writes no depth, --noise adds depth noise to a scenario
that has none, --seed moves the objects (renders at 320x240: the CPU is shared)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import REPO
from grounded_planner.cli.main import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)")


@pytest.fixture
def small_scenario(tmp_path):
    data = yaml.safe_load((REPO / "config" / "scenarios" / "box_in_bowl.yaml").read_text())
    data["camera"] = {**data.get("camera", {}), "width": 320, "height": 240, "fy_px": 307.5}
    assert not (data["camera"].get("noise") or data.get("noise")), "the scenario must render without noise"
    path = tmp_path / "scenes" / "box_in_bowl.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data))
    return path


def render(capsys, scenario, out, *extra):
    assert main(["sim", "render", str(scenario), "--out", str(out), *extra]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return np.asarray(Image.open(out / "depth.png"), dtype=np.int64)


def test_render_noise_and_seed(capsys, small_scenario, tmp_path):
    clean = render(capsys, small_scenario, tmp_path / "clean")
    again = render(capsys, small_scenario, tmp_path / "again")
    assert np.array_equal(clean, again)  # nominal poses, no noise: the same depth every time
    noisy = render(capsys, small_scenario, tmp_path / "noisy", "--noise")
    changed = (noisy != clean) & (clean > 0)
    assert changed.mean() > 0.2  # D435-like noise touches most valid pixels
    seeded = render(capsys, small_scenario, tmp_path / "seeded", "--seed", "3")
    assert not np.array_equal(seeded, clean)  # randomised poses


def test_export_no_depth_writes_no_depth_images(capsys, small_scenario, tmp_path):
    assert main(["sim", "export", "--scenarios", str(small_scenario.parent), "--out", str(tmp_path / "full")]) == 0
    assert (
        main(["sim", "export", "--scenarios", str(small_scenario.parent), "--out", str(tmp_path / "rgb"), "--no-depth"])
        == 0
    )
    capsys.readouterr()
    full = json.loads((tmp_path / "full" / "episodes.jsonl").read_text().splitlines()[0])
    rgb_only = json.loads((tmp_path / "rgb" / "episodes.jsonl").read_text().splitlines()[0])
    assert (tmp_path / "full" / full["sim"]["depth"]).is_file()
    assert not list((tmp_path / "rgb").rglob("*depth*.png")) and rgb_only["sim"].get("depth") in (None, "")
    assert (tmp_path / "rgb" / rgb_only["image"]).is_file()
