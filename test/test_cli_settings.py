"""Every command-line setting that changes a result, at a value other than its default, so that a flag the
command ignores fails a test (issue 31: a depth scale tested only at the value the fixture was made with passed).

Each test runs the command in-process through ``grounded_planner.cli.main.main`` and checks what a user would see
change. Inventory and where each flag is covered: docs/testing.md.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from grounded_planner.cli.main import main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"


def run(capsys, *args, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- parse ------------------------------------------------------------------------------------------------------
PIXEL_ANSWER = '[{"type": "grasp", "object": "cup", "bbox": [64, 48, 128, 96]}]'


def test_parse_model_size_scales_pixel_answers_back(capsys, monkeypatch):
    code, out, _ = run(
        capsys, "parse", "--width", 1280, "--height", 960, "--no-validate", stdin=PIXEL_ANSWER, monkeypatch=monkeypatch
    )
    assert code == 0 and json.loads(out)["actions"][0]["bbox"] == [64, 48, 128, 96]
    code, out, _ = run(
        capsys,
        "parse",
        "--width",
        1280,
        "--height",
        960,
        "--model-width",
        320,
        "--model-height",
        480,
        "--no-validate",
        stdin=PIXEL_ANSWER,
        monkeypatch=monkeypatch,
    )
    assert code == 0 and json.loads(out)["actions"][0]["bbox"] == [256, 96, 512, 192]  # x * 4, y * 2


def test_parse_no_validate_accepts_a_grasp_without_its_place(capsys, monkeypatch):
    code, _, err = run(capsys, "parse", "--width", 640, "--height", 480, stdin=PIXEL_ANSWER, monkeypatch=monkeypatch)
    assert code == 2 and "place" in err
    code, out, _ = run(
        capsys, "parse", "--width", 640, "--height", 480, "--no-validate", stdin=PIXEL_ANSWER, monkeypatch=monkeypatch
    )
    assert code == 0 and [a["type"] for a in json.loads(out)["actions"]] == ["grasp"]


def test_parse_instruction_and_compact(capsys, monkeypatch):
    code, out, _ = run(
        capsys,
        "parse",
        "--width",
        640,
        "--height",
        480,
        "--no-validate",
        "--compact",
        "--instruction",
        "pick the cup",
        stdin=PIXEL_ANSWER,
        monkeypatch=monkeypatch,
    )
    assert code == 0 and out.count("\n") == 1 and json.loads(out)["instruction"] == "pick the cup"
    code, out, _ = run(
        capsys, "parse", "--width", 640, "--height", 480, "--no-validate", stdin=PIXEL_ANSWER, monkeypatch=monkeypatch
    )
    assert out.count("\n") > 1 and json.loads(out)["instruction"] == ""


@pytest.mark.parametrize(
    "convention, bbox",
    [("pixel", [100, 200, 300, 400]), ("qwen3", [64, 96, 192, 192]), ("gemini", [128, 48, 256, 144])],
)
def test_parse_convention_reads_the_same_numbers_three_ways(capsys, monkeypatch, convention, bbox):
    answer = '[{"type": "open", "object": "door", "bbox": [100, 200, 300, 400]}]'
    code, out, _ = run(
        capsys,
        "parse",
        "--width",
        640,
        "--height",
        480,
        "--convention",
        convention,
        stdin=answer,
        monkeypatch=monkeypatch,
    )
    assert code == 0 and json.loads(out)["actions"][0]["bbox"] == pytest.approx(bbox)


# ---- backproject -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    from grounded_planner.geometry.synthetic import write_scene_files

    folder = tmp_path_factory.mktemp("scene")
    write_scene_files(31, folder)
    return folder


def backproject(capsys, scene, *extra):
    code, out, err = run(
        capsys,
        "backproject",
        "--plan",
        scene / "plan.json",
        "--camera-info",
        scene / "camera.yaml",
        "--extrinsics",
        scene / "extrinsics.yaml",
        "--compact",
        *extra,
    )
    assert code == 0, err
    return json.loads(out)


def test_depth_scale_other_than_the_default_is_applied(capsys, scene):
    """The same depth written in half-millimetre units gives the same targets with --depth-scale 0.0005, and
    targets at twice the distance from the camera without it."""
    units_mm = np.array(Image.open(scene / "depth.png"), dtype=np.int64)
    Image.fromarray((units_mm * 2).astype(np.uint16)).save(scene / "depth_half_mm.png")
    reference = backproject(capsys, scene, "--depth", scene / "depth.png")
    scaled = backproject(capsys, scene, "--depth", scene / "depth_half_mm.png", "--depth-scale", "0.0005")
    for got, want in zip(scaled["targets"], reference["targets"]):
        assert got["position"] == pytest.approx(want["position"], abs=1e-6)
    ignored = backproject(capsys, scene, "--depth", scene / "depth_half_mm.png")
    moved = [
        np.linalg.norm(np.subtract(a["position"], b["position"]))
        for a, b in zip(ignored["targets"], reference["targets"])
    ]
    assert min(moved) > 0.3  # read as millimetres the table is about a metre further away


def test_without_extrinsics_the_targets_stay_in_the_camera_frame(capsys, scene):
    code, out, _ = run(
        capsys,
        "backproject",
        "--plan",
        scene / "plan.json",
        "--camera-info",
        scene / "camera.yaml",
        "--depth",
        scene / "depth.png",
    )
    assert code == 0 and json.loads(out)["frame"] == "camera_color_optical_frame"
    assert backproject(capsys, scene, "--depth", scene / "depth.png")["frame"] == "panda_link0"


# ---- plan: every planner flag reaches the planner's config ------------------------------------------------------
class RecordingPlanner:
    """Test double of what ``make_planner`` returns (a context manager with ``plan(image, instruction)``): it keeps
    the config it was built from, so each flag's value can be checked where the planner would use it."""

    configs: list = []

    def __init__(self, config):
        self.configs.append(config)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def plan(self, image, instruction):
        from grounded_planner.plan import GroundedPlan

        return GroundedPlan(instruction, (image.shape[1], image.shape[0]), [], reason="recorded")


