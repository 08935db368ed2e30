"""Robots that drop out come back (issue 30.3): executor_node with the franky backend against franky-sim (the
libfranka protocol, MuJoCo) killed with SIGKILL and started again at the same address. The node notices the lost
link from a failed state read and says so on /diagnostics; the next goal reconnects by itself, and so does the
`/grounded_planner/reconnect` service, with no lifecycle cycle."""

from __future__ import annotations

import pytest

from conftest import requires_ros, spawn_python
from helpers.ros_wait import call, reach, spin_until, stop_process

pytestmark = [requires_ros, pytest.mark.ros, pytest.mark.slow]
pytest.importorskip("franky")
pytest.importorskip("franky_sim")

from helpers.franky_server import franky_sim_server, start_franky_sim  # noqa: E402
from helpers.sim_executor import plan_msg  # noqa: E402

CONFIG = """executor: {{backend: franky, travel_speed_scale: 1.0, fine_speed_scale: 0.5}}
safety: {{max_velocity_scale: 1.0, max_acceleration_scale: 0.5, motion_timeout_s: 120.0}}
backends: {{franky: {{hostname: "{host}", realtime: false}}}}
"""


def test_franky_executor_reconnects_after_the_robot_comes_back(tmp_path, rclpy_context):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from std_srvs.srv import Trigger

    from grounded_planner_interfaces.action import ExecutePlan

    processes: list = []
    with franky_sim_server(processes=processes) as host:
        (tmp_path / "franky.yaml").write_text(CONFIG.format(host=host))
        child = spawn_python(
            [
                "-m",
                "grounded_planner.ros.executor_node",
                "--ros-args",
                "-p",
                "backend:=franky",
                "-p",
                f"config_file:={tmp_path / 'franky.yaml'}",
                "-p",
                "base_frame:=base_link",
            ]
        )
        node = rclpy.create_node("reconnect_probe", context=rclpy_context)
        links: list[tuple[int, str]] = []
        try:
            executor = SingleThreadedExecutor(context=rclpy_context)
            executor.add_node(node)
            node.create_subscription(
                DiagnosticArray,
                "/diagnostics",
                lambda m: links.extend((s.level, s.message) for s in m.status if s.name.endswith("robot link")),
                QoSProfile(depth=20),
            )
            client = ActionClient(node, ExecutePlan, "/grounded_planner/execute")
            reconnect = node.create_client(Trigger, "/grounded_planner/reconnect")
            assert client.wait_for_server(timeout_sec=120.0), "/grounded_planner/execute never appeared"
            reach(executor, node, "/grounded_planner/execute", 60.0, action=True)

            def run():
                sent = client.send_goal_async(ExecutePlan.Goal(plan=plan_msg()))
                spin_until(executor, sent.done, 30.0, "the goal to be accepted")
                assert sent.result().accepted
                done = sent.result().get_result_async()
                spin_until(executor, done.done, 180.0, "the action result")
                return done.result().result

            def moved(result) -> bool:  # the arm went down and closed on nothing: the robot answered
                return bool(result.step_outcomes) and result.step_outcomes[0] in ("ok", "grasp_failed")

            first = run()
            assert moved(first), first.message
            # a real robot's scene is set back by a person: the reset service says so and changes nothing
            reset = node.create_client(Trigger, "/grounded_planner/reset_scene")
            answer = call(executor, reset, Trigger.Request(), 60.0, "/grounded_planner/reset_scene")
            assert not answer.success and "set back by a person" in answer.message, answer.message
            spin_until(executor, lambda: links and links[-1][0] == DiagnosticStatus.OK, 30.0, "a reachable robot")

            processes[0].kill()  # the robot drops out
            processes[0].wait(10)
            spin_until(
                executor,
                lambda: links and links[-1][0] == DiagnosticStatus.ERROR,
                60.0,
                "/diagnostics to say the robot is unreachable",
            )
            assert "robot unreachable" in links[-1][1], links[-1]
            refused = run()  # still away: refused at the door, nothing moved, the reason named
            assert "robot unreachable" in refused.message and not refused.step_outcomes, refused.message
            answer = call(executor, reconnect, Trigger.Request(), 60.0, "/grounded_planner/reconnect")
            assert not answer.success and "robot unreachable" in answer.message

            processes[0] = start_franky_sim(host)  # the robot is back at the same address
            again = run()  # the next goal reconnects: no lifecycle cycle, no restart
            assert moved(again), again.message
            spin_until(
                executor,
                lambda: links and links[-1][0] == DiagnosticStatus.OK,
                30.0,
                "/diagnostics to say the robot is reachable again",
            )

            processes[0].kill()  # and once more, brought back by the reconnect service
            processes[0].wait(10)
            spin_until(executor, lambda: links and links[-1][0] == DiagnosticStatus.ERROR, 60.0, "the second loss")
            processes[0] = start_franky_sim(host)
            answer = call(executor, reconnect, Trigger.Request(), 60.0, "/grounded_planner/reconnect")
            assert answer.success, answer.message
            spin_until(executor, lambda: links and links[-1][0] == DiagnosticStatus.OK, 30.0, "a reachable robot")
            assert moved(run())
        finally:
            node.destroy_node()
            out = stop_process(child)
            for proc in processes[1:] + processes[:1]:  # a restarted server is ours to end
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
    assert "Traceback" not in out, out
