"""A franky-sim MuJoCo server (libfranka protocol) with free cubes on the floor, for grasp->place tests.

Run as a script: ``python franky_sim_scene.py HOST STATE_JSON [x y z size]...``. It builds the scene the way
`franky-sim -s mujoco` does, adds one free cube per (x, y, z, size) given (centre and edge in metres, base
frame), prints franky-sim's ready line, and rewrites STATE_JSON with the cubes' centres ten times a second.

Its Franka Hand grasps as the real one does (:class:`FrankaHandGripperServer`), not as franky-sim 1.0.4's does;
``--franky-sim-hand`` (first argument) keeps franky-sim's own grasp, to show the difference.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import xml.etree.ElementTree as ET

import franky_sim
import franky_sim.franka_robot_server
from franka_hand import grasp_held, grasp_refusal  # this script's folder is on sys.path when it runs
from franky_sim.franka_gripper_protocol import GripperCommand, GripperCommandStatus
from franky_sim.franka_gripper_server import (
    _SETTLE_STEPS,
    _SETTLE_THRESHOLD,
    FrankaGripperServer,
    _MotionState,
)
from franky_sim.franka_server import BaseCommand
from franky_sim.mujoco_simulator import MujocoSimulator


class FrankaHandGripperServer(FrankaGripperServer):
    """franky-sim 1.0.4's gripper server with ``Gripper::grasp`` answered as the Franka Hand answers it.

    franky-sim 1.0.4 differs from the real Hand behind libfranka 0.21.2 (the one franky-control 2.0.0 bundles) in
    two ways that matter to a grasp sent with the object's width:

    - its fingers are position-controlled: ``MujocoRobot._pre_step`` drives each finger with a PD controller
      (kp 1000 N/m) to ``width / 2``, its force capped at ``force``. A grasp commanded at the object's own width
      stops the fingers on the object with almost no squeeze, and the object slips out when the arm lifts (the
      4 cm cube of test_execution_franky ended 12 cm short of its place point); a grasp on nothing "succeeds" at
      the commanded width. The real Hand closes at ``speed`` until the fingers meet something (or are closed) and
      squeezes with ``force`` (Franka's engineers in libfranka #13 and #111, franka_ros #16 and #130);
    - it answers a grasp that ended outside the window with status ``Fail``, which libfranka turns into
      ``CommandException("libfranka gripper: Command failed!")`` (``src/gripper.cpp``, ``handleCommandResponse``);
      the real Hand answers ``Unsuccessful`` and ``grasp()`` returns false (libfranka #13: the grasp_object
      example prints "Failed to grasp object."), and stops squeezing (the object is not held).

    Here the fingers close toward 0 (or open toward the maximum for an inner grasp) with franky-sim's PD, whose
    force cap ``force`` then becomes the squeeze; the result and the refusal of a window past the opening follow
    the Franka Hand doubles' rule (helpers/franka_hand.py).
    """

    def start_grasp(self, width, speed, force, epsilon_inner, epsilon_outer, command_id, tcp_socket) -> None:
        if grasp_refusal(width, epsilon_inner, epsilon_outer, self._max_width):
            BaseCommand.send_response(
                tcp_socket,
                GripperCommand.kGrasp,
                command_id,
                GripperCommandStatus.kFail,
                command_type_struct="H",
                status_type_struct="H",
            )
            return
        super().start_grasp(width, speed, force, epsilon_inner, epsilon_outer, command_id, tcp_socket)
        closing = width <= self._robot.hand_width
        self._robot.set_hand_goal(0.0 if closing else self._max_width, speed, force)

    def _check_motion_state(self) -> None:
        if self._motion_state is not _MotionState.GRASPING:
            super()._check_motion_state()
            return
        width = self._robot.hand_width
        settled = abs(width - self._prev_width) < _SETTLE_THRESHOLD
        self._prev_width = width
        self._settling_steps = self._settling_steps + 1 if settled else 0
        if self._settling_steps < _SETTLE_STEPS:
            return
        held = grasp_held(self._goal_width, self._goal_epsilon_inner, self._goal_epsilon_outer, width)
        self._is_grasping = held
        if not held:
            self._robot.set_hand_goal(width, 0.05, 70.0)  # stops squeezing where the fingers are
        self._motion_state = _MotionState.IDLE
        self._settling_steps = 0
        if self._pending_command_id is not None and self._pending_tcp_socket is not None:
            BaseCommand.send_response(
                self._pending_tcp_socket,
                GripperCommand.kGrasp,
                self._pending_command_id,
                GripperCommandStatus.kSuccess if held else GripperCommandStatus.kUnsuccessful,
                command_type_struct="H",
                status_type_struct="H",
            )
        self._pending_command_id = None
        self._pending_tcp_socket = None
        self._pending_command_type = None


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--franky-sim-hand":
        argv = argv[1:]
    else:
        # franka_robot_server builds the gripper server by this module-level name
        franky_sim.franka_robot_server.FrankaGripperServer = FrankaHandGripperServer
    host, state_path, *numbers = argv
    cubes = [tuple(float(v) for v in numbers[i : i + 4]) for i in range(0, len(numbers), 4)]
    with MujocoSimulator(enable_visualization=False) as sim:
        robot = sim.add_robot()
        for i, (x, y, z, size) in enumerate(cubes):
            body = ET.SubElement(sim.worldbody, "body", name=f"cube{i}", pos=f"{x} {y} {z}")
            ET.SubElement(body, "freejoint", name=f"cube{i}_joint")
            half = size / 2
            ET.SubElement(
                body,
                "geom",
                type="box",
                size=f"{half} {half} {half}",
                mass="0.05",
                friction="1.5 0.05 0.001",
                rgba="0.8 0.2 0.2 1",
            )
        with franky_sim.SimulationServer(sim, hostname_candidates=[host]) as server:
            stop = threading.Event()

            def report() -> None:
                while not stop.wait(0.1):
                    data, model = sim.data, sim.model
                    if data is None or model is None:
                        continue
                    centres = [data.body(f"cube{i}").xpos.tolist() for i in range(len(cubes))]
                    tmp = state_path + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump({"cubes": centres, "time": time.time()}, f)
                    os.replace(tmp, state_path)

            threading.Thread(target=report, daemon=True).start()
            print(f"Connect to the server using '{robot.hostname}' as the robot IP address", flush=True)
            try:
                server.run_forever()
            except KeyboardInterrupt:
                pass
            finally:
                stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
