"""Back-projection against numbers worked out by hand, with a camera that lets no mix-up hide: fx != fy (by 15 %),
a principal point 20 px off the centre, a non-square 800x450 image, and a plan made on a 1600x900 copy.

Plan coordinates are continuous (the centre of pixel (i, j) is (i + 0.5, j + 0.5)); the depth image is a flat
table 1.2 m away, so a place point's target is exactly its ray times 1.2 m. Tolerances are 0.1 mm where the code
promises a pixel-exact answer: half a pixel here is 1 mm or more, so a forgotten half-pixel shift fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from grounded_planner.geometry import CameraModel, Extrinsics, compute_targets
from grounded_planner.plan import GroundedAction, GroundedPlan

W, H = 800, 450
FX, FY, CX, CY = 560.0, 644.0, 380.5, 245.25
CAMERA = CameraModel(W, H, [[FX, 0.0, CX], [0.0, FY, CY], [0.0, 0.0, 1.0]], frame_id="camera_color_optical_frame")
TABLE_M = 1.2
TIGHT_M = 1e-4


def expected_point(u_plan: float, v_plan: float, depth_m: float, scale: float = 1.0) -> np.ndarray:
    """Written out: plan coordinates -> depth pixel (scaled, centres at +0.5) -> optical-frame point."""
    u, v = u_plan * scale - 0.5, v_plan * scale - 0.5
    return np.array([(u - CX) / FX * depth_m, (v - CY) / FY * depth_m, depth_m])


def place_plan(point, size=(W, H)) -> GroundedPlan:
    return GroundedPlan(
        "x",
        size,
        [GroundedAction("grasp", "cup", bbox=(10, 10, 40, 40)), GroundedAction("place", "cup", "mat", point=point)],
    )


def flat_table() -> np.ndarray:
    return np.full((H, W), TABLE_M)


def test_the_camera_reports_its_own_intrinsics():
    assert (CAMERA.fx, CAMERA.fy, CAMERA.cx, CAMERA.cy) == (FX, FY, CX, CY)


@pytest.mark.parametrize("u, v", [(0.0, 0.0), (799.0, 449.0), (CX, CY), (700.25, 30.75), (12.5, 400.0)])
def test_deproject_and_project_follow_the_pinhole_formula(u, v):
    point = CAMERA.deproject(np.array([u]), np.array([v]), np.array([2.0]))[0]
    assert point == pytest.approx([(u - CX) / FX * 2.0, (v - CY) / FY * 2.0, 2.0], abs=1e-12)
    assert CAMERA.project(point[None])[0] == pytest.approx([u, v], abs=1e-9)


def test_the_depth_image_deprojects_pixel_by_pixel_with_fx_and_fy_apart():
    depth = np.full((H, W), 1.5)
    cloud = CAMERA.deproject_image(depth)
    assert cloud.shape == (H, W, 3)
    assert cloud[0, W - 1] == pytest.approx([(W - 1 - CX) / FX * 1.5, (0 - CY) / FY * 1.5, 1.5], abs=1e-12)
    assert cloud[H - 1, 0] == pytest.approx([(0 - CX) / FX * 1.5, (H - 1 - CY) / FY * 1.5, 1.5], abs=1e-12)


@pytest.mark.parametrize("point", [(760.5, 20.5), (30.0, 420.0), (400.0, 225.0), (700.25, 300.75)])
def test_a_place_point_lands_on_its_own_ray_to_a_tenth_of_a_millimetre(point):
    targets = compute_targets(place_plan(point), flat_table(), CAMERA)
    assert targets.frame == "camera_color_optical_frame"
    assert targets.targets[1].position == pytest.approx(expected_point(*point, TABLE_M), abs=TIGHT_M)
    # half a pixel is far more than the tolerance here, so the +0.5 pixel-centre convention is what is checked
    half_px = np.linalg.norm(expected_point(point[0] + 0.5, point[1], TABLE_M) - expected_point(*point, TABLE_M))
    assert half_px > 10 * TIGHT_M


def test_a_plan_made_on_a_larger_copy_is_rescaled_to_the_depth_image():
    point = (1520.0, 61.0)  # on the 1600x900 copy the model saw: (760, 30.5) in the depth image
    targets = compute_targets(place_plan(point, size=(2 * W, 2 * H)), flat_table(), CAMERA)
    assert targets.targets[1].position == pytest.approx(expected_point(*point, TABLE_M, scale=0.5), abs=TIGHT_M)
    assert any("plan pixels rescaled" in w for w in targets.warnings)


def test_a_plan_on_a_copy_of_another_aspect_is_rescaled_per_axis():
    point = (380.0, 225.0)  # on a 400x300 copy: x * 2, y * 1.5
    targets = compute_targets(place_plan(point, size=(400, 300)), flat_table(), CAMERA)
    u, v = 380.0 * 2 - 0.5, 225.0 * 1.5 - 0.5
    assert targets.targets[1].position == pytest.approx(
        [(u - CX) / FX * TABLE_M, (v - CY) / FY * TABLE_M, TABLE_M], abs=TIGHT_M
    )


def test_a_grasp_box_on_a_raised_block_centres_on_the_block_top():
    # a 0.1 m block (its top 1.1 m from the camera) on pixels [300, 500) x [150, 300)
    depth = flat_table()
    depth[150:300, 300:500] = 1.1
    plan = GroundedPlan(
        "x",
        (W, H),
        [
            GroundedAction("grasp", "block", bbox=(300.0, 150.0, 500.0, 300.0)),
            GroundedAction("place", "block", "mat", point=(100.0, 100.0)),
        ],
    )
    grasp = compute_targets(plan, depth, CAMERA).targets[0]
    centre = expected_point(400.0, 225.0, 1.1)  # the centre of the box's pixel centres, on the top face
    assert grasp.position == pytest.approx(centre, abs=1e-3)
    # its width across the short side: 150 px at 1.1 m over fy (the box's height in the image is along y)
    assert grasp.width == pytest.approx(150 / FY * 1.1, rel=0.05)


def test_extrinsics_move_the_targets_into_the_base_frame_exactly():
    # camera 1.2 m above the base origin looking down: optical x -> base x, optical y -> base -y, z -> -z
    cam2base = Extrinsics.from_matrix(
        np.array([[1.0, 0.0, 0.0, 0.4], [0.0, -1.0, 0.0, 0.1], [0.0, 0.0, -1.0, 1.2], [0.0, 0.0, 0.0, 1.0]]),
        "base",
        "camera_color_optical_frame",
    )
    targets = compute_targets(place_plan((700.25, 300.75)), flat_table(), CAMERA, cam2base)
    x, y, z = expected_point(700.25, 300.75, TABLE_M)
    assert targets.frame == "base"
    assert targets.targets[1].position == pytest.approx([0.4 + x, 0.1 - y, 1.2 - z], abs=TIGHT_M)


def test_a_point_on_the_image_edge_is_inside_and_a_hair_past_it_is_not():
    from grounded_planner.geometry.errors import OutsideImageError

    for point in [(float(W), float(H)), (0.0, 0.0)]:  # the parser clips points onto the edge: they must be usable
        targets = compute_targets(place_plan(point), flat_table(), CAMERA)
        assert targets.targets[1].position == pytest.approx(expected_point(*point, TABLE_M), abs=TIGHT_M)
    for point in [(W + 0.01, 10.0), (10.0, -0.01)]:
        with pytest.raises(OutsideImageError) as info:
            compute_targets(place_plan(point), flat_table(), CAMERA)
        assert info.value.index == 1 and f"{W}x{H} depth image" in str(info.value)


@pytest.mark.parametrize(
    "name, model, kept",
    [
        ("Brown Conrady", "plumb_bob", 5),
        ("Modified Brown Conrady", "plumb_bob", 5),
        ("Inverse Brown Conrady", "plumb_bob", 5),
        ("Kannala Brandt4", "equidistant", 4),
        ("None", "plumb_bob", 0),
        ("plumb_bob", "plumb_bob", 5),
        ("equidistant", "equidistant", 4),
        ("rational_polynomial", "rational_polynomial", 8),
    ],
)
def test_librealsense_distortion_names_map_to_ros_models(name, model, kept):
    coefficients = [0.01 * (i + 1) for i in range(8 if model == "rational_polynomial" else 5)]
    if model == "equidistant":  # librealsense writes five with the fifth 0; ROS writes four
        coefficients = coefficients[:4] + ([0.0] if name == "Kannala Brandt4" else [])
    camera = CameraModel(640, 480, [[600.0, 0.0, 320.0], [0.0, 600.0, 240.0], [0.0, 0.0, 1.0]], coefficients, name)
    assert camera.distortion_model == model
    assert int((camera.D != 0).sum()) == kept
