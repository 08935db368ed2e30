"""SO-101 inverse kinematics on the real SO-101 URDF (placo): reachable poses within 2 mm, unreachable ones reported."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("placo")

from grounded_planner.execution.so101_kinematics import (
    ARM_JOINTS,
    KinematicsError,  # noqa: E402
    So101Kinematics,
    closing_yaw,
    default_so101_urdf,
)

try:
    default_so101_urdf()
except KinematicsError as exc:  # pragma: no cover - make setup installs it
    pytest.skip(f"SO-101 URDF not installed: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def kin() -> So101Kinematics:
    return So101Kinematics(max_tilt_deg=10.0)


def tilt_deg(T: np.ndarray) -> float:
    return math.degrees(math.acos(max(-1.0, min(1.0, -T[2, 2]))))


def jaw_closing_direction(kin: So101Kinematics, joints_rad) -> np.ndarray:
    """Unit vector along which the moving jaw closes, from the URDF itself: the jaw's rotation axis (the
    `gripper` joint, z of its child link) crossed with the approach direction (tip z)."""
    kin.forward(joints_rad)
    jaw = np.array(kin.robot.get_T_world_frame("moving_jaw_so101_v1_link"))
    tip = np.array(kin.robot.get_T_world_frame("gripper_frame_link"))
    direction = np.cross(jaw[:3, 2], tip[:3, 2])
    return direction / np.linalg.norm(direction)


def downward_poses(kin: So101Kinematics, count: int, seed: int = 0) -> list[tuple[np.ndarray, float]]:
    """Poses known to be reachable: forward kinematics of random joints whose wrist_flex makes the tool vertical."""
    rng = np.random.default_rng(seed)
    poses = []
    while len(poses) < count:
        q = np.array([rng.uniform(*kin.limits_rad[j]) * 0.8 for j in ARM_JOINTS])
        flex = np.linspace(*kin.limits_rad["wrist_flex"], 400)
        tilts = []
        for f in flex:
            q[3] = f
            tilts.append(tilt_deg(kin.forward(q)))
        q[3] = flex[int(np.argmin(tilts))]
        T = kin.forward(q)
        # keep vertical tools above the table, in front of the base
        if tilt_deg(T) < 0.5 and T[2, 3] > 0.0 and T[0, 3] > 0.1:
            poses.append((T[:3, 3].copy(), closing_yaw(T)))
    return poses


def test_reachable_poses_are_reached_within_2_mm(kin):
    poses = downward_poses(kin, 12)
    for position, yaw in poses:
        solution = kin.solve(position, yaw)
        assert solution.reachable, (position, yaw, solution.reason)
        T = kin.forward(solution.joints_rad)
        assert np.linalg.norm(T[:3, 3] - position) < 0.002
        assert tilt_deg(T) <= kin.max_tilt_deg
        # the closing axis has the asked yaw (a parallel gripper is the same turned by pi)
        diff = (closing_yaw(T) - yaw) % math.pi
        assert min(diff, math.pi - diff) < math.radians(3)
        # and that axis is where the URDF's jaw really closes: backend yaw 0 = along base y
        closing = jaw_closing_direction(kin, solution.joints_rad)
        expected = np.array([-math.sin(yaw), math.cos(yaw), 0.0])
        assert abs(float(closing @ expected)) > math.cos(math.radians(5))
        for name, q in zip(ARM_JOINTS, solution.joints_rad):
            lo, hi = kin.limits_rad[name]
            assert lo - 1e-6 <= q <= hi + 1e-6


@pytest.mark.parametrize("position", [(0.60, 0.0, 0.05), (0.0, 0.0, 0.60), (0.25, 0.0, -0.40)])
def test_unreachable_poses_are_reported_with_the_reason(kin, position):
    solution = kin.solve(position, 0.0)
    assert not solution.reachable
    assert "mm from the goal" in solution.reason
    assert solution.position_error_m > 0.002


def test_safety_joint_limits_make_poses_unreachable():
    free = So101Kinematics(max_tilt_deg=10.0)
    position = np.array([0.18, 0.12, 0.03])  # needs the shoulder turned by about 0.6 rad
    assert free.solve(position, 0.0).reachable
    pinned = So101Kinematics(joint_limits_rad={"shoulder_pan": (-0.1, 0.1)}, max_tilt_deg=10.0)
    solution = pinned.solve(position, 0.0)
    assert not solution.reachable
    assert abs(solution.joints_rad[0]) <= 0.1 + 1e-6


def test_tilt_limit_decides_near_the_top_of_the_workspace():
    # 0.12 m up, the tool cannot be vertical (wrist limit): only a tilted tool reaches it
    strict, relaxed = So101Kinematics(max_tilt_deg=5.0), So101Kinematics(max_tilt_deg=35.0)
    position = (0.22, 0.0, 0.12)
    s = strict.solve(position, 0.0)
    assert not s.reachable
    assert "tilt" in s.reason or "mm from the goal" in s.reason
    r = relaxed.solve(position, 0.0)
    assert r.reachable, r.reason
    assert np.linalg.norm(relaxed.forward(r.joints_rad)[:3, 3] - position) < 0.002


def test_missing_urdf_is_a_typed_error(tmp_path):
    with pytest.raises(KinematicsError, match="URDF not found"):
        So101Kinematics(tmp_path / "nope.urdf")
