"""How libfranka 0.15.0 (``src/gripper.cpp``, ``Gripper::grasp`` and ``handleCommandResponse``) answers a grasp, for
the Franka Hand doubles (franka_gripper_server.py, fake_moveit_py.FakeGripper).

``grasp(width, speed, force, epsilon_inner=0.005, epsilon_outer=0.005)`` returns true when the fingers stop at a
distance ``d`` with ``width - epsilon_inner < d < width + epsilon_outer`` (strict, as its documentation states),
false otherwise (the gripper's ``Unsuccessful``); a command the gripper refuses comes back ``Fail`` and libfranka
throws ``CommandException("libfranka gripper: Command failed!")``, which franka_ros2's franka_gripper turns into
``success=false`` with that ``error``. Which windows the firmware refuses is not published: the doubles refuse a
window reaching beyond the hand's opening (``width + epsilon_outer > max_width``), as users report for epsilon 1.0
(franky #58, libfranka #202) and the issue reports for an outer tolerance of the full opening. This is the doubles'
reading of those reports, not documented firmware behaviour.
"""

from __future__ import annotations

MIRRORS = "libfranka 0.15.0 Gripper::grasp"
COMMAND_FAILED = "libfranka gripper: Command failed!"


def grasp_refusal(width_m: float, epsilon_inner_m: float, epsilon_outer_m: float, max_width_m: float) -> str:
    """libfranka's exception message when the gripper refuses the grasp command itself ('' when accepted)."""
    if not 0.0 <= width_m <= max_width_m or epsilon_inner_m < 0.0 or epsilon_outer_m < 0.0:
        return COMMAND_FAILED
    if width_m + epsilon_outer_m > max_width_m:
        return COMMAND_FAILED
    return ""


def grasp_held(width_m: float, epsilon_inner_m: float, epsilon_outer_m: float, finger_distance_m: float) -> bool:
    """libfranka's grasp result for fingers that stopped at ``finger_distance_m``."""
    return width_m - epsilon_inner_m < finger_distance_m < width_m + epsilon_outer_m
