"""V2GP stage 1, robot profiles: which column is a robot's gripper, its range and its polarity.

A profile is picked by the LeRobot ``robot_type`` of ``meta/info.json`` (or by ``--robot`` / ``robot:`` in the
config). Each names the gripper element(s) by a pattern over the feature's element names, the raw open and
closed values (the polarity and the stroke) and where that was read. The table with the sources is in
``docs/v2gp.md`` ("Robot profiles"). Levels are learned per episode in every profile (``levels: auto``): the raw
values give the polarity, the stroke (how far the gripper can move) and the closed end (where a closure on
nothing ends up); thresholds given by hand switch to the fixed rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grounded_planner.errors import InputError
from grounded_planner.v2gp.segment import SegmentConfig


@dataclass(frozen=True)
class RobotProfile:
    """One embodiment's gripper: element-name patterns per hand, raw range and polarity, sources."""

    name: str
    robot_types: tuple[str, ...]  # LeRobot robot_type values (lower case; a trailing * matches any suffix)
    # (hand label, regular expression over an element name) per gripper; several elements matching one hand's
    # pattern (the fingers of a dexterous hand) are averaged into one signal
    grippers: tuple[tuple[str, str], ...]
    open_value: float | None  # raw value of the fully open gripper (None: learned from the signal)
    closed_value: float | None  # raw value of the fully closed gripper (None: learned from the signal)
    units: str
    sources: tuple[str, ...]
    segment: dict = field(default_factory=dict)  # further SegmentConfig settings
    # how several elements of one hand make one signal: "mean" (same sign: normalised fingers), "abs_mean"
    # (joint angles of mixed sign, 0 = straight: the mean distance from straight grows as the hand closes)
    combine: str = "mean"
    # recorders that store the state without element names: (vector length, ((hand, element index), ...)) per
    # known layout; used only when the feature has no names and exactly that length (never a guess by position)
    unnamed: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = ()

    def matches(self, robot_type: str) -> bool:
        rt = robot_type.strip().lower()
        return any(rt == t or (t.endswith("*") and rt.startswith(t[:-1])) for t in self.robot_types)

    def segment_config(self, **overrides) -> SegmentConfig:
        values = {
            "open_value": self.open_value,
            "closed_value": self.closed_value,
            "levels": "auto",
            "prominence": 0.15,
            **self.segment,
        }
        values.update(overrides)
        return SegmentConfig(**values)


_GRIPPER = r"(^|[._/])(gripper|grip|claw|jaw)([._/]|pos|_joint|$)"
_LEFT = r"(^|[._/])(left|l)[._]"
_RIGHT = r"(^|[._/])(right|r)[._]"
LEROBOT = "github.com/huggingface/lerobot @7427f318"

