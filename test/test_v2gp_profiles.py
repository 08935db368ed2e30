"""V2GP robot profiles: every embodiment the issue names has one, with its sources; each finds its gripper
element(s) by name in the layout its datasets use, never a position or orientation element."""

from __future__ import annotations

import pytest

from grounded_planner.v2gp.errors import DatasetError
from grounded_planner.v2gp.grippers import find_grippers
from grounded_planner.v2gp.profiles import PROFILES, ROBOT_PROFILES, config_for_robot, profile_for_robot_type


@pytest.mark.parametrize(
    "robot_type, profile",
    [
        ("so100", "so101"),
        ("so101_follower", "so101"),
        ("so101_leader", "so101"),
        ("so100_leader", "so101"),
        ("bi_so100_follower", "bi_so101"),
        ("koch", "koch"),
        ("koch_follower", "koch"),
        ("aloha", "aloha"),
        ("mobile_aloha", "aloha"),
        ("piper", "piper"),
        ("agilex_piper_bimanual", "piper"),
        ("xarm", "xarm"),
        ("widowx", "widowx"),
        ("bridge", "widowx"),
        ("franka", "droid"),
        ("Franka", "droid"),
        ("droid", "droid"),
        ("ur5", "ur5"),
        ("ur5e", "ur5"),
        ("Unitree_G1_Inspire", "g1_inspire"),
        ("Unitree_G1_Dex3_Single_Cam", "g1_dex3"),
        ("realman", "realman"),
        ("reachy2", "reachy2"),
    ],
)
def test_the_issue_s_embodiments_have_a_profile(robot_type, profile):
    assert profile_for_robot_type(robot_type).name == profile


def test_every_profile_names_its_sources_and_builds_a_config():
    for p in PROFILES:
        assert p.sources and all(len(s) > 20 for s in p.sources), p.name
        assert p.grippers and p.units
        assert p.open_value is not None or p.closed_value is not None, p.name  # the polarity is known
        config = config_for_robot(p.name)
        if p.open_value is not None and p.closed_value is not None:
            assert (config.open_value, config.closed_value) == (p.open_value, p.closed_value)
    assert profile_for_robot_type("acme_arm") is None and profile_for_robot_type(None) is None
    assert set(ROBOT_PROFILES) >= {p.name for p in PROFILES} | {"default", "franka_finger"}


def _vector(names, key="names"):
    return {"dtype": "float32", "shape": [len(names)], key: names}


def test_aloha_layout_gives_both_grippers_and_their_commands():
    motors = {
        "motors": [
            f"{side}_{j}"
            for side in ("left", "right")
            for j in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
        ]
    }
    features = {"observation.state": _vector(motors), "action": _vector(motors), "observation.effort": _vector(motors)}
    channels, warnings = find_grippers(features, "aloha")
    assert [(c.hand, c.column, c.indices, c.command_indices) for c in channels] == [
        ("left", "observation.state", [6], [6]),
        ("right", "observation.state", [13], [13]),
    ]
    assert (channels[0].open_value, channels[0].closed_value) == (1.0, 0.0) and not warnings


def test_droid_layout_finds_the_scalar_gripper_position_and_its_action():
    features = {
        "observation.state.cartesian_position": {"dtype": "float32", "shape": [6], "names": None},
        "observation.state.gripper_position": {"dtype": "float32", "shape": [1], "names": None},
        "observation.state.joint_position": {"dtype": "float32", "shape": [7], "names": None},
        "action.gripper_position": {"dtype": "float32", "shape": [1], "names": None},
    }
    (ch,), _ = find_grippers(features, "franka")
    assert (ch.column, ch.indices, ch.command_column, ch.open_value, ch.closed_value) == (
        "observation.state.gripper_position",
        None,
        "action.gripper_position",
        0.0,
        1.0,
    )


def test_dex3_hands_combine_their_joints_by_the_mean_absolute_angle():
    hand = [
        f"k{s}Hand{f}"
        for s in ("Left", "Right")
        for f in ("Thumb0", "Thumb1", "Thumb2", "Middle0", "Middle1", "Index0", "Index1")
    ]
    names = [f"kLeftShoulder{i}" for i in range(7)] + [f"kRightShoulder{i}" for i in range(7)] + hand
    channels, _ = find_grippers({"observation.state": _vector([names])}, "Unitree_G1_Dex3_Single_Cam")
    assert [(c.hand, len(c.indices), c.combine) for c in channels] == [
        ("left", 7, "abs_mean"),
        ("right", 7, "abs_mean"),
    ]


def test_by_name_without_a_profile_skips_pose_and_orientation_elements():
    names = ["x", "y", "z", "gripper_quat_w", "left_ee_pos_x", "right_claw", "left_claw", "qw"]
    channels, _ = find_grippers({"state": _vector(names, "name")}, "acme_two_arm")
    assert sorted((c.hand, c.names[0]) for c in channels) == [("left", "left_claw"), ("right", "right_claw")]
    with pytest.raises(DatasetError, match="no element named like a gripper"):
        find_grippers({"observation.state": _vector(["x", "y", "z", "qx", "qy", "qz", "qw"])}, None)


def test_a_named_column_wins_over_the_profile():
    features = {
        "observation.state": _vector(["shoulder.pos", "gripper.pos"]),
        "action": _vector(["shoulder.pos", "gripper.pos"]),
    }
    (ch,), _ = find_grippers(features, "so101_follower", spec="observation.state[0]")
    assert (ch.column, ch.indices, ch.command_indices) == ("observation.state", [0], [0])


def test_two_fingers_of_opposite_sign_do_not_cancel():
    import numpy as np

    from grounded_planner.v2gp.grippers import combine

    opening = np.r_[np.full(20, 0.04), np.linspace(0.04, 0.01, 10), np.full(20, 0.01)]
    fingers = np.c_[opening, -opening]  # LIBERO / robomimic: the two finger joints, +x and -x
    np.testing.assert_allclose(combine(fingers, "mean"), opening)
    inspire = np.c_[opening, opening + 0.01]  # same-sign fingers: their plain mean
    np.testing.assert_allclose(combine(inspire, "mean"), opening + 0.005)


def test_a_known_unnamed_layout_is_used_only_at_its_exact_length():
    unnamed = {
        "observation.state": {"dtype": "float32", "shape": [19], "names": None},
        "action": {"dtype": "float32", "shape": [19], "names": None},
    }
    channels, warnings = find_grippers(unnamed, "reachy2")
    assert [(ch.hand, ch.indices, ch.command_column, ch.command_indices) for ch in channels] == [
        ("left", [7], "action", [7]),
        ("right", [15], "action", [15]),
    ]
    assert any("no element names" in w for w in warnings)
    # another length, or names present, or another robot: no position is guessed
    for features, robot_type in (
        ({"observation.state": {"dtype": "float32", "shape": [24], "names": None}}, "reachy2"),
        (unnamed, "koch"),
    ):
        with pytest.raises(DatasetError, match="no element named like a gripper"):
            find_grippers(features, robot_type)
    named = {"observation.state": _vector(["neck_yaw.pos", "l_gripper.pos", "r_shoulder_pitch.pos", "r_gripper.pos"])}
    channels, _ = find_grippers(named, "reachy2")
    assert [(ch.hand, ch.names) for ch in channels] == [("left", ["l_gripper.pos"]), ("right", ["r_gripper.pos"])]
