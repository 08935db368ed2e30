"""The simulator picks an arm's behaviour from its RobotSpec (how its gripper is driven, where its model comes from,
its home pose and IK seeds, its executor config), not by matching the arm's name in each place that needs one."""

import pathlib
import re

import pytest

from grounded_planner.sim.robots import ROBOT_SPECS, gripper_ctrl, gripper_force_range, gripper_opening

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_each_arm_says_its_behaviour_in_its_spec():
    for name, spec in ROBOT_SPECS.items():
        assert spec.name == name
        assert spec.gripper in ("slide", "tendon", "jaw") and spec.model in ("scene", "fr3", "so101")
        assert spec.home_q == () or len(spec.home_q) == len(spec.arm_joints), name
        assert all(len(seed) == len(spec.arm_joints) for seed in spec.ik_fallback_seeds), name
        assert spec.executor_config == "" or (REPO / "config" / spec.executor_config).is_file(), name
    assert ROBOT_SPECS["so101"].executor_config == "execution_so101.yaml"


@pytest.mark.parametrize(
    "name, width_m, ctrl, force",
    [
        ("gp5", 0.06, [0.03, 0.03], [20.0, 20.0]),  # two slide fingers, each its half and the force
        ("fr3", 0.06, [0.5 * 0.06 * 100.0 / 0.01568627451], [40.0]),  # one tendon for both fingers
    ],
)
def test_gripper_commands_follow_the_spec_s_gripper_kind(name, width_m, ctrl, force):
    spec = ROBOT_SPECS[name]
    assert gripper_ctrl(spec, width_m) == pytest.approx(ctrl)
    assert gripper_force_range(spec, 20.0) == pytest.approx(force)


def test_the_so101_jaw_opening_round_trips_through_its_hinge_angle():
    spec = ROBOT_SPECS["so101"]
    assert gripper_opening(spec, gripper_ctrl(spec, 0.05)) == pytest.approx(0.05)
    assert gripper_force_range(spec, 100.0) == [3.35]  # the STS3215 stalls at 3.35 N m


def test_no_module_matches_an_arm_by_its_name():
    matches = []
    for path in sorted(
        [*(REPO / "grounded_planner" / "sim").glob("*.py"), *(REPO / "grounded_planner" / "spabench").glob("*.py")]
    ):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"robot\.name\s*(==|!=|in)\s", line):
                matches.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not matches, "say the behaviour in RobotSpec instead:\n" + "\n".join(matches)