PROFILES: tuple[RobotProfile, ...] = (
    RobotProfile(
        "so101",
        (
            "so100",
            "so101",
            "so100_follower",
            "so101_follower",
            "so_follower",
            "so100_leader",
            "so101_leader",
            "so_leader",
            "lekiwi",
            "lekiwi_client",
        ),
        (("", r"(^|[._])(arm_)?gripper(\.pos)?$"),),
        100.0,
        0.0,
        "LeRobot RANGE_0_100 (0 closed, 100 open)",
        (
            f"{LEROBOT} src/lerobot/robots/so_follower/so_follower.py:59 "
            '("gripper": Motor(6, "sts3215", MotorNormMode.RANGE_0_100)); lekiwi.py:65 the same',
            "test/fixtures/lerobot_so101_record_test (real: rests closed at 2-4, opens to 30-39)",
        ),
    ),
    RobotProfile(
        "bi_so101",
        (
            "bi_so100_follower",
            "bi_so101_follower",
            "bi_so_follower",
            "bi_so_leader",
            "dual_so101",
            "bi_so100",
            "bi_so101",
        ),
        (("left", r"^left_gripper(\.pos)?$"), ("right", r"^right_gripper(\.pos)?$")),
        100.0,
        0.0,
        "LeRobot RANGE_0_100 per arm (0 closed, 100 open)",
        (
            f"{LEROBOT} src/lerobot/robots/bi_so_follower/config_bi_so_follower.py (two so_follower arms, "
            "features prefixed left_ / right_)",
        ),
    ),
    RobotProfile(
        "koch",
        ("koch", "koch_follower", "koch_leader", "koch_bimanual", "omx_follower"),
        (("", r"(^|[._])gripper(\.pos)?$"),),
        100.0,
        0.0,
        "LeRobot RANGE_0_100 (0 closed, 100 open)",
        (
            f"{LEROBOT} src/lerobot/robots/koch_follower/koch_follower.py:59 "
            '("gripper": Motor(6, "xl330-m288", MotorNormMode.RANGE_0_100)); omx_follower.py:59 the same',
            "older Koch datasets store degrees: the values then lie outside 0..100 and the stroke is learned",
        ),
    ),
    RobotProfile(
        "aloha",
        ("aloha", "aloha_static", "aloha_mobile", "mobile_aloha", "aloha2", "aloha_sim*"),
        (("left", r"^left_gripper$|^left.*gripper"), ("right", r"^right_gripper$|^right.*gripper")),
        1.0,
        0.0,
        "normalised follower finger position (0 closed, 1 open)",
        (
            "github.com/tonyzhaozh/act constants.py: PUPPET_GRIPPER_POSITION_NORMALIZE_FN (0 = close, 1 = open), "
            "which the LeRobot ALOHA datasets (lerobot/aloha_*) store as left_gripper / right_gripper",
            "a LeRobot ALOHA dataset card (v2.0, robot_type aloha, 50 fps): observation.state / action / "
            "observation.effort names left_waist .. left_gripper, right_waist .. right_gripper",
        ),
    ),
    RobotProfile(
        "piper",
        ("piper", "piper_follower", "bi_piper_follower", "agilex_piper*", "cobot_magic"),
        (("left", r"^left.*gripper"), ("right", r"^right.*gripper"), ("", _GRIPPER)),
        None,
        0.0,
        "jaw opening (0 closed, larger open); m or mm depending on the recorder: stroke learned",
        (
            "github.com/richardSHkim/piper lerobot_robot_piper_follower/README.md (gripper.pos beside joint_1..6)",
            "AgileX PiPER SDK: gripper angle is the jaw opening, 0 = closed",
            "github.com/Livioni/Lerobot_Datasets README (its agilex_piper_bimanual LeRobot v3.0 example: "
            "observation.state left_joint_1..6, left_gripper, right_joint_1..6, right_gripper; the grippers are the "
            "total distance between the two fingers in metres)",
        ),
    ),
    RobotProfile(
        "xarm",
        ("xarm", "xarm5", "xarm6", "xarm7", "lite6", "uf850"),
        (("", _GRIPPER),),
        850.0,
        0.0,
        "xArm gripper position (0 closed, 850 open)",
        (
            "UFactory xArm-Python-SDK set_gripper_position: pulse 0 (closed) .. 850 (open); normalised recordings "
            "keep the polarity (the range check learns the stroke)",
        ),
    ),
    RobotProfile(
        "widowx",
        ("widowx", "widowx_250", "widowx250", "wx250s", "bridge", "bridge_orig", "widowxai*"),
        (("", _GRIPPER),),
        1.0,
        0.0,
        "Bridge gripper (0 closed, 1 open)",
        (
            "Bridge V2 / Open X-Embodiment bridge: state and action gripper 1 = open, 0 = closed "
            "(openvla prismatic/vla/datasets/rlds/oxe/transforms.py bridge transform keeps it)",
        ),
    ),
    RobotProfile(
        "droid",
        ("droid", "franka", "franka_droid", "droid_franka", "panda_droid"),
        (("", r"gripper_position$|(^|[._])gripper$"),),
        0.0,
        1.0,
        "Robotiq 2F-85 gripper_position (0 open, 1 closed)",
        (
            "DROID (Khazatsky et al. 2024) and its LeRobot port (cadene/droid_1.0.1, lerobot/droid_1.0.1): "
            "observation.state.gripper_position and action.gripper_position in 0 (open) .. 1 (closed), "
            "as issue #26 states",
            "readers of the port found by code search name its columns: observation.state.gripper_position, "
            "observation.state.cartesian_position, observation.state.joint_position, action.gripper_position, "
            "observation.images.exterior_1_left / wrist_left, language_instruction (one pins cadene/droid_1.0.1 "
            "@56b622ac); another checks the state gripper lies in [0, 1]",
        ),
        {"min_frames": 4},
    ),
    RobotProfile(
        "franka_width",
        ("panda", "fr3", "franka_fr3", "franka_panda"),
        (("", r"gripper|finger"),),
        0.08,
        0.0,
        "Franka Hand finger width (m): 0.08 open, 0 closed",
        ("Franka Hand datasheet: 80 mm stroke; franka_ros franka_gripper width",),
    ),
    RobotProfile(
        "ur5",
        ("ur5", "ur5e", "ur3", "ur10", "autolab_ur5", "ur5e_robotiq", "ur5_robotiq"),
        (("", _GRIPPER),),
        0.0,
        None,
        "Robotiq 2F-85 position request (0 open, 255 or 1 closed): stroke learned",
        (
            "Robotiq 2F-85 manual: position request 0x00 = open, 0xFF = closed; recorders scale it to 0..1 or "
            "keep 0..255",
        ),
    ),
    RobotProfile(
        "g1_inspire",
        ("unitree_g1_inspire*", "unitree_g1_right_inspire*", "g1_inspire*", "unitree_g1", "unitree_g1_brainco*"),
        (
            ("left", r"^kLeftHand(Pinky|Ring|Middle|Index)$|^left_hand_(pinky|ring|middle|index)"),
            ("right", r"^kRightHand(Pinky|Ring|Middle|Index)$|^right_hand_(pinky|ring|middle|index)"),
        ),
        1.0,
        0.0,
        "Inspire hand fingers, normalised (0 closed, 1 open); the hand = the mean of its four fingers",
        (
            "test/fixtures/lerobot_g1_inspire (real, github.com/YifanTian07/G1-policy-train, MIT): kRightHandPinky "
            "..Index rest at 0.45-0.8, open to 0.9-1.0 before the grasp, close part way on a bottle (0.4-0.7)",
            "github.com/unitreerobotics/avp_teleoperate: Inspire hand commands are normalised, 1 = open",
        ),
    ),
    RobotProfile(
        "g1_dex3",
        ("unitree_g1_dex3*", "g1_dex3*"),
        (("left", r"^kLeftHand(Thumb|Middle|Index)\d$"), ("right", r"^kRightHand(Thumb|Middle|Index)\d$")),
        0.0,
        None,
        "Dex3-1 finger joint angles (rad), mixed signs per joint (the hands are mirrored): the hand "
        "= the mean |angle| of its joints, 0 = straight fingers = open, stroke learned",
        (
            "github.com/MethdAI-Modinoid/any4lerobot README.md (Unitree_G1_Dex3_Single_Cam: kLeftHandThumb0.. "
            "kRightHandIndex1)",
            "Unitree Dex3-1 hand: joint limits of opposite sign on the left and right hands",
        ),
        combine="abs_mean",
    ),
    RobotProfile(
        "synthetic",
        ("synthetic_topdown",),
        (("", r"^gripper$"),),
        0.0,
        1.0,
        "this project's simulated gripper (0 open, 1 closed)",
        ("grounded_planner/v2gp/synthetic.py (v2gp synth writes it)",),
        {"levels": "fixed"},
    ),
    RobotProfile(
        "realman",
        ("realman", "realman_rm65", "realman_rm75", "rm65", "rm75"),
        (("right", r"^right_gripper(_joint)?$"), ("left", r"^left_gripper(_joint)?$"), ("", r"^gripper(_joint)?$")),
        None,
        0.0,
        "gripper joint (0 closed, larger open): stroke learned",
        (
            "RobotCoin realman dataset card (github: a LeRobot v2.1 card with states/actions of 30 elements: "
            "right_gripper_joint, left_gripper_joint, end-effector quaternions last)",
        ),
    ),
    RobotProfile(
        "reachy2",
        ("reachy2", "reachy_2", "reachy2_robot", "reachy"),
        (("left", r"^l_(arm_)?gripper(\.pos)?$"), ("right", r"^r_(arm_)?gripper(\.pos)?$")),
        None,
        0.0,
        "Reachy gripper joint (smaller = more closed; the raw open value, about 2.27 rad in the "
        "recordings read, is learned)",
        (
            f"{LEROBOT} src/lerobot/robots/reachy2/robot_reachy2.py (REACHY2_L_ARM_JOINTS / REACHY2_R_ARM_JOINTS: "
            "l_gripper.pos, r_gripper.pos after each arm's seven joints)",
            "Pollen Robotics' Reachy recorders (found by code search: '# qpos (8dof per arm + neck) -> 16 + 3 = 19': "
            "the left arm's 7 joints and l_gripper, the right arm's and r_gripper, the neck's 3; their gym env "
            "lists l_arm_shoulder_pitch .. l_gripper, r_arm_shoulder_pitch .. r_gripper), the layout of Pollen's "
            "LeRobot v2.0 datasets that store observation.state / action with names null",
            "test/fixtures/lerobot_reachy2_apple_storage (real, Apache-2.0): element 15 rests open at 2.27, holds "
            "an apple at 1.3-1.6 while its command (action 15) goes to -0.09; element 7 stays at 2.27",
        ),
        unnamed=((19, (("left", 7), ("right", 15))),),
    ),
)

