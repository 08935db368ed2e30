"""executor_node on the MuJoCo simulator in a child process, and the lines that send it a goal: one helper instead of
the same spawn, plan and send/result lines written out in every executor test file."""

from __future__ import annotations

import subprocess

from grounded_planner.ros import names
from helpers.ros_wait import reach, spin_until, start_node

# the action as the test's node (root namespace) resolves it
EXECUTE_ACTION = "/" + names.EXECUTE_ACTION


def start_sim_executor(tmp_path, *params: str, realtime_factor: float = 0.0) -> subprocess.Popen:
    """``executor_node`` with backend sim and base_frame base_link (``python -m``, ROS_DOMAIN_ID inherited), its
    executor config written to ``tmp_path/executor.yaml``. ``realtime_factor`` 1.0 paces the simulator to the wall
    clock, so that something done after the first feedback (a cancel, a kill) lands mid-plan; 0: as fast as the CPU
    allows. ``params``: more ``NAME:=VALUE`` parameters."""
    config = tmp_path / "executor.yaml"
    config.write_text(f"executor: {{backend: sim}}\nbackends: {{sim: {{realtime_factor: {realtime_factor}}}}}\n")
    return start_node("executor_node", "backend:=sim", "base_frame:=base_link", f"config_file:={config}", *params)


def plan_msg(frame="base_link", grasp_q=(0.0, 0.0, 0.0, 1.0), place_position=(0.45, -0.15, 0.02), grasp_width=0.0):
    """A grasp -> place GroundedPlan message ("put the box in the bowl") with the raw poses given, as a careless
    sender might fill them (NaN, non-unit quaternions, another frame): what the executor must check at the door."""
    from grounded_planner.msgs.plan import pose_stamped_msg
    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner.ros.msg_types import rclpy_type

    plan = GroundedPlan(
        "put the box in the bowl",
        (320, 240),
        [
            GroundedAction("grasp", "box", bbox=(100.0, 100.0, 130.0, 130.0)),
            GroundedAction("place", "box", "bowl", point=(200.0, 120.0)),
        ],
    )
    msg = plan_to_msg(plan)
    msg.actions[0].pose = pose_stamped_msg(rclpy_type, frame, (0.45, 0.1, 0.02), grasp_q)
    msg.actions[1].pose = pose_stamped_msg(rclpy_type, frame, place_position)
    msg.actions[0].width = grasp_width
    return msg


def send_goal(executor, node, client, goal, timeout_s: float = 60.0, feedback=None):
    """Send ``goal`` through ``client`` (an ActionClient of ``node`` on the execute action) once the server is up
    and has discovered the client; the goal handle, accepted or not."""
    assert client.wait_for_server(timeout_sec=timeout_s), f"{EXECUTE_ACTION} never appeared"
    reach(executor, node, EXECUTE_ACTION, timeout_s, action=True)
    sent = client.send_goal_async(goal, feedback_callback=feedback)
    spin_until(executor, sent.done, timeout_s, "the goal to be accepted or rejected")
    return sent.result()


def goal_result(executor, handle, timeout_s: float = 60.0, what: str = "the action result"):
    """The result of an accepted goal (status and result), spinning ``executor`` until it comes."""
    done = handle.get_result_async()
    spin_until(executor, done.done, timeout_s, what)
    return done.result()
