"""Scenario files of the simulated workcell: checked loading with errors naming the field, seeded randomisation.

Plain Python: no MuJoCo needed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from grounded_planner.sim.scenario import ScenarioError, load_scenario, scenario_from_dict

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "config" / "scenarios").glob("*.yaml"))


def _minimal() -> dict:
    return {
        "name": "t",
        "instruction": "put the box in the bowl",
        "objects": [
            {
                "id": "box",
                "kind": "box",
                "size_m": [0.04, 0.04, 0.04],
                "position_m": [0.4, 0.1],
                "randomize": {"xy_m": 0.03, "yaw_deg": 20, "colors": ["red", "green", "blue"]},
            },
            {"id": "bowl", "kind": "bowl", "size_m": [0.08, 0.05], "position_m": [0.45, -0.15]},
        ],
        "plan": [{"type": "grasp", "object": "box"}, {"type": "place", "target": "bowl"}],
        "success": [{"type": "inside", "object": "box", "target": "bowl"}],
    }


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_load(path):
    scenario = load_scenario(path)
    assert scenario.plan and scenario.success
    assert scenario.name == path.stem


def test_default_scenario_is_box_in_bowl():
    scenario = load_scenario(REPO / "config" / "scenarios" / "box_in_bowl.yaml")
    assert [s.type for s in scenario.plan] == ["grasp", "place"]
    assert scenario.camera.width == 640 and scenario.camera.height == 480


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["objects"][0].pop("kind"), "objects[0]: missing required field 'kind'"),
        (lambda d: d["objects"][0].update(kind="sphere"), "objects[0].kind: unknown kind 'sphere'"),
        (lambda d: d["objects"][0].update(size_m=[0.04, 0.04]), "objects[0].size_m: expected 3"),
        (lambda d: d["objects"][0].update(color="mauve"), "unknown colour 'mauve'"),
        (lambda d: d["plan"][1].update(target="bin"), "plan[1].target: no object with id 'bin'"),
        (lambda d: d["plan"].pop(), "plan[0]: a grasp must be immediately followed by a place"),
        (lambda d: d["plan"][0].update(object="bowl"), "object 'bowl' is a bowl, expected one of box, cylinder, cup"),
        (lambda d: d.update(success=[]), "at least one success predicate"),
        (lambda d: d["success"][0].update(type="near"), "success[0]: expected {type: inside|on|drawer_open"),
        (lambda d: d.update(camera={"fov": 60}), "camera: unknown field(s) ['fov']"),
        (lambda d: d["objects"][1].update(id="box"), "object ids must be unique"),
        (lambda d: d.update(robot="ur5"), "robot: unknown arm 'ur5' (expected one of gp5, fr3, so101)"),
        (
            lambda d: d["objects"].append(
                {
                    "id": "c",
                    "kind": "cabinet",
                    "size_m": [0.2, 0.3, 0.1],
                    "position_m": [0.6, 0.3],
                    "drawer_open_m": 0.5,
                }
            ),
            "objects[2].drawer_open_m: must be between 0 and",
        ),
    ],
)
def test_bad_scenarios_name_the_field(mutate, expected):
    data = _minimal()
    mutate(data)
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data, source="bad.yaml")
    assert expected in str(err.value)
    assert str(err.value).startswith("bad.yaml")


def test_yaml_on_is_a_string_not_a_boolean(tmp_path):
    # YAML 1.1 reads a bare `on` as true; a scenario's `type: on` must stay the predicate name
    data = _minimal()
    data["objects"].append({"id": "plate", "kind": "plate", "size_m": [0.09, 0.01], "position_m": [0.6, 0.2]})
    data["success"] = [{"type": "on", "object": "box", "target": "plate"}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data).replace("type: 'on'", "type: on"))
    assert "type: on\n" in path.read_text()
    assert load_scenario(path).success[0].type == "on"


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ScenarioError, match="nope.yaml: scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_randomisation_is_seeded_and_within_ranges():
    scenario = scenario_from_dict(_minimal())
    a, b, c = scenario.sample(7), scenario.sample(7), scenario.sample(8)
    assert [o.position_m for o in a.objects] == [o.position_m for o in b.objects]
    assert a.objects[0].position_m != c.objects[0].position_m
    for s in (a, c):
        box = s.objects[0]
        assert abs(box.position_m[0] - 0.4) <= 0.03 and abs(box.position_m[1] - 0.1) <= 0.03
        assert abs(box.yaw_deg) <= 20
        # the bowl has no randomize block: it stays put
        assert s.objects[1].position_m == (0.45, -0.15)
    colors = {scenario.sample(seed).objects[0].color for seed in range(20)}
    assert len(colors) == 3
    assert scenario.sample(None) is scenario


def test_impossible_layout_is_refused():
    data = _minimal()
    data["objects"][1]["position_m"] = [0.4, 0.1]  # on top of the box, no jitter to escape
    data["objects"][0]["randomize"] = {}
    with pytest.raises(ScenarioError, match="no non-overlapping layout"):
        scenario_from_dict(data).sample(0)


def test_footprint_radius():
    scenario = scenario_from_dict(_minimal())
    assert math.isclose(scenario.objects[0].footprint_radius_m, 0.5 * math.hypot(0.04, 0.04))
    assert scenario.objects[1].footprint_radius_m == 0.08
