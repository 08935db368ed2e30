"""Goals checked at the executor's door (issue 18 item 3): a NaN yaw, a non-finite position, a negative width, a bad
quaternion or a frameless target set is refused naming step and field, in `Executor.execute` (real run and dry run
alike) and in `grounded-planner execute`; nothing reaches the arm.

KinematicArm (test/helpers/kinematic_arm.py) is a test double that records every command the executor sends.
"""

from __future__ import annotations

import json
import math

import pytest

from grounded_planner.cli.main import main
from grounded_planner.execution.executor import Executor
from grounded_planner.execution.validate import GoalPose, InvalidGoalError, check_poses, check_quaternion, check_targets
from grounded_planner.geometry.targets import TargetSet
from grounded_planner.plan import GroundedAction, GroundedPlan
from helpers.kinematic_arm import KinematicArm

PLAN = GroundedPlan(
    "put the cup on the plate",
    (640, 480),
    [
        GroundedAction("grasp", "cup", bbox=(100.0, 100.0, 140.0, 150.0)),
        GroundedAction("place", "cup", "plate", point=(320.0, 240.0)),
    ],
)


def targets(grasp: dict | None = None, place: dict | None = None, frame: str = "fr3_link0") -> dict:
    return {
        "frame": frame,
        "warnings": [],
        "targets": [
            {
                "index": 0,
                "type": "grasp",
                "object": "cup",
                "position": [0.5, 0.1, 0.05],
                "yaw": 0.4,
                "width": 0.05,
                "normal": None,
                "method": "test",
                "confidence": 0.9,
                **(grasp or {}),
            },
            {
                "index": 1,
                "type": "place",
                "object": "cup",
                "position": [0.5, -0.2, 0.0],
                "yaw": None,
                "width": None,
                "normal": None,
                "method": "test",
                "confidence": 0.9,
                **(place or {}),
            },
        ],
    }


BAD = [
    (targets(grasp={"yaw": math.nan}), "step 0 (grasp) yaw: nan is not a finite angle"),
    (targets(grasp={"yaw": math.inf}), "step 0 (grasp) yaw: inf is not a finite angle"),
    (targets(grasp={"width": -0.01}), "step 0 (grasp) width: -0.01 must be a finite width >= 0 m"),
    (targets(grasp={"width": math.nan}), "step 0 (grasp) width"),
    (targets(place={"position": [0.5, math.nan, 0.0]}), "step 1 (place) position: [0.5, nan, 0] must be 3 finite"),
    (targets(place={"position": [0.5, 1e400, 0.0]}), "step 1 (place) position"),
    (targets(place={"normal": [0.0, math.nan, 1.0]}), "step 1 (place) normal"),
    (targets(frame=""), "frame: the targets name no frame"),
]


@pytest.mark.parametrize("data,message", BAD, ids=[b[1].split(":")[0] for b in BAD])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "run"])
def test_executor_refuses_a_bad_target_before_any_motion(data, message, dry_run):
    arm = KinematicArm()
    arm.connect()
    with pytest.raises(InvalidGoalError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Executor(arm, None).execute(PLAN, TargetSet.from_dict(data), dry_run=dry_run)
    assert arm.calls == [], "a refused goal reached the arm"


def test_a_sound_goal_still_runs():
    arm = KinematicArm()
    arm.connect()
    result = Executor(arm, None).execute(PLAN, TargetSet.from_dict(targets()))
    assert result.success, result.message
    assert arm.calls, "nothing was sent"


def test_the_expected_frame_is_enforced():
    with pytest.raises(InvalidGoalError, match="targets are in 'camera_link', expected 'fr3_link0'"):
        check_targets(TargetSet.from_dict(targets(frame="camera_link")), expected_frame="fr3_link0")


@pytest.mark.parametrize(
    "q,message",
    [
        ((math.nan, 0.0, 0.0, 1.0), "must be 4 finite numbers"),
        ((0.0, 0.0, 0.0, 0.0), "is not a unit quaternion \\(norm 0\\)"),
        ((0.0, 0.0, 0.0, 2.0), "is not a unit quaternion \\(norm 2\\)"),
    ],
)
def test_goal_orientations_must_be_unit_quaternions(q, message):
    with pytest.raises(InvalidGoalError, match=r"step 3 \(grasp\) pose.orientation: .*" + message):
        check_quaternion(3, "grasp", q)
    check_quaternion(3, "grasp", (0.0, 0.0, 0.70710678, 0.70710678))  # a 90 degree yaw, as written by hand


def test_goal_poses_name_the_bad_field():
    def pose(step, kind, frame, position=(0.5, 0.0, 0.0), **extra):
        return GoalPose(step, kind, frame, position, (0.0, 0.0, 0.0, 1.0), **extra)

    with pytest.raises(
        InvalidGoalError, match=r"step 1 \(place\) pose.header.frame_id: 'camera_link', expected 'base'"
    ):
        check_poses([pose(0, "grasp", "base"), pose(1, "place", "camera_link")], "base")
    with pytest.raises(InvalidGoalError, match=r"step 1 \(place\) pose.header.frame_id: 'b' differs"):
        check_poses([pose(0, "grasp", "a"), pose(1, "place", "b")])
    with pytest.raises(InvalidGoalError, match=r"step 0 \(grasp\) pose.position"):
        check_poses([pose(0, "grasp", "a", (math.inf, 0, 0))])
    with pytest.raises(InvalidGoalError, match=r"step 0 \(grasp\) width: -1 must be a finite width >= 0 m"):
        check_poses([pose(0, "grasp", "a", width=-1.0)])
    with pytest.raises(InvalidGoalError, match=r"step 0 \(open\) normal"):
        check_poses([pose(0, "open", "a", normal=(math.nan, 0.0, 0.0))])
    check_poses([pose(0, "grasp", "a", width=0.0), pose(1, "place", "a", normal=(0.0, 0.0, 1.0))])


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "run"])
def test_execute_cli_refuses_a_nan_yaw_in_one_line(tmp_path, capsys, dry_run):
    plan_path, targets_path = tmp_path / "plan.json", tmp_path / "targets.json"
    plan_path.write_text(json.dumps(PLAN.to_dict()))
    targets_path.write_text(json.dumps(targets(grasp={"yaw": math.nan})))  # json writes NaN, as a buggy tool would
    args = ["execute", "--plan", str(plan_path), "--targets", str(targets_path), "--backend", "sim"]
    code = main(args + (["--dry-run"] if dry_run else []))
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    assert err.strip().splitlines() == [
        f"grounded-planner execute: targets {targets_path}: step 0 (grasp) yaw: "
        "nan is not a finite angle (radians about the frame's z axis)"
    ]
