"""`grounded-planner sim export`: bench episodes with exact GT plans from the renderer's segmentation, checked by
the bench loader and scorer (their own plans score TSR 100, shuffled ones 0)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import grounded_planner.sim  # noqa: F401  (picks the headless GL backend before MuJoCo is first imported)

pytest.importorskip("mujoco")

from grounded_planner.bench.episodes import Prediction, load_episodes  # noqa: E402
from grounded_planner.bench.scoring import score  # noqa: E402
from grounded_planner.cli.main import main  # noqa: E402
from grounded_planner.sim.export import gt_plan, mask_bbox  # noqa: E402
from grounded_planner.sim.workcell import SimWorkcell  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCENARIO_DIR = REPO / "config" / "scenarios"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("episodes")
    assert main(["sim", "export", "--scenarios", str(SCENARIO_DIR), "--out", str(out), "--seeds", "2"]) == 0
    return out


def test_export_writes_loadable_episodes(exported):
    episodes = load_episodes(exported / "episodes.jsonl")
    n_scenarios = len(list(SCENARIO_DIR.glob("*.yaml")))
    assert len(episodes) == 2 * n_scenarios
    for ep in episodes:
        assert ep.image.is_file()
        from PIL import Image

        with Image.open(ep.image) as im:
            assert im.size == (640, 480)
    by_id = {ep.id: ep for ep in episodes}
    tidy = by_id["tidy_table-s000"]
    assert tidy.instruction_type == "implicit" and tidy.horizon == "medium" and tidy.unordered == [[0, 1, 2]]
    assert [a.type for a in by_id["open_drawer-s001"].actions] == ["open"]
    # the randomisation shows: the two seeds of a scenario box the red box in different places
    assert by_id["box_in_bowl-s000"].actions[0].bbox != by_id["box_in_bowl-s001"].actions[0].bbox


def test_exported_depth_and_calibration_back_project_to_the_table(exported):
    from PIL import Image

    from grounded_planner.geometry.camera import CameraModel
    from grounded_planner.geometry.extrinsics import Extrinsics

    record = json.loads((exported / "episodes.jsonl").read_text().splitlines()[0])
    depth_m = np.asarray(Image.open(exported / record["sim"]["depth"]), dtype=np.float64) / 1000.0
    camera = CameraModel.from_camera_info_yaml(exported / record["sim"]["camera_info"])
    ext = Extrinsics.load(exported / record["sim"]["extrinsics"])
    x1, y1, x2, y2 = (int(v) for v in record["actions"][0]["bbox"])
    points = ext.transform_points(camera.deproject_image(depth_m)[y1:y2, x1:x2].reshape(-1, 3))
    # the grasped box's top is 45 mm above the table, within the 1 mm depth quantisation
    assert abs(np.percentile(points[:, 2], 95) - 0.045) < 0.002


def test_gt_plans_score_100_and_shuffled_plans_0(exported):
    episodes = load_episodes(exported / "episodes.jsonl")
    records = [json.loads(line) for line in (exported / "episodes.jsonl").read_text().splitlines()]
    own = [Prediction(r["id"], r["sim"]["plan"]) for r in records]
    result = score(episodes, own)
    assert result["overall"]["tsr"] == 100.0 and result["overall"]["arr"] == 100.0
    assert result["overall"]["episodes"] == len(episodes)
    # each episode gets the plan of another task (a derangement across scenarios; variants of one task —
    # perturbed or for another arm — hold the same objects, so a plan is only swapped with another task's)
    names = sorted({r["sim"]["scenario"] for r in records})
    task_of = {
        r["sim"]["scenario"]: tuple(
            sorted({str(a.get("object", a.get("target", ""))) for a in r["sim"]["plan"]["actions"]})
        )
        for r in records
    }
    shifted = {}
    for i, name in enumerate(names):
        others = [names[(i + k) % len(names)] for k in range(1, len(names))]
        shifted[name] = next(other for other in others if task_of[other] != task_of[name])
    by_scenario_seed = {(r["sim"]["scenario"], r["sim"]["seed"]): r for r in records}
    shuffled = [
        Prediction(r["id"], by_scenario_seed[(shifted[r["sim"]["scenario"]], r["sim"]["seed"])]["sim"]["plan"])
        for r in records
    ]
    assert score(episodes, shuffled)["overall"]["tsr"] == 0.0
    # and within the tidy-table episode, swapping which object goes where fails too
    tidy = next(r for r in records if r["id"] == "tidy_table-s000")
    plan = json.loads(json.dumps(tidy["sim"]["plan"]))
    plan["actions"][1]["point"], plan["actions"][3]["point"] = plan["actions"][3]["point"], plan["actions"][1]["point"]
    tidy_ep = [ep for ep in episodes if ep.id == "tidy_table-s000"]
    assert score(tidy_ep, [Prediction("tidy_table-s000", plan)])["overall"]["tsr"] == 0.0


def test_bench_score_cli_gives_100_on_the_exported_gt_predictions(exported, capsys):
    assert (
        main(
            [
                "bench",
                "score",
                "--episodes",
                str(exported / "episodes.jsonl"),
                "--predictions",
                str(exported / "gt_predictions.jsonl"),
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["overall"]["tsr"] == 100.0 and result["overall"]["episodes"] == 2 * len(
        list(SCENARIO_DIR.glob("*.yaml"))
    )


def test_gt_boxes_are_tight_around_the_objects():
    with SimWorkcell.from_scenario(SCENARIO_DIR / "box_in_bowl.yaml", seed=0) as cell:
        plan = gt_plan(cell)
        grasp, place = plan.actions
        pos, rot = cell.object_pose("red_box")  # the box is yawed: use its true corners
        half = np.array(cell.scenario.object("red_box").size_m) / 2
        corners = np.array([pos + rot @ (half * [sx, sy, sz]) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        uv = cell.project(corners) + 0.5  # camera pixel centres -> continuous plan coordinates
        np.testing.assert_allclose(grasp.bbox, [*uv.min(axis=0), *uv.max(axis=0)], atol=1.0)
        assert grasp.object == "red box" and place.target == "blue bowl"
        x1, y1, x2, y2 = place.bbox
        assert x1 <= place.point[0] <= x2 and y1 <= place.point[1] <= y2


def test_mask_bbox_uses_pixel_edges():
    mask = np.zeros((4, 6), bool)
    mask[1:3, 2:5] = True
    assert mask_bbox(mask) == (2.0, 1.0, 5.0, 3.0)
    assert mask_bbox(np.zeros((2, 2), bool)) is None


def test_export_errors_are_one_line(tmp_path, capsys):
    assert main(["sim", "export", "--scenarios", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ninstruction: y\nobjects: []\nplan: []\n")
    assert main(["sim", "export", "--scenarios", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.yaml: objects: expected a non-empty list" in err and "\n" not in err
