"""The simulator's object library for Spa-Bench: cups upright or upside down, boxes closed or open, objects that start
in a bowl, places beside a target (the ``offset_m`` of a place) and the ``beside`` predicate."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from grounded_planner.sim.scenario import ScenarioError, scenario_from_dict, scenario_to_dict

BASE = {
    "name": "states",
    "instruction": "put the white cup in the bowl",
    "robot": "gp5",
    "objects": [
        {"id": "cup_up", "kind": "cup", "size_m": [0.03, 0.06], "position_m": [0.40, 0.15], "color": "white"},
        {
            "id": "cup_down",
            "kind": "cup",
            "size_m": [0.03, 0.06],
            "position_m": [0.36, -0.22],
            "color": "red",
            "state": "upside_down",
        },
        {
            "id": "tray",
            "kind": "box",
            "size_m": [0.06, 0.045, 0.04],
            "position_m": [0.52, 0.15],
            "color": "brown",
            "state": "open",
        },
        {
            "id": "bowl",
            "kind": "bowl",
            "size_m": [0.095, 0.045],
            "position_m": [0.52, -0.12],
            "color": "blue",
            "mass_kg": 0.3,
        },
        {
            "id": "block",
            "kind": "box",
            "size_m": [0.03, 0.03, 0.03],
            "position_m": [0.52, -0.12],
            "color": "green",
            "inside": "bowl",
        },
    ],
    "plan": [{"type": "grasp", "object": "cup_up"}, {"type": "place", "target": "bowl", "offset_m": [0.0, 0.03]}],
    "success": [{"type": "inside", "object": "cup_up", "target": "bowl"}],
}


def test_states_and_inside_load_and_round_trip():
    scenario = scenario_from_dict(copy.deepcopy(BASE))
    assert scenario.object("cup_down").resolved_state == "upside_down"
    assert scenario.object("cup_up").resolved_state == "upright" and scenario.object("cup_up").state == ""
    assert scenario.object("block").inside == "bowl"
    assert scenario.plan[1].offset_m == (0.0, 0.03)
    assert scenario_to_dict(scenario_from_dict(scenario_to_dict(scenario))) == scenario_to_dict(scenario)
    assert scenario.sample(3) is not None  # an object in its bowl is not an overlap


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["objects"][0].update(state="open"), "objects[0].state: a cup has no state 'open'"),
        (lambda d: d["objects"][4].update(inside="tray"), "objects[4].inside: 'tray' is not a container"),
        (lambda d: d["objects"][0].update(state="sideways", kind="cylinder", size_m=[0.02, 0.05]), "it has no states"),
        (
            lambda d: d["success"].append(
                {"type": "beside", "object": "cup_up", "target": "bowl", "direction_xy": [1, 1]}
            ),
            "direction_xy: expected a unit vector",
        ),
    ],
)
def test_bad_states_are_named(change, expected):
    data = copy.deepcopy(BASE)
    change(data)
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data, source="states.yaml")
    assert expected in str(err.value) and "states.yaml" in str(err.value)


def test_an_empty_plan_needs_no_predicate_but_a_plan_does():
    data = copy.deepcopy(BASE)
    data.update(plan=[], success=[])
    assert scenario_from_dict(data).success == []
    data["plan"] = BASE["plan"]
    with pytest.raises(ScenarioError, match="at least one success predicate"):
        scenario_from_dict(data)


def test_states_in_the_simulator():
    pytest.importorskip("mujoco")
    from grounded_planner.sim.export import gt_plan, place_point_base
    from grounded_planner.sim.scene import camera_axes
    from grounded_planner.sim.workcell import SimWorkcell

    data = copy.deepcopy(BASE)
    data["success"].append({"type": "beside", "object": "tray", "target": "bowl", "direction_xy": [0.0, 1.0]})
    with SimWorkcell(scenario_from_dict(data)) as cell:
        rgb, depth = cell.render()
        masks = cell.object_masks()
        # an upside-down cup shows its closed floor on top: its top face is solid (no hole), an upright one is open
        for cup, solid in (("cup_up", False), ("cup_down", True)):
            lo, hi = cell.body_aabb(f"obj:{cup}")
            centre = 0.5 * (lo + hi)
            u, v = (cell.project(np.array([[centre[0], centre[1], hi[2]]]))[0]).astype(int)
            depth_at_centre = float(depth[v, u])
            cam = cell.scenario.camera
            z_axis = camera_axes(cam.position_m, cam.look_at_m)[2]  # depth is along the optical axis
            top_expected = float(np.dot(np.array([centre[0], centre[1], hi[2]]) - np.array(cam.position_m), z_axis))
            seen_top = abs(depth_at_centre - top_expected) < 0.015
            assert seen_top is solid, (cup, depth_at_centre, top_expected)
        # the open tray: the camera sees into it, deeper than its rim
        lo, hi = cell.body_aabb("obj:tray")
        assert hi[2] == pytest.approx(0.04, abs=0.002)
        # the block started in the bowl and rests on its floor, inside its rim
        b_lo, _ = cell.body_aabb("obj:block")
        bowl_lo, _ = cell.body_aabb("obj:bowl")
        assert 0.003 < b_lo[2] - bowl_lo[2] < 0.012
        assert all(masks[k].sum() > 40 for k in ("cup_up", "cup_down", "tray", "bowl"))
        # a place with an offset: on the bowl's floor while over it, on the table beside it past its footprint
        inner = place_point_base(cell, "bowl", (0.0, 0.03))
        outer = place_point_base(cell, "bowl", (0.0, 0.2))
        assert inner[2] > 0.003 and outer[2] == 0.0 and outer[1] - inner[1] == pytest.approx(0.17, abs=1e-6)
        plan = gt_plan(cell)
        assert plan.actions[1].bbox is not None  # inside the bowl: the bowl's region
        results = {r.predicate.type: r for r in cell.evaluate()}
        assert not results["beside"].ok and "mm from bowl" in results["beside"].detail
