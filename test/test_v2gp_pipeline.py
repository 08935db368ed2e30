"""V2GP end to end: a synthetic LeRobot dataset (known boxes) through stages 1-4 with a local VLM server.

The VLM is test/helpers/v2gp_vlm_server.py: a mock (no real VLM can run here) that answers over real HTTP
from the pixels it is sent. Checks: the expected plans, the training JSONL read back by the planner's own
parser, the exact planner prompt in the samples, filters and instruction revision, resume from caches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from grounded_planner.v2gp.config import V2GPConfig  # noqa: E402
from grounded_planner.v2gp.dataset import open_dataset  # noqa: E402
from grounded_planner.v2gp.pipeline import run_pipeline  # noqa: E402
from grounded_planner.v2gp.plans import sample_plan  # noqa: E402
from grounded_planner.v2gp.synthetic import SCENE, SyntheticConfig, scene_colors, write_synthetic_dataset  # noqa: E402
from helpers.v2gp_vlm_server import V2GPVLMServer  # noqa: E402

MODEL = "qwen3-vl-stand-in"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_synthetic_dataset(tmp_path_factory.mktemp("ds") / "synthetic", SyntheticConfig(episodes=7), "v2.1")


@pytest.fixture
def server():
    with V2GPVLMServer(scene_colors(), {name: kind for name, (_, kind, _) in SCENE.items()}) as srv:
        yield srv


def truth_of(dataset: Path) -> dict[int, dict]:
    return {
        t["episode_index"]: t for t in map(json.loads, (dataset / "meta/v2gp_truth.jsonl").read_text().splitlines())
    }


def assert_plan_matches(plan: dict, expected: dict, tol_px: float) -> None:
    assert plan["instruction"] == expected["instruction"]
    assert len(plan["actions"]) == len(expected["actions"]), (plan["actions"], expected["actions"])
    for got, want in zip(plan["actions"], expected["actions"]):
        assert (got["type"], got.get("object")) == (want["type"], want["object"])
        assert got.get("target", "") == want.get("target", "")
        if "bbox" in want:
            np.testing.assert_allclose(got["bbox"], want["bbox"], atol=tol_px)
        if "point" in want:
            np.testing.assert_allclose(got["point"], want["point"], atol=tol_px)


def test_synthetic_dataset_through_all_stages_gives_the_expected_plans(dataset, server, tmp_path):
    out = tmp_path / "out"
    config = V2GPConfig(
        gripper="observation.state[gripper]",
        grounder="oracle",
        vlm_base_url=server.base_url,
        vlm_model=MODEL,
        workers=2,
    )
    summary = run_pipeline(dataset, out, config)
    truth = truth_of(dataset)

    assert summary.episodes == 7 and summary.episodes_with_plan == 6 and not summary.failed_episodes
    assert summary.segments == sum(len(t["segments"]) for t in truth.values())
    assert summary.dropped == {"empty_grasp": 2, "drop": 1}
    assert summary.revised_instructions == 1  # the failed grasp that was not retried
    for index, t in truth.items():
        path = out / "plans" / f"episode_{index:06d}.json"
        if not t["plan"]["actions"]:  # the dropped block: nothing to learn from
            assert not path.exists()
            continue
        assert_plan_matches(json.loads(path.read_text()), t["plan"], tol_px=0.01)
        cached = json.loads((out / "cache" / f"episode_{index:06d}" / "segments.json").read_text())
        assert [[s["start"], s["end"]] for s in cached["value"]["segments"]] == t["segments"]

    samples = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [s["variant"] for s in samples].count("implicit") == 6
    assert {s["episode"] for s in samples} == set(range(6))
    for sample in samples:
        plan = sample_plan(sample)  # the planner's parser, qwen3 convention
        expected = truth[sample["episode"]]["plan"]
        if sample["variant"] == "implicit":
            assert sample["messages"][1]["content"][1]["text"] in (
                "Instruction: Please tidy up the table.",
                "Instruction: I need something from the drawer.",
            )
            expected = {**expected, "instruction": plan.instruction}
        # the qwen3 answer is in thousandths of the image side: 0.32 px here
        assert_plan_matches(plan.to_dict(), expected, tol_px=0.33)
        image = out / sample["messages"][1]["content"][0]["image"]
        assert image.exists() and sample["images"] == [sample["messages"][1]["content"][0]["image"]]


def test_training_sample_uses_the_planners_exact_prompt(dataset, server, tmp_path):
    from PIL import Image

    from grounded_planner.vlm.config import PlannerConfig
    from grounded_planner.vlm.factory import make_planner

    out = tmp_path / "out"
    run_pipeline(
        dataset,
        out,
        V2GPConfig(
            gripper="observation.state[gripper]",
            grounder="oracle",
            vlm_base_url=server.base_url,
            vlm_model=MODEL,
            implicit=False,
        ),
        episodes=[0],
    )
    sample = json.loads((out / "train.jsonl").read_text().splitlines()[0])
    image = np.asarray(Image.open(out / sample["messages"][1]["content"][0]["image"]).convert("RGB"))
    planner = make_planner(PlannerConfig(backend="openai", model=MODEL, base_url=server.base_url))
    plan = planner.plan(image, truth_of(dataset)[0]["instruction"])
    sent = server.requests[-1]["messages"]
    system_text = sent[0]["content"] if isinstance(sent[0]["content"], str) else sent[0]["content"][0]["text"]
    user_texts = (
        [p["text"] for p in sent[1]["content"] if p.get("type") == "text"]
        if isinstance(sent[1]["content"], list)
        else [sent[1]["content"]]
    )
    assert sample["messages"][0]["content"][0]["text"] == system_text
    assert sample["messages"][1]["content"][1]["text"] in user_texts
    # and the stand-in planner's answer for this instruction is the plan the sample teaches
    assert [a.type for a in plan.actions] == [a.type for a in sample_plan(sample).actions]


def test_resume_uses_caches_and_a_new_grounder_reruns_only_its_stages(dataset, server, tmp_path):
    out = tmp_path / "out"
    base = dict(gripper="observation.state[gripper]", vlm_base_url=server.base_url, vlm_model=MODEL)
    first = run_pipeline(dataset, out, V2GPConfig(grounder="oracle", **base), episodes=[0, 1])
    n_requests = len(server.requests)
    again = run_pipeline(dataset, out, V2GPConfig(grounder="oracle", **base), episodes=[0, 1])
    assert again.cache_hits == {"segments": 2, "objects": 2, "grounding": 2, "plan": 2}
    assert len(server.requests) == n_requests  # nothing asked twice
    assert (out / "train.jsonl").read_text().count("\n") == first.samples_explicit + first.samples_implicit

    vlm = run_pipeline(dataset, out, V2GPConfig(grounder="vlm", **base), episodes=[0, 1])
    assert vlm.cache_hits == {"segments": 2, "objects": 2, "grounding": 0, "plan": 0}
    truth = truth_of(dataset)
    for index in (0, 1):
        plan = json.loads((out / "plans" / f"episode_{index:06d}.json").read_text())
        # the VLM grounder sees colour blobs (the gripper disc covers a few pixels of a held block)
        assert_plan_matches(plan, truth[index]["plan"], tol_px=3.0)


def test_v3_video_dataset_reads_the_same_frames_and_segments(tmp_path):
    pytest.importorskip("av")
    v2 = write_synthetic_dataset(tmp_path / "v2", SyntheticConfig(episodes=2, seed=3), "v2.1")
    v3 = write_synthetic_dataset(tmp_path / "v3", SyntheticConfig(episodes=2, seed=3, video=True), "v3.0")
    v3_png = write_synthetic_dataset(tmp_path / "v3png", SyntheticConfig(episodes=2, seed=3), "v3.0")
    a = open_dataset(v2, gripper="observation.state[gripper]")
    b = open_dataset(v3, gripper="observation.state[2]")
    c = open_dataset(v3_png, gripper="observation.state[gripper]")
    for index in (0, 1):
        ea, eb, ec = a.episode(index), b.episode(index), c.episode(index)
        np.testing.assert_array_equal(ea.frame(7), ec.frame(7))  # PNG in parquet, one file for both episodes
        np.testing.assert_array_equal(ea.gripper, ec.gripper)
        assert ea.instruction == eb.instruction and ea.length == eb.length
        np.testing.assert_array_equal(ea.gripper, eb.gripper)
        for row in (0, ea.length // 2, ea.length - 1):  # H.264 at crf 10: within a few grey levels
            diff = np.abs(ea.frame(row).astype(int) - eb.frame(row).astype(int))
            assert np.mean(diff) < 3.0, (index, row, np.mean(diff))


def test_cli_run_with_oracle_needs_no_vlm_and_bad_input_is_one_line(dataset, tmp_path):
    exe = Path(sys.executable).with_name("grounded-planner")
    cfg = tmp_path / "v2gp.yaml"
    cfg.write_text("gripper: observation.state[gripper]\nidentifier: oracle\ngrounder: oracle\n")
    out = subprocess.run(
        [
            str(exe),
            "v2gp",
            "run",
            "--dataset",
            str(dataset),
            "--out",
            str(tmp_path / "o"),
            "--config",
            str(cfg),
            "--episodes",
            "0-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["episodes_with_plan"] == 2
    assert summary["notes"] == ["no VLM given: implicit rewrites are skipped"]
    assert "[2/2] episode" in out.stderr  # progress lines
    bad = subprocess.run(
        [str(exe), "v2gp", "run", "--dataset", str(tmp_path), "--out", str(tmp_path / "o2"), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "not a LeRobot dataset" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    cfg.write_text("gripper: observation.state[nope]\n")
    bad = subprocess.run(
        [str(exe), "v2gp", "run", "--dataset", str(dataset), "--out", str(tmp_path / "o3"), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "no element named 'nope'" in bad.stderr


def test_project_rollouts_are_an_input_too(server, tmp_path):
    pytest.importorskip("rosbags")
    from grounded_planner.v2gp.synthetic import write_synthetic_rollouts

    rollouts = write_synthetic_rollouts(tmp_path / "rollouts", SyntheticConfig(episodes=3, seed=5))
    truth = {t["episode_index"]: t for t in map(json.loads, (rollouts / "v2gp_truth.jsonl").read_text().splitlines())}
    config = V2GPConfig(
        gripper="fr3_finger_joint1",
        robot="franka_finger",
        grounder="vlm",
        vlm_base_url=server.base_url,
        vlm_model=MODEL,
        implicit=False,
    )
    summary = run_pipeline(rollouts, tmp_path / "out", config)
    assert summary.episodes_with_plan == 3 and not summary.failed_episodes
    for index, t in truth.items():
        cached = json.loads((tmp_path / "out" / "cache" / f"episode_{index:06d}" / "segments.json").read_text())
        assert [[s["start"], s["end"]] for s in cached["value"]["segments"]] == t["segments"]
        plan = json.loads((tmp_path / "out" / "plans" / f"episode_{index:06d}.json").read_text())
        assert_plan_matches(plan, t["plan"], tol_px=3.0)


def test_ray_executor_without_ray_is_a_clear_error(dataset, tmp_path, monkeypatch):
    from grounded_planner.v2gp.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "ray", None)  # a machine without ray: `import ray` raises ImportError there
    config = V2GPConfig(gripper="observation.state[gripper]", identifier="oracle", grounder="oracle", executor="ray")
    with pytest.raises(MissingDependencyError, match=r"pip install .grounded_planner\[scale\]"):
        run_pipeline(dataset, tmp_path / "out", config)


def test_example_config_loads_and_unknown_keys_are_named(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    config = V2GPConfig.load(repo / "config" / "v2gp.yaml")
    assert config.robot == "droid" and config.segment_config().close_threshold == 0.3
    bad = tmp_path / "bad.yaml"
    bad.write_text("grounder: oracle\nclose_treshold: 0.4\n")
    with pytest.raises(ValueError, match="unknown setting.*close_treshold"):
        V2GPConfig.load(bad)


def test_vlm_grounder_falls_back_to_the_category_cue(dataset, server):
    from grounded_planner.v2gp.ground import VLMGrounder
    from grounded_planner.v2gp.identify import ObjectIdentity
    from grounded_planner.v2gp.segment import Segment
    from grounded_planner.vlm.config import PlannerConfig
    from grounded_planner.vlm.factory import make_planner

    episode = open_dataset(dataset, gripper="observation.state[gripper]").episode(0)
    t = truth_of(dataset)[0]
    ((start, end),) = t["segments"]
    segment = Segment(start=start, end=end, close_frame=start + 3, release_frame=end - 2, closed_level=0.7)
    planner = make_planner(PlannerConfig(backend="openai", model=MODEL, base_url=server.base_url))
    grounding = VLMGrounder(planner).ground(
        episode, segment, ObjectIdentity(object="the crimson cube", category="red block", interaction="pick_place")
    )
    assert any("crimson" in note for note in grounding.notes)  # the description was not found ...
    np.testing.assert_allclose(grounding.bbox_px, t["plan"]["actions"][0]["bbox"], atol=3.0)  # ... the category was
    np.testing.assert_allclose(grounding.point_px, t["plan"]["actions"][1]["point"], atol=3.0)