PLAN_FLAGS = [  # flag, value, PlannerConfig field, value there (none of them the field's default)
    ("--backend", "gemini", "backend", "gemini"),
    ("--model", "gemini-2.5-flash", "model", "gemini-2.5-flash"),
    ("--api-key-env", "MY_KEY", "api_key_env", "MY_KEY"),
    ("--prompt-family", "qwen3", "prompt_family", "qwen3"),
    ("--timeout", "7.5", "timeout_s", 7.5),
    ("--cache-dir", "CACHE", "cache_dir", "CACHE"),
    ("--convention", "gemini", "convention", "gemini"),
    ("--max-image-side", "640", "max_image_side", 640),
    ("--repair-attempts", "3", "repair_attempts", 3),
    ("--max-tokens", "4096", "max_tokens", 4096),
    ("--record-file", "plans.jsonl", "record_file", "plans.jsonl"),
    ("--adapter", "lora", "adapter_path", "lora"),
    ("--grounder-model", "Embodied-R1", "grounder_model", "Embodied-R1"),
    ("--grounder-base-url", "http://grounder:8001/v1", "grounder_base_url", "http://grounder:8001/v1"),
]


def test_every_plan_flag_reaches_the_planner_config(capsys, monkeypatch, tmp_path):
    from grounded_planner.vlm.config import PlannerConfig

    monkeypatch.setattr("grounded_planner.cli.planner.make_planner", RecordingPlanner)
    RecordingPlanner.configs.clear()
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(tmp_path / "rgb.png")
    args = [
        "plan",
        "--image",
        tmp_path / "rgb.png",
        "--instruction",
        "x",
        "--json-mode",
        "--base-url",
        "http://a:8000/v1",
        "--base-url",
        "http://b:8000/v1",
        "--replay-file",
        "r.jsonl",
        "--grounder",
        "embodied-r1",
    ]
    for flag, value, _, _ in PLAN_FLAGS:
        args += [flag, value]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    config = RecordingPlanner.configs[-1]
    defaults = PlannerConfig()
    for flag, _, field, expected in PLAN_FLAGS:
        assert getattr(config, field) == expected != getattr(defaults, field), flag
    assert config.json_mode is True and defaults.json_mode is False
    assert (config.base_url, config.base_urls) == ("http://a:8000/v1", ["http://b:8000/v1"])
    assert config.replay_file == "r.jsonl" and config.grounder == "embodied-r1"


def test_mode_decoupled_keeps_the_backend_as_the_language_planner(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("grounded_planner.cli.planner.make_planner", RecordingPlanner)
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(tmp_path / "rgb.png")
    code, _, err = run(
        capsys,
        "plan",
        "--image",
        tmp_path / "rgb.png",
        "--instruction",
        "x",
        "--mode",
        "decoupled",
        "--backend",
        "gemini",
        "--model",
        "m",
    )
    assert code == 0, err
    config = RecordingPlanner.configs[-1]
    assert (config.backend, config.language_backend) == ("decoupled", "gemini")


def test_plan_out_and_overlay_write_their_files(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("grounded_planner.cli.planner.make_planner", RecordingPlanner)
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(tmp_path / "rgb.png")
    code, out, _ = run(
        capsys,
        "plan",
        "--image",
        tmp_path / "rgb.png",
        "--instruction",
        "x",
        "--model",
        "m",
        "--out",
        tmp_path / "plan.json",
        "--overlay",
        tmp_path / "overlay.png",
    )
    assert code == 0 and json.loads((tmp_path / "plan.json").read_text())["reason"] == "recorded"
    assert Image.open(tmp_path / "overlay.png").size == (64, 48)


# ---- bench report ------------------------------------------------------------------------------------------------
def report(capsys, tmp_path, *extra) -> str:
    out = tmp_path / "report.html"
    code, _, err = run(
        capsys,
        "bench",
        "report",
        "--episodes",
        SAMPLE / "episodes.jsonl",
        "--predictions",
        SAMPLE / "predictions.jsonl",
        "--out",
        out,
        *extra,
    )
    assert code == 0, err
    return out.read_text()


def test_bench_report_title_failures_only_and_image_size(capsys, tmp_path):
    default = report(capsys, tmp_path)
    assert "<title>GroundedPlanBench: predictions.jsonl</title>" in default and 'id="ep-01"' in default
    chosen = report(
        capsys, tmp_path, "--title", "Qwen3-VL-8B on the sample set", "--failures-only", "--image-max-side", "64"
    )
    assert "<title>Qwen3-VL-8B on the sample set</title>" in chosen
    assert 'id="ep-01"' not in chosen and 'id="ep-03"' in chosen  # ep-01 succeeds, ep-03 does not
    import base64
    import re

    def first_image_side(html: str) -> int:
        data = re.search(r'href="data:image/(?:jpeg|png);base64,([^"]+)"', html).group(1)
        return max(Image.open(io.BytesIO(base64.b64decode(data))).size)

    assert first_image_side(chosen) == 64 and first_image_side(default) > 64
