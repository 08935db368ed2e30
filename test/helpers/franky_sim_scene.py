"""A franky-sim MuJoCo server (libfranka protocol) with free cubes on the floor, for grasp->place tests.

Run as a script: ``python franky_sim_scene.py HOST STATE_JSON [x y z size]...``. It builds the scene the way
`franky-sim -s mujoco` does, adds one free cube per (x, y, z, size) given (centre and edge in metres, base
frame), prints franky-sim's ready line, and rewrites STATE_JSON with the cubes' centres ten times a second.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import xml.etree.ElementTree as ET

import franky_sim
from franky_sim.mujoco_simulator import MujocoSimulator


def main(argv: list[str]) -> int:
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