# the profiles by name, as --robot and ``robot:`` name them; "default" (0..1, 1 closed, fixed thresholds) and
# "franka_finger" (a rollout's finger joint) keep the settings stage 1 had before the profiles
ROBOT_PROFILES: dict[str, dict] = {
    "default": {"levels": "fixed"},
    "franka_finger": {
        "open_value": 0.04,
        "closed_value": 0.0,
        "close_threshold": 0.4,
        "open_threshold": 0.15,
        "levels": "fixed",
    },
}
for _p in PROFILES:
    ROBOT_PROFILES[_p.name] = {
        "open_value": _p.open_value,
        "closed_value": _p.closed_value,
        "levels": "auto",
        "prominence": 0.15,
        **_p.segment,
    }
ROBOT_PROFILES["franka_width"].update(close_threshold=0.4, open_threshold=0.15)
ROBOT_PROFILES["droid"].update(close_threshold=0.3, open_threshold=0.1)
BY_NAME = {p.name: p for p in PROFILES}

#: what stage 1 assumes for a robot_type with no profile (said in one warning)
UNKNOWN = RobotProfile(
    "unknown",
    (),
    (("left", r"^left.*" + _GRIPPER[5:]), ("right", r"^right.*" + _GRIPPER[5:])),
    None,
    None,
    "learned",
    ("no source: assumptions, said in a warning",),
)


