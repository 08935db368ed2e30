"""Episode and prediction files: strict ground truth with errors that name the line, lenient predictions."""

from __future__ import annotations

import json

import pytest

from grounded_planner.bench.episodes import EpisodeError, load_episodes, load_predictions

GOOD = {
    "id": "ep-1",
    "image": "images/ep-1.png",
    "instruction": "bin the cup",
    "instruction_type": "explicit",
    "actions": [
        {"type": "grasp", "object": "cup", "bbox": [1, 2, 30, 40]},
        {"type": "place", "target": "bin", "bbox": [50, 50, 90, 90]},
        {"type": "open", "object": "drawer", "bbox": [0, 0, 10, 10]},
    ],
    "unordered": [[0, 1]],
}


def write_jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_loads_episode_with_paths_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    eps = load_episodes(write_jsonl(tmp_path / "sub" / "e.jsonl", [GOOD]))
    ep = eps[0]
    assert ep.image == tmp_path / "sub" / "images" / "ep-1.png"
    assert [a.type for a in ep.actions] == ["grasp", "place", "open"]
    assert ep.actions[1].bbox == (50.0, 50.0, 90.0, 90.0) and ep.actions[1].target == "bin"
    assert ep.unordered == [[0, 1]] and ep.group == "explicit/short"


def test_instruction_type_is_case_insensitive(tmp_path):
    eps = load_episodes(write_jsonl(tmp_path / "e.jsonl", [GOOD | {"instruction_type": "Implicit"}]))
    assert eps[0].group == "implicit/short"


def with_changes(**changes):
    record = json.loads(json.dumps(GOOD))
    record.update(changes)
    return record


@pytest.mark.parametrize(
    "record, message",
    [
        (with_changes(instruction_type="vague"), "instruction_type"),
        (with_changes(actions=[]), "non-empty"),
        (with_changes(actions=[{"type": "grasp", "bbox": [1, 2, 3, 4]}]), "immediately followed by a place"),
        (with_changes(actions=[{"type": "place", "bbox": [1, 2, 3, 4]}]), "immediately follow a grasp"),
        (with_changes(actions=[{"type": "open", "bbox": [10, 2, 3, 4]}]), "x1 < x2"),
        (with_changes(actions=[{"type": "open", "point": [1, 2]}]), "needs a 'bbox'"),
        (with_changes(actions=[{"type": "push", "bbox": [1, 2, 3, 4]}]), "'type' must be one of"),
        (with_changes(unordered=[[0, 2]]), "out of range"),  # 2 steps only (indices count steps)
        (with_changes(unordered=[[0, 1], [1]]), "more than one"),
        (with_changes(unordered=[["a"]]), "list of step indices"),
        ({"id": "x"}, "no 'image'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_ground_truth_names_line_and_field(tmp_path, record, message):
    path = write_jsonl(tmp_path / "e.jsonl", [GOOD | {"id": "ok"}, record])
    with pytest.raises(EpisodeError, match=message) as info:
        load_episodes(path)
    assert f"{path}:2" in str(info.value)


def test_duplicate_ids_and_empty_files_are_rejected(tmp_path):
    with pytest.raises(EpisodeError, match="duplicate episode id 'ep-1'"):
        load_episodes(write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD]))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(EpisodeError, match="no episodes"):
        load_episodes(tmp_path / "empty.jsonl")
    with pytest.raises(EpisodeError, match="cannot read"):
        load_episodes(tmp_path / "absent.jsonl")


def test_predictions_keep_invalid_plans_and_later_lines_win(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": "a", "plan": None, "error": "timeout"},
            {"id": "b", "plan": {"actions": [{"type": "grasp"}]}},  # invalid plan: kept as is, scored later
            {"id": "a", "plan": {"actions": []}, "error": ""},  # a retried episode appended later
        ],
    )
    preds = load_predictions(path)
    assert preds["b"].plan == {"actions": [{"type": "grasp"}]}
    assert preds["a"].plan == {"actions": []} and preds["a"].error == ""
    with pytest.raises(EpisodeError, match="with an 'id'"):
        load_predictions(write_jsonl(tmp_path / "bad.jsonl", [{"plan": None}]))
