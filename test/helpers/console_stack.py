"""The stack the console's browser tests and its benchmark run against: the tabletop workcell (a bag of the camera,
its extrinsics, the sim executor's scenario with the cube where the camera sees it), the replay profile's bringup in
a child process (the console on a free port, or no console at all), and a node of the caller's own on its graph."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from grounded_planner.console.graph import GraphError, PlanAnswer
from grounded_planner.ros import names
from helpers.bringup import start_bringup
from helpers.tabletop import CUBE_M, EXTRINSICS, TABLE_M, base_point, scene_messages

CONSOLE_URL = re.compile(r"console on (http://[\d.]+:\d+/)")
CAMERA_TOPICS = (
    "/camera/camera/color/image_raw",
    "/camera/camera/aligned_depth_to_color/image_raw",
    "/camera/camera/color/camera_info",
)
ROS_ENV = ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "RMW_IMPLEMENTATION")


def scene_yaml() -> str:
    """The simulated workcell holding what the recorded camera sees: the red cube where the bag shows it (through the
    tabletop's camera model and extrinsics), a tray where the planner places it ("the table" at the image centre)."""
    cube_x, cube_y, _ = base_point(100.5, 120.5, CUBE_M)  # the centre of the cube's box in the image
    tray_x, tray_y, _ = base_point(160.5, 120.5, TABLE_M)
    return f"""name: tabletop_cube
instruction: put the red cube on the table
objects:
  - {{id: red_cube, kind: box, name: red cube, size_m: [0.04, 0.04, 0.05], position_m: [{cube_x:.4f}, {cube_y:.4f}], color: red}}
  - {{id: tray, kind: bowl, name: tray, size_m: [0.085, 0.03], position_m: [{tray_x:.4f}, {tray_y:.4f}], color: blue}}
plan:
  - {{type: grasp, object: red_cube}}
  - {{type: place, target: tray}}
success:
  - {{type: inside, object: red_cube, target: tray}}
"""


@dataclass
class Workcell:
    """The files of the tabletop workcell, written into one folder."""

    bag: Path  # the camera: three stamped frames of colour, aligned depth and camera_info, 100 ms apart
    extrinsics: Path
    scenario: Path  # the sim backend's scene
    executor_config: Path  # the executor's config_file: the sim backend on ``scenario``


def write_workcell(folder: Path, realtime_factor: float | None = None) -> Workcell:
    """The workcell's files in ``folder``; ``realtime_factor`` 1.0 paces the sim arm to the wall clock (a plan takes
    seconds, so that a Stop lands in the middle of it); None lets it run as fast as it computes."""
    from grounded_planner.ros.bags import write_bag

    color, depth, info = scene_messages(stamp_s=1_700_000_000)  # stamped: the player moves stamps to playback time
    bag = write_bag(
        folder / "bag",
        [(t, i * 100_000_000, m) for i in range(3) for t, m in zip(CAMERA_TOPICS, (color, depth, info))],
    )
    cell = Workcell(bag, folder / "extrinsics.yaml", folder / "scene.yaml", folder / "executor.yaml")
    cell.extrinsics.write_text(EXTRINSICS)
    cell.scenario.write_text(scene_yaml())
    pace = "" if realtime_factor is None else f"    realtime_factor: {realtime_factor}\n"
    cell.executor_config.write_text(f"backends:\n  sim:\n{pace}    seed: null\n    scenario: {cell.scenario}\n")
    return cell


@contextlib.contextmanager
def ros_domain_of_its_own() -> Iterator[int]:
    """A random ROS domain on localhost (others run ROS tests at the same time) for this process and its children;
    the environment as it was afterwards."""
    saved = {k: os.environ.get(k) for k in ROS_ENV}
    domain = random.SystemRandom().randint(1, 200)
    os.environ.update(
        ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", RMW_IMPLEMENTATION="rmw_fastrtps_cpp"
    )
    try:
        yield domain
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Output:
    """Reads a child process's output on a thread, so that a caller can wait for a line while the child runs."""

    def __init__(self, child: subprocess.Popen):
        self.child, self.lines = child, []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.child.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for the rest of the output once the child ended."""
        self._thread.join(timeout_s)

    def wait_for(self, pattern: re.Pattern, timeout_s: float) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = pattern.search(self.text())
            if match:
                return match
            if self.child.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {pattern.pattern!r} in the output:\n{self.text()[-3000:]}")

    def cpu_s(self) -> float:
        """The child's CPU time so far (user + system, all its threads), seconds."""
        fields = Path(f"/proc/{self.child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workcell_overrides(cell: Workcell, vlm_base_url: str, rollouts: Path, console: bool = True) -> dict[str, Any]:
    """The replay profile's overrides for the workcell: the planner asking the VLM server at ``vlm_base_url``, the sim
    executor moving for real, rollouts (and the console's view of them) in ``rollouts``."""
    overrides: dict[str, Any] = {
        "bag_player.bag": cell.bag,
        "planner.base_url": vlm_base_url,
        "planner.model": "qwen3-vl-test",
        "planner.extrinsics_file": cell.extrinsics,
        "executor.dry_run": "false",
        "executor.config_file": cell.executor_config,
        "rollout_logger.log_dir": rollouts,
    }
    if console:
        overrides.update(
            {
                "console.port": 0,
                "console.rollouts_dir": rollouts,
                "console.executor_config_file": cell.executor_config,
            }
        )
    return overrides


class StackProcess:
    """`grounded-planner bringup` of the replay profile in a child process; with ``console`` its URL once it serves.
    ``console=False`` brings the same profile up without its console section (a graph with no console)."""

    def __init__(self, folder: Path, overrides: Mapping[str, Any], console: bool = True, start_timeout_s: float = 90.0):
        config = "config/replay.yaml"
        if not console:
            import yaml

            profile = yaml.safe_load((Path(__file__).resolve().parents[2] / config).read_text())
            profile.pop("/**/console")
            config = str(folder / "replay_without_console.yaml")
            Path(config).write_text(yaml.safe_dump(profile))
        self.child = start_bringup(config, overrides, console=console)
        self.output = Output(self.child)
        self.url = ""
        try:
            if console:
                self.url = self.output.wait_for(CONSOLE_URL, start_timeout_s).group(1)
            else:
                self.output.wait_for(re.compile(r"bringup: .* running"), start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = 30.0) -> str:
        """Ctrl-C, and everything the bringup printed; one that does not stop within ``timeout_s`` is killed (never
        left behind) and fails."""
        self.child.send_signal(signal.SIGINT)
        try:
            self.child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            self.child.kill()
            self.child.wait()
            raise AssertionError(
                f"bringup did not stop within {timeout_s:g} s of Ctrl-C:\n{self.output.text()[-3000:]}"
            ) from exc
        self.output.join()
        return self.output.text()


@contextlib.contextmanager
def graph_node(name: str = "console_test_probe") -> Iterator[tuple[Any, Any]]:
    """A node of this process in the stack's ROS domain (ROS_DOMAIN_ID), with a single-threaded executor."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    context = Context()
    rclpy.init(context=context, domain_id=int(os.environ["ROS_DOMAIN_ID"]))
    try:
        node = rclpy.create_node(name, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        yield node, executor
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def set_parameter(node, executor, target: str, name: str, value) -> None:
    """`ros2 param set TARGET NAME VALUE` from ``node`` (rclpy's parameter client); fails unless it was set."""
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    client = AsyncParameterClient(node, target)
    assert client.wait_for_services(timeout_sec=20.0), f"the parameter services of {target}"
    future = client.set_parameters([Parameter(name, value=value)])
    executor.spin_until_future_complete(future, timeout_sec=20.0)
    assert future.done() and all(r.successful for r in future.result().results), future.result()


def server_timing(header: str) -> dict[str, float]:
    """The console's ``Server-Timing`` header (``name;dur=ms, ...``): its metrics in order, name -> dur in ms."""
    out = {}
    for metric in header.split(","):
        name, *params = (p.strip() for p in metric.split(";"))
        out[name] = float(next(p for p in params if p.startswith("dur="))[4:])
    return out


class InstantGraph:
    """Test double of the console's graph (ConsoleGraph): a planner that answers at once, with no ROS graph behind it
    (a plan with no step, so nothing is sent ahead to be held), so what is left of a plan request through the console
    is its own HTTP round trip. No executor is there: what would go to one is refused as ConsoleNode refuses it
    when no executor offers the service (GraphError.no_executor), and there is no camera."""

    def plan(self, instruction: str, timeout_s: float, sent):
        sent()
        return PlanAnswer(True, "", {"instruction": instruction, "image_size": [64, 48], "actions": []}, [], 0.0)

    def requires_approval(self) -> bool:
        return False  # the plans that subclasses answer run (or are refused) at Approve, none is sent to be held

    def execute(self, plan: dict, hold: bool = False):
        raise GraphError.no_executor(names.EXECUTE_ACTION)

    def answer_approval(self, approved: bool, wait_s: float) -> tuple[bool, str]:
        raise GraphError.no_executor(names.APPROVE_SERVICE)

    def stop(self) -> bool:
        raise GraphError.no_executor(names.EXECUTE_ACTION)  # the action's cancel service

    def reset_scene(self) -> tuple[bool, str]:
        raise GraphError.no_executor(names.RESET_SCENE_SERVICE)

    def latest_frame(self, after_seq: int, width: int = 0, wanted=None):
        return None

    def frames_paused(self) -> None:
        pass
