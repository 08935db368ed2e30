"""The committed sample set (drawn scenes with exact GT), failure diagnosis, and the self-contained HTML report."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from grounded_planner.bench.episodes import Prediction, load_episodes, load_predictions
from grounded_planner.bench.report import diagnose, render_report, write_report
from grounded_planner.bench.sample import IMAGE_SIZE, TABLE_RGB, WALL_RGB, make_sample_set

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bench"


@pytest.fixture(scope="module")
def sample():
    return load_episodes(SAMPLE / "episodes.jsonl"), load_predictions(SAMPLE / "predictions.jsonl")


def test_committed_sample_set_is_what_the_generator_draws(tmp_path):
    episodes_path, predictions_path = make_sample_set(tmp_path)
    assert episodes_path.read_text() == (SAMPLE / "episodes.jsonl").read_text()
    assert predictions_path.read_text() == (SAMPLE / "predictions.jsonl").read_text()
    total = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert total < 1_000_000


def test_gt_boxes_sit_on_drawn_objects(sample):
    episodes, _ = sample
    groups = {ep.group for ep in episodes}
    assert groups == {f"{t}/{h}" for t in ("explicit", "implicit") for h in ("short", "medium", "long")}
    for ep in episodes:
        rgb = np.asarray(Image.open(ep.image).convert("RGB"))
        assert rgb.shape == (IMAGE_SIZE[1], IMAGE_SIZE[0], 3)
        for action in ep.actions:
            x1, y1, x2, y2 = (int(v) for v in action.bbox)
            patch = rgb[y1:y2, x1:x2].reshape(-1, 3)
            background = np.all(patch == TABLE_RGB, axis=1) | np.all(patch == WALL_RGB, axis=1)
            assert background.mean() < 0.5, f"{ep.id}: {action.type} box {action.bbox} is mostly background"


EXPECTED = {
    "ep-01": [],
    "ep-02": [],
    "ep-08": [],  # perfect, permuted inside unordered blocks
    "ep-03": ["wrong order"],
    "ep-11": ["wrong order"],  # swapped steps (ep-11: across two blocks)
    "ep-04": ["wrong box"],
    "ep-05": ["place outside target"],
    "ep-06": ["missing step"],
    "ep-07": ["extra step"],
    "ep-09": ["no plan"],
    "ep-10": ["invalid step", "missing step"],
    "ep-12": ["unparseable"],
}


def test_each_sample_prediction_fails_for_the_reason_it_was_built_for(sample):
    episodes, predictions = sample
    got = {ep.id: diagnose(ep, predictions.get(ep.id)).categories for ep in episodes}
    assert got == EXPECTED
    ep9 = next(ep for ep in episodes if ep.id == "ep-09")
    assert "no JSON in the answer" in diagnose(ep9, predictions["ep-09"]).reasons[0][1]


def test_missing_prediction_is_a_reason(sample):
    episodes, _ = sample
    assert diagnose(episodes[0], None).categories == ["missing prediction"]


def test_wrong_box_reason_names_the_step_and_iou(sample):
    episodes, predictions = sample
    ep4 = next(ep for ep in episodes if ep.id == "ep-04")
    ((category, text),) = diagnose(ep4, predictions["ep-04"]).reasons
    assert "GT step 2" in text and "blue block" in text and re.search(r"IoU 0\.\d\d < 0\.5", text)


def test_report_is_self_contained_html_with_overlays_and_reasons(sample, tmp_path):
    episodes, predictions = sample
    out = write_report(episodes, predictions, tmp_path / "r" / "report.html", title="sample <run>")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "sample &lt;run&gt;" in text
    # no external resources: every src/href is an embedded data URI
    refs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs)
    assert len(refs) == len(episodes)
    for ep in episodes:
        assert f'id="{ep.id}"' in text
    for reason in (
        "wrong order",
        "wrong box",
        "place outside target",
        "missing step",
        "extra step",
        "no plan",
        "unparseable",
        "invalid step",
    ):
        assert f"<b>{reason}</b>" in text
    # Table I: 12 cells of numbers; implicit/long is 0.0 TSR in this sample (its only episode has no plan)
    assert "Task Success Rate (TSR) %" in text and "Action Recall Rate (ARR) %" in text
    # each overlay is well-formed SVG with one box per GT step plus one per predicted box-carrying step
    svgs = re.findall(r"<svg .*?</svg>", text, flags=re.S)
    assert len(svgs) == len(episodes)
    ep3 = ET.fromstring(svgs[2])
    rects = ep3.findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) == 2 + 1 + 2  # GT open + GT grasp + GT place target; predicted pair and open boxes
    assert len(ep3.findall("{http://www.w3.org/2000/svg}path")) == 1  # the predicted place point
    assert ">p1?</text>" in svgs[9]  # ep-10's lone grasp is drawn and marked as an invalid step


def test_report_survives_a_missing_image(sample, tmp_path):
    episodes, predictions = sample
    ep = episodes[0]
    moved = type(ep)(ep.id, tmp_path / "nope.png", ep.instruction, ep.instruction_type, ep.actions, ep.unordered)
    text = render_report([moved], {ep.id: predictions[ep.id]})
    assert "image not found" in text and "<svg" in text


def test_report_handles_all_null_predictions(sample):
    episodes, _ = sample
    text = render_report(episodes, {ep.id: Prediction(ep.id, None, "server down") for ep in episodes})
    assert text.count("server down") == len(episodes)


def test_large_images_are_shrunk_but_overlays_keep_original_coordinates(sample, tmp_path):
    episodes, predictions = sample
    ep = episodes[0]
    big = tmp_path / "big.png"
    Image.open(ep.image).resize((IMAGE_SIZE[0] * 4, IMAGE_SIZE[1] * 4)).save(big)
    scale = 4.0
    actions = [type(a)(a.type, a.object, a.target, tuple(v * scale for v in a.bbox)) for a in ep.actions]
    big_ep = type(ep)(ep.id, big, ep.instruction, ep.instruction_type, actions, ep.unordered)
    text = render_report([big_ep], {}, image_max_side_px=640)
    svg = ET.fromstring(re.search(r"<svg .*?</svg>", text, flags=re.S).group(0))
    assert svg.get("viewBox") == f"0 0 {IMAGE_SIZE[0] * 4} {IMAGE_SIZE[1] * 4}"
    image = svg.find("{http://www.w3.org/2000/svg}image")
    assert image.get("href").startswith("data:image/jpeg;base64,")
    import base64
    import io

    shrunk = Image.open(io.BytesIO(base64.b64decode(image.get("href").split(",", 1)[1])))
    assert max(shrunk.size) == 640
    full = render_report([big_ep], {}, image_max_side_px=0)
    assert "data:image/png;base64," in full and len(full) > len(text)


def test_failures_only_leaves_successful_cards_out_but_keeps_the_table(sample):
    episodes, predictions = sample
    text = render_report(episodes, predictions, failures_only=True)
    for ep_id in ("ep-01", "ep-02", "ep-08"):
        assert f'id="{ep_id}"' not in text
    assert 'id="ep-03"' in text and text.count("<svg ") == 9
    assert "12 episodes" in text
