"""compute_targets on ray-cast RGB-D scenes of known geometry (oblique cameras, depth holes, 1 mm noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.geometry_scenes import BASE, RenderedScene, tabletop

from grounded_planner.geometry import (
    Extrinsics,
    TargetConfig,
    ExtrinsicsError,
    GeometryError,
    NoValidDepthError,
    OutsideImageError,
    RayPlaneError,
    TargetSet,
    compute_targets,
)
from grounded_planner.geometry.synthetic import (
    Box,
    Cylinder,
    Panel,
    Scene,
    add_holes,
    look_at,
    random_camera_pose,
    realsense_camera,
    to_depth_units,
)
from grounded_planner.plan import GroundedAction, GroundedPlan, PlanError, Target

PLACE_WORLD = np.array([0.0, 0.02, 0.0])  # between the objects' cells, on the table


def _pick_and_place_plan(rendered, place_xy_px):
    acts = []
    for k, obj in enumerate(rendered.scene.objects):
        acts.append(GroundedAction("grasp", obj.name, bbox=rendered.scene.bbox_of(k, rendered.labels)))
        acts.append(GroundedAction("place", obj.name, target="table", point=place_xy_px))
    cam = rendered.camera
    return GroundedPlan("tidy up", (cam.width, cam.height), acts).validate()


def _angle_diff_deg(a: float, b: float) -> float:
    """Difference of two gripper yaws, which are the same modulo 180 deg."""
    d = math.degrees(a - b) % 180.0
    return min(d, 180.0 - d)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_grasp_points_lie_on_the_true_top_face_centres(seed):
    rendered = tabletop(seed)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    targets = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    assert targets.frame == BASE
    for k, obj in enumerate(rendered.scene.objects):
        grasp = targets.for_index(2 * k)
        assert grasp.type == "grasp" and grasp.object == obj.name and grasp.method == "top_surface"
        err_m = np.linalg.norm(grasp.position - obj.top_center(0.0))
        assert err_m < 0.01, f"seed {seed} {obj.name}: grasp point {grasp.position} is {err_m * 1000:.1f} mm off"
        assert np.dot(grasp.normal, [0, 0, 1]) > 0.999  # the table's normal, in the base frame
        assert 0.5 < grasp.confidence <= 1.0
        if isinstance(obj, Cylinder):
            assert grasp.width == pytest.approx(2 * obj.radius, abs=0.01)
        else:
            assert grasp.width == pytest.approx(min(obj.size[:2]), abs=0.01)


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_grasp_yaw_follows_the_short_side_of_elongated_objects(seed):
    rendered = tabletop(seed, elongated_only=True)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    targets = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    for k, obj in enumerate(rendered.scene.objects):
        assert obj.size[0] / obj.size[1] > 1.7
        yaw = targets.for_index(2 * k).yaw
        assert -math.pi / 2 < yaw <= math.pi / 2
        assert _angle_diff_deg(yaw, obj.closing_yaw()) < 5.0, f"{obj.name}: yaw {math.degrees(yaw):.1f} deg"


@pytest.mark.parametrize("seed", [20, 21, 22])
def test_square_blocks_are_grasped_across_their_sides_not_their_diagonal(seed):
    # a square's footprint has the same spread in every direction, so its principal axes say nothing: a 22 mm SO-101
    # block turned 20 deg got jaws closing near its diagonal (31 mm) and slipped out. Its narrowest width is across
    # its sides: the yaw is one of the side directions (they are the same grasp modulo 90 deg)
    rng = np.random.default_rng(seed)
    cells = [(-0.12, -0.12), (-0.12, 0.12), (0.12, -0.12), (0.12, 0.12)]
    yaws = rng.uniform(-math.pi / 4, math.pi / 4, size=4)
    sides = [0.022, 0.03, 0.04, 0.05]
    boxes = [
        Box(f"cube{k}", (cx + rng.uniform(-0.02, 0.02), cy + rng.uniform(-0.02, 0.02)), (a, a, a), yaw)
        for k, ((cx, cy), a, yaw) in enumerate(zip(cells, sides, yaws))
    ]
    scene = Scene(realsense_camera(640, 480), random_camera_pose(rng), boxes)
    clean, labels = scene.render()
    units = to_depth_units(add_holes(clean, rng, 10, 4), rng, 0.001)
    rendered = RenderedScene(scene, units * 0.001, labels, units)
    plan = _pick_and_place_plan(rendered, scene.pixel_of(PLACE_WORLD))
    targets = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    for k, box in enumerate(boxes):
        grasp = targets.for_index(2 * k)
        off_side = math.degrees(grasp.yaw - box.yaw) % 90.0
        off_side = min(off_side, 90.0 - off_side)
        assert off_side < 8.0, f"{box.name} ({box.size[0] * 1000:.0f} mm, yaw {math.degrees(box.yaw):.0f} deg): " + (
            f"jaws {off_side:.0f} deg off its sides"
        )
        assert grasp.width == pytest.approx(box.size[0], abs=0.006)  # across the sides, not the diagonal
        # of its two sides, the jaws close along the line from the base out to it (the way a reach errs)
        reach = math.atan2(grasp.position[1], grasp.position[0])
        along = min((box.yaw, box.yaw + math.pi / 2), key=lambda side: _angle_diff_deg(side, reach))
        assert _angle_diff_deg(grasp.yaw, along) < 8.0, f"{box.name}: closing not along the reach"
    assert any("nearly round" in w and "narrowest" in w for w in targets.warnings)


def test_place_uses_depth_and_falls_back_to_the_support_plane_in_a_hole():
    rendered = tabletop(4, n_holes=0)
    x, y = rendered.scene.pixel_of(PLACE_WORLD)
    # The true target: the place pixel's ray meets the table plane z = 0.
    o = rendered.cam2base.translation
    ray = rendered.scene.ray_world(x, y)
    truth = o + ray * (-o[2] / ray[2])
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "box0", bbox=rendered.scene.bbox_of(0, rendered.labels)),
            GroundedAction("place", "box0", point=(x, y)),
        ],
    )
    with_depth = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base).for_index(1)
    assert with_depth.method == "depth"
    assert np.linalg.norm(with_depth.position - truth) < 0.005

    u, v = int(x), int(y)
    # A hole around the place pixel: the table around the hole; a hole larger than every window: the support plane.
    for half, method in ((15, "ray_local_plane"), (45, "ray_plane")):
        holed = rendered.depth_m.copy()
        holed[v - half : v + half + 1, u - half : u + half + 1] = 0.0
        result = compute_targets(plan, holed, rendered.camera, rendered.cam2base)
        place = result.for_index(1)
        assert place.method == method
        assert np.linalg.norm(place.position - truth) < 0.005, (
            f"{method}: {np.linalg.norm(place.position - truth) * 1000:.2f} mm"
        )
        assert place.yaw is None and place.width is None and place.object == "box0"
        assert any("action 1 (place)" in w for w in result.warnings)


def test_place_in_a_hole_on_top_of_a_box_lands_on_the_box_not_the_table():
    camera = realsense_camera(640, 480)
    cam2base = look_at([-0.5, 0.2, 0.6], [0.0, 0.0, 0.0], parent_frame=BASE)
    crate = Box("crate", (0.05, 0.0), (0.2, 0.16, 0.12), yaw=0.3)
    cube = Box("cube", (-0.15, 0.15), (0.04, 0.04, 0.04))
    scene = Scene(camera, cam2base, [crate, cube])
    depth, labels = scene.render()
    x, y = scene.pixel_of(crate.top_center(0.0))
    u, v = int(x), int(y)
    depth[v - 6 : v + 7, u - 6 : u + 7] = 0.0
    plan = GroundedPlan(
        "put the cube on the crate",
        (640, 480),
        [GroundedAction("grasp", "cube", bbox=scene.bbox_of(1, labels)), GroundedAction("place", "cube", point=(x, y))],
    )
    place = compute_targets(plan, depth, camera, cam2base).for_index(1)
    assert place.method == "ray_local_plane"
    assert np.linalg.norm(place.position - crate.top_center(0.0)) < 0.005


def test_a_taller_neighbour_in_a_loose_bbox_is_not_taken_for_the_object():
    camera = realsense_camera(640, 480)
    cam2base = look_at([-0.55, 0.0, 0.55], [0.0, 0.0, 0.0], parent_frame=BASE)
    small = Box("small", (0.0, 0.0), (0.06, 0.04, 0.04))
    tall = Box("tall", (0.0, 0.085), (0.1, 0.1, 0.15))  # 1.5 cm beside it, big in the image
    scene = Scene(camera, cam2base, [small, tall])
    depth, labels = scene.render()
    x1, y1, x2, y2 = scene.bbox_of(0, labels)
    grow = 1.0 * (x2 - x1)  # a loose box: holds more of the neighbour than of the object
    bbox = (max(0.0, x1 - grow), max(0.0, y1 - grow), min(640.0, x2 + grow), min(480.0, y2 + grow))
    assert (labels[int(bbox[1]) : int(bbox[3]), int(bbox[0]) : int(bbox[2])] == 2).sum() > (
        labels[int(bbox[1]) : int(bbox[3]), int(bbox[0]) : int(bbox[2])] == 1
    ).sum()
    plan = GroundedPlan(
        "x",
        (640, 480),
        [GroundedAction("grasp", "small", bbox=bbox), GroundedAction("place", "small", point=(320.0, 450.0))],
    )
    grasp = compute_targets(plan, depth, camera, cam2base).for_index(0)
    assert np.linalg.norm(grasp.position - small.top_center(0.0)) < 0.01


def test_distorted_high_resolution_camera_still_hits_the_targets():
    # Rays of the renderer come from OpenCV's undistortion, the targets from CameraModel's own.
    rendered = tabletop(5, width=1280, height=720, D=(-0.06, 0.09, 0.0012, -0.0008, -0.03))
    x, y = rendered.scene.pixel_of(PLACE_WORLD)
    plan = _pick_and_place_plan(rendered, (x, y))
    targets = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    for k, obj in enumerate(rendered.scene.objects):
        assert np.linalg.norm(targets.for_index(2 * k).position - obj.top_center(0.0)) < 0.01
    # pixel_of ignores distortion, so compare with where the depth-derived place point really lies: on the table.
    assert abs(targets.for_index(1).position[2]) < 0.003


def test_plan_in_a_smaller_image_is_rescaled_to_the_depth_image():
    rendered = tabletop(6)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    half = GroundedPlan(
        "x",
        (320, 240),
        [
            GroundedAction(
                a.type,
                a.object,
                bbox=None if a.bbox is None else tuple(v / 2 for v in a.bbox),
                point=None if a.point is None else tuple(v / 2 for v in a.point),
            )
            for a in plan.actions
        ],
    )
    full = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    scaled = compute_targets(half, rendered.depth_m, rendered.camera, rendered.cam2base)
    assert any("rescaled" in w for w in scaled.warnings)
    for a, b in zip(full.targets, scaled.targets):
        assert np.linalg.norm(a.position - b.position) < 1e-9


def test_without_extrinsics_targets_are_in_the_optical_frame():
    rendered = tabletop(7)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    in_base = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    in_cam = compute_targets(plan, rendered.depth_m, rendered.camera)
    assert in_cam.frame == "camera_color_optical_frame"
    for a, b in zip(in_base.targets, in_cam.targets):
        # Without "up" from extrinsics the support plane is the dominant plane: the same table.
        assert np.linalg.norm(rendered.cam2base.transform_points(b.position)[0] - a.position) < 0.003
        assert b.position[2] > 0.3  # in front of the camera


def test_open_and_close_give_the_handle_point_and_the_outward_normal():
    camera = realsense_camera(640, 480)
    cam2base = look_at([0.0, -0.1, 0.55], [0.7, 0.05, 0.25], parent_frame=BASE)
    drawer = Panel("drawer", (0.7, 0.0, 0.2), (-1.0, 0.15), 0.4, 0.2)  # front faces the camera, slightly turned
    scene = Scene(camera, cam2base, [drawer], table_extent=(-0.5, 1.5, -1.0, 1.0))
    depth, labels = scene.render()
    bbox = scene.bbox_of(0, labels, pad_px=-8)  # a box inside the front
    plan = GroundedPlan(
        "open the drawer",
        (640, 480),
        [GroundedAction("open", "drawer", bbox=bbox), GroundedAction("close", "drawer", bbox=bbox)],
    )
    targets = compute_targets(plan, depth, camera, cam2base)
    cx, cy = (bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2
    o, ray = cam2base.translation, scene.ray_world(cx, cy)
    truth = o + ray * (((np.asarray(drawer.center) - o) @ drawer.normal) / (ray @ drawer.normal))
    for index in (0, 1):
        t = targets.for_index(index)
        assert t.method == "ray_surface_plane"
        assert np.linalg.norm(t.position - truth) < 0.005
        assert math.degrees(math.acos(min(1.0, t.normal @ drawer.normal))) < 2.0  # outward: pull along +normal


def test_open_finds_the_handle_on_a_cabinet_front_seen_from_above():
    # A cabinet (front facing -x, towards the camera) with a bar handle 3 cm proud of the front, in a loose bbox
    # that also holds the cabinet's top and the table, as a VLM's box around "the drawer" would.
    camera = realsense_camera(640, 480)
    cam2base = look_at([-0.45, -0.2, 0.6], [0.3, 0.0, 0.08], parent_frame=BASE)
    cabinet = Box("cabinet", (0.35, 0.0), (0.3, 0.4, 0.25))
    front_x = 0.35 - 0.15
    handle = Box("handle", (front_x - 0.015, 0.0), (0.03, 0.14, 0.02), base_z=0.15)
    scene = Scene(camera, cam2base, [cabinet, handle])
    clean, labels = scene.render()
    rng = np.random.default_rng(0)
    depth = np.round((clean + rng.normal(0, 0.001, clean.shape) * (clean > 0)) * 1000) / 1000
    cab = scene.bbox_of(0, labels)
    plan = GroundedPlan("open the drawer", (640, 480), [GroundedAction("open", "drawer", bbox=cab)])
    target = compute_targets(plan, depth, camera, cam2base).for_index(0)
    grip_face_centre = np.array([front_x - 0.03, 0.0, 0.16])
    assert target.method == "handle"
    assert np.linalg.norm(target.position - grip_face_centre) < 0.01, target.position
    assert math.degrees(math.acos(min(1.0, target.normal @ [-1.0, 0.0, 0.0]))) < 2.0


def test_flat_object_is_grasped_at_its_centre_on_the_table():
    camera = realsense_camera(640, 480)
    cam2base = look_at([-0.5, 0.1, 0.6], [0.0, 0.0, 0.0], parent_frame=BASE)
    card = Box("card", (0.02, -0.03), (0.09, 0.055, 0.003), yaw=0.5)  # 3 mm: below the support margin
    scene = Scene(camera, cam2base, [card])
    depth, labels = scene.render()
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "card", bbox=scene.bbox_of(0, labels)),
            GroundedAction("place", "card", point=(320.0, 400.0)),
        ],
    )
    result = compute_targets(plan, np.round(depth * 1000) / 1000, camera, cam2base)
    grasp = result.for_index(0)
    assert grasp.method == "flat_on_support"
    assert np.linalg.norm(grasp.position - card.top_center(0.0)) < 0.01
    assert grasp.confidence < 0.5 and any("used flat_on_support" in w for w in result.warnings)


def test_without_any_plane_the_grasp_falls_back_to_the_bbox_centre():
    camera = realsense_camera(640, 480)
    rng = np.random.default_rng(0)
    depth = rng.uniform(0.5, 1.5, (480, 640))  # no plane holds 5 % of these points
    depth[200:280, 280:360] = 0.8
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "thing", bbox=(270.0, 190.0, 370.0, 290.0)),
            GroundedAction("place", "thing", point=(100.0, 100.0)),
        ],
    )
    result = compute_targets(plan, depth, camera)
    grasp = result.for_index(0)
    assert grasp.method == "bbox_center"
    np.testing.assert_allclose(grasp.position, camera.deproject([319.5], [239.5], [0.8])[0], atol=1e-9)
    assert any("no support plane" in w for w in result.warnings)
    assert result.for_index(1).method == "depth"  # the place pixel has depth; no plane is needed


def test_target_set_json_round_trip_is_the_backproject_schema():
    rendered = tabletop(8)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    targets = compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    data = targets.to_dict()
    assert list(data) == ["frame", "targets", "warnings"]
    assert [t["index"] for t in data["targets"]] == list(range(len(plan.actions)))
    for t in data["targets"]:
        assert list(t) == ["index", "type", "object", "position", "yaw", "width", "normal", "method", "confidence"]
    back = TargetSet.from_dict(data)
    assert back.to_dict() == data
    # The same targets travel inside the plan, each naming its frame, and come back out unchanged.
    located = plan.with_targets(targets)
    assert [a.target_3d.frame for a in located.actions] == [BASE] * len(plan.actions)
    assert located.target_set().to_dict() == {**data, "warnings": located.warnings}
    assert GroundedPlan.from_json(located.to_json()).target_set().to_dict() == located.target_set().to_dict()
    assert plan.actions[0].target_3d is None  # with_targets copies; the pixel plan stays as it was
    # Same input, same output (RANSAC is seeded).
    assert compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base).to_dict() == data


# -- typed errors ---------------------------------------------------------------------------------


def test_no_valid_depth_in_the_box_names_the_action():
    rendered = tabletop(9)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    depth = rendered.depth_m.copy()
    x1, y1, x2, y2 = (int(v) for v in plan.actions[2].bbox)
    depth[y1 : y2 + 1, x1 : x2 + 1] = 0.0
    with pytest.raises(NoValidDepthError) as info:
        compute_targets(plan, depth, rendered.camera, rendered.cam2base)
    assert info.value.index == 2 and info.value.action == "grasp" and info.value.rule == "no_valid_depth"
    assert str(info.value).startswith("action 2 (grasp): no valid depth in bbox")


def test_place_ray_parallel_to_the_table_is_refused():
    camera = realsense_camera(640, 480)
    cam2base = look_at([0.0, 0.0, 0.4], [1.0, 0.0, 0.4], parent_frame=BASE)  # level camera: horizon mid-image
    scene = Scene(camera, cam2base, [Box("box", (0.8, 0.0), (0.1, 0.05, 0.05))], table_extent=(0.2, 3.0, -2.0, 2.0))
    depth, labels = scene.render()
    horizon = (camera.cx + 0.5, camera.cy + 0.5)
    plan = GroundedPlan(
        "x",
        (640, 480),
        [GroundedAction("grasp", "box", bbox=scene.bbox_of(0, labels)), GroundedAction("place", "box", point=horizon)],
    )
    with pytest.raises(RayPlaneError) as info:
        compute_targets(plan, depth, camera, cam2base)
    assert info.value.index == 1 and info.value.action == "place" and info.value.rule == "ray_parallel"
    above = GroundedPlan("x", (640, 480), [plan.actions[0], GroundedAction("place", "box", point=(320.0, 60.0))])
    with pytest.raises(RayPlaneError) as info:
        compute_targets(above, depth, camera, cam2base)
    assert info.value.rule == "plane_behind_camera"


def test_box_outside_the_image_is_refused():
    rendered = tabletop(9)
    plan = GroundedPlan(
        "x",
        (640, 480),
        [
            GroundedAction("grasp", "box", bbox=(600.0, 400.0, 700.0, 470.0)),
            GroundedAction("place", "box", point=(100.0, 100.0)),
        ],
    )
    with pytest.raises(OutsideImageError) as info:
        compute_targets(plan, rendered.depth_m, rendered.camera, rendered.cam2base)
    assert info.value.index == 0 and info.value.action == "grasp" and info.value.rule == "outside_image"
    assert "640x480" in str(info.value)


def test_depth_image_and_frames_must_match_the_camera():
    rendered = tabletop(9)
    plan = _pick_and_place_plan(rendered, rendered.scene.pixel_of(PLACE_WORLD))
    with pytest.raises(GeometryError, match="depth image is 320x240 but the camera model is 640x480"):
        compute_targets(plan, rendered.depth_m[::2, ::2], rendered.camera, rendered.cam2base)
    wrong = Extrinsics(BASE, "other_camera_frame", [0, 0, 1], [0, 0, 0, 1])
    with pytest.raises(ExtrinsicsError, match="other_camera_frame"):
        compute_targets(plan, rendered.depth_m, rendered.camera, wrong)


def test_malformed_target_json_and_config_are_refused():
    with pytest.raises(PlanError, match="'frame'"):
        TargetSet.from_dict({"targets": []})
    with pytest.raises(PlanError, match="invalid target") as info:
        TargetSet.from_dict({"frame": "base", "targets": [{"index": 0, "type": "grasp", "position": [1, 2]}]})
    assert info.value.rule == "target_format"
    # a hand-edited file with the wrong JSON shape names the field instead of dying of an AttributeError
    with pytest.raises(PlanError, match=r"field 'targets' must be a JSON list, got dict") as info:
        TargetSet.from_dict({"frame": "base", "targets": {"index": 0, "type": "grasp", "position": [1, 2, 3]}})
    assert info.value.rule == "target_format"
    with pytest.raises(PlanError, match=r"field 'targets\[1\]' must be a JSON object, got str 'grasp'"):
        TargetSet.from_dict(
            {"frame": "base", "targets": [{"index": 0, "type": "grasp", "position": [1, 2, 3]}, "grasp"]}
        )
    with pytest.raises(PlanError, match=r"field 'warnings' must be a JSON list, got str"):
        TargetSet.from_dict({"frame": "base", "targets": [], "warnings": "low depth"})
    with pytest.raises(PlanError, match="a target must be a JSON object .* got str"):
        Target.from_dict("grasp", "base")
    with pytest.raises(ValueError, match="min_depth_m < max_depth_m"):
        TargetConfig(min_depth_m=2.0, max_depth_m=1.0)
    with pytest.raises(ValueError, match="place_window_px must be a positive odd number"):
        TargetConfig(place_window_px=4)