def profile_for_robot_type(robot_type: str | None) -> RobotProfile | None:
    """The profile of a LeRobot ``robot_type`` (case-insensitive), or None."""
    if not robot_type:
        return None
    return next((p for p in PROFILES if p.matches(str(robot_type))), None)


def config_for_robot(robot: str, **overrides) -> SegmentConfig:
    """The :class:`SegmentConfig` of a named robot profile, with keyword overrides (None values ignored)."""
    if robot not in ROBOT_PROFILES:
        raise InputError(f"unknown robot profile {robot!r} (expected one of {', '.join(sorted(ROBOT_PROFILES))})")
    values = dict(ROBOT_PROFILES[robot])
    if values.get("levels") == "auto" and values.get("open_value") is None and values.get("closed_value") is None:
        values["open_value"] = None
        values["closed_value"] = 0.0  # a placeholder polarity, replaced from the signal by the dataset readers
    # "auto" for open_value/closed_value: learned from the signal (None in SegmentConfig)
    values.update(
        {k: (None if v == "auto" and k.endswith("_value") else v) for k, v in overrides.items() if v is not None}
    )
    if overrides.get("close_threshold") is not None or overrides.get("open_threshold") is not None:
        values["levels"] = "fixed"  # thresholds given by hand: the user asked for the fixed rule
        for key, default in (("open_value", 0.0), ("closed_value", 1.0)):
            if values.get(key) is None:
                values[key] = default
    return SegmentConfig(**values)
