"""The main job end to end on a built-in scene: bag -> planner -> back-projection -> executor -> rollout, in one process."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from grounded_planner.errors import RunFailure
from grounded_planner.ros import names
from grounded_planner.ros.bringup import Bringup, Profile
from grounded_planner.ros.bags import write_bag
from grounded_planner.sim.export import gt_plan
from grounded_planner.sim.workcell import SimWorkcell
from grounded_planner.vlm.image import image_sha256
from grounded_planner.msgs.execution import execution_result_from_msg
from grounded_planner.sim.backend import SimBackend
from PIL import Image

SCENARIO = Path(__file__).resolve().parents[2] / "config" / "scenarios" / "box_in_bowl.yaml"
FRAMES = 10  # frames in the sample bag (10 Hz: one second of camera)


class DemoError(RunFailure):
    """A stage of the demo that could not run (the message names the stage and why)."""


@dataclass
class PlannerChoice:
    """Which planner the demo uses, and why."""

    backend: str  # replay | openai | gemini
    model: str
    base_url: str = ""
    replay_file: str = ""
    why: str = ""  # one line for the user

    def params(self) -> dict[str, Any]:
        out = {"backend": self.backend, "model": self.model, "base_url": self.base_url}
        if self.replay_file:
            out["replay_file"] = self.replay_file
        return out


def choose_planner(env: dict[str, str], replay_file: Path) -> PlannerChoice:
    """A real VLM when the environment configures one (GP_VLM_BASE_URL / GP_VLM_MODEL / an API key), else replay."""
    base_url, model = env.get("GP_VLM_BASE_URL", ""), env.get("GP_VLM_MODEL", "")
    backend = env.get("GP_VLM_BACKEND", "")
    if base_url or model:
        backend = backend or "openai"
        return PlannerChoice(backend, model, base_url, why=f"GP_VLM_{'BASE_URL' if base_url else 'MODEL'} is set")
    if env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY"):
        return PlannerChoice(backend or "gemini", "gemini-2.5-flash", why="a Gemini API key is set")
    if env.get("OPENAI_API_KEY"):
        return PlannerChoice(
            backend or "openai", "gpt-4.1-mini", "https://api.openai.com/v1", why="OPENAI_API_KEY is set"
        )
    return PlannerChoice(
        "replay",
        "recorded-plan",
        replay_file=str(replay_file),
        why="no VLM configured (GP_VLM_BASE_URL, GP_VLM_MODEL, OPENAI_API_KEY, GEMINI_API_KEY unset)",
    )


@dataclass
class DemoReport:
    """What the demo did, for the caller (CLI output, tests)."""

    planner: PlannerChoice
    bag: Path
    plan: Any = None
    targets: dict | None = None
    result: dict | None = None
    task_success: bool | None = None
    rollout: Path | None = None
    overlay: Path | None = None
    feedback: list[tuple[int, str]] = field(default_factory=list)
    extrinsics: Path | None = None  # the scene's calibration (camera in base_link), written beside the bag
    replay_file: Path | None = None  # the scene's recorded plan (JSONL for the replay planner)

    def replay_command(self) -> str:
        """The command that replays the demo's bag through the graph as printed: the scene's own calibration and its
        recorded plan (no model server needed), the executor dry-running on the simulator (config/replay.yaml)."""
        from grounded_planner.ros.params import resolve_data_path  # lazy: a ROS command; the CLI runs without rclpy

        sets = {
            "bag_player.bag": self.bag,
            "planner.backend": "replay",
            "planner.replay_file": self.replay_file,
            "planner.extrinsics_file": self.extrinsics,
            "backprojection.extrinsics_file": self.extrinsics,
            "executor.base_frame": "base_link",
        }
        words = ["grounded-planner", "bringup", "--config", resolve_data_path("config/replay.yaml")]
        for key, value in sets.items():
            words += ["--set", f"{key}={value}"]
        return " ".join(shlex.quote(str(word)) for word in words)


def write_scene(out_dir: Path, seed: int, say: Callable[[str], None]):
    """Render the sim workcell, write its RGB-D + camera_info bag, calibration and the recorded plan.

    Returns (workcell, bag path, extrinsics path, replay file path).
    """
    from sensor_msgs.msg import CameraInfo  # lazy: ROS package (sensor_msgs), absent without a ROS install

    from grounded_planner.ros.convert import numpy_to_image  # lazy: a ROS command; the CLI runs without rclpy

    cell = SimWorkcell.from_scenario(SCENARIO, seed=seed)
    rgb, depth_m = cell.render()
    depth_mm = np.where(np.isfinite(depth_m) & (depth_m > 0), np.rint(depth_m * 1000.0), 0).astype(np.uint16)
    camera = cell.camera_model
    extrinsics_path, _info_path = cell.write_calibration(out_dir / "calibration")

    bag = out_dir / "scene"
    if bag.exists():
        shutil.rmtree(bag)
    t0 = time.time_ns()

    def messages():
        for i in range(FRAMES):
            stamp_ns = t0 + i * 100_000_000
            color, depth = numpy_to_image(rgb, "rgb8"), numpy_to_image(depth_mm, "16UC1")
            info = CameraInfo(
                width=camera.width,
                height=camera.height,
                distortion_model=camera.distortion_model,
                d=[float(v) for v in np.ravel(camera.D)],
                k=[float(v) for v in np.ravel(camera.K)],
                r=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                p=[camera.fx, 0.0, camera.cx, 0.0, 0.0, camera.fy, camera.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
            )
            for msg in (color, depth, info):
                msg.header.frame_id = camera.frame_id
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
            # a bag's topics are absolute: the root namespace's names, as a camera there records them
            yield "/" + names.COLOR_IMAGE, stamp_ns, color
            yield "/" + names.ALIGNED_DEPTH_IMAGE, stamp_ns, depth
            yield "/" + names.COLOR_CAMERA_INFO, stamp_ns, info

    write_bag(bag, messages(), storage="mcap")
    plan = gt_plan(cell)
    plan.model = "recorded (simulator ground truth)"
    replay_file = out_dir / "recorded_plan.jsonl"
    replay_file.write_text(
        json.dumps({"instruction": plan.instruction, "image_sha256": image_sha256(rgb), "plan": plan.to_dict()}) + "\n"
    )
    say(
        f"  simulated workcell '{cell.scenario.name}' (seed {seed}), {camera.width}x{camera.height} RGB-D, "
        f"{FRAMES} frames + camera_info -> {bag} (MCAP)"
    )
    return cell, bag, extrinsics_path, replay_file, plan.instruction


class _Waiter:
    """Thread-safe slot the demo's callbacks fill while the bringup executor spins in its own thread."""

    def __init__(self):
        self.event = threading.Event()
        self.value = None

    def set(self, value) -> None:
        self.value = value
        self.event.set()

    def wait(self, timeout_s: float, what: str):
        if not self.event.wait(timeout_s):
            raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        return self.value


def _overlay_of(planner_node, timeout_s: float):
    """The planner's newest overlay image, waiting up to ``timeout_s`` for its worker thread to draw it."""
    deadline = time.monotonic() + timeout_s
    while planner_node.last_overlay_rgb is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return planner_node.last_overlay_rgb


def run_demo(
    out_dir: str | Path = "out/demo",
    seed: int = 0,
    env: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
) -> DemoReport:
    """Run the whole graph on the sample scene; raises DemoError when a stage cannot run."""
    import rclpy  # lazy: ROS package (rclpy), absent without a ROS install
    from rclpy.qos import DurabilityPolicy, QoSProfile  # lazy: ROS package (rclpy), absent without a ROS install
    from std_msgs.msg import String  # lazy: ROS package (std_msgs), absent without a ROS install

    from grounded_planner.ros.client import GroundedPlannerClient  # lazy: a ROS command; the CLI runs without rclpy

    # lazy: a ROS command; the CLI runs without rclpy
    from grounded_planner.ros.convert import plan_from_msg, plan_to_msg

    # lazy: ROS package (grounded_planner_interfaces), absent without a ROS install
    from grounded_planner_interfaces.msg import ExecutionResult as ExecutionResultMsg

    # lazy: ROS package (grounded_planner_interfaces), absent without a ROS install
    from grounded_planner_interfaces.msg import GroundedPlan as GroundedPlanMsg

    env = dict(os.environ if env is None else env)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    say("[1/6] sample scene")
    cell, bag, extrinsics_path, replay_file, instruction = write_scene(out_dir, seed, say)
    choice = choose_planner(env, replay_file)
    report = DemoReport(choice, bag, extrinsics=extrinsics_path, replay_file=replay_file)

    profile = Profile(
        None,
        {
            "rollout_logger": {
                "log_dir": str(out_dir / "rollouts"),
                "condition": "demo",
                "scene_id": f"{cell.scenario.name}-{seed}",
            },
            "bag_player": {"bag": str(bag), "loop": True},
            "planner": {
                **choice.params(),
                "extrinsics_file": str(extrinsics_path),
                "timeout_s": 120.0,
                "frame_wait_s": 10.0,
            },
            "backprojection": {"extrinsics_file": str(extrinsics_path), "frame_wait_s": 10.0},
            "executor": {"backend": "sim", "base_frame": "base_link"},
        },
    )
    # the executor drives the very simulator the scene was rendered from, so its task check means something
    factories = {"executor": {"backend_factory": lambda name, config: SimBackend(cell)}}
    domain_id = (
        int(env["ROS_DOMAIN_ID"]) if env.get("ROS_DOMAIN_ID", "").isdigit() else random.SystemRandom().randint(100, 200)
    )
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # the demo graph stays on this machine
    say("[2/6] graph")
    for name in profile.params:  # the demo prints its own story; nodes speak up only for warnings
        rclpy.logging.set_logger_level(name, rclpy.logging.LoggingSeverity.WARN)
    with Bringup(profile, factories=factories, domain_id=domain_id) as graph:
        client = rclpy.create_node("demo_client", context=graph.context)
        graph.add_node(client)  # destroyed by the graph's shutdown, after its executor stopped
        latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        plan_3d, targets, rollout_closed, result_msg = _Waiter(), _Waiter(), _Waiter(), _Waiter()
        client.create_subscription(GroundedPlanMsg, names.PLAN_3D, plan_3d.set, latched)
        client.create_subscription(GroundedPlanMsg, names.TARGETS, targets.set, QoSProfile(depth=10))
        client.create_subscription(String, names.ROLLOUT_CLOSED, rollout_closed.set, latched)
        client.create_subscription(ExecutionResultMsg, names.EXECUTION_RESULT, result_msg.set, QoSProfile(depth=10))
        pixels_pub = client.create_publisher(GroundedPlanMsg, names.PLAN_PIXELS, QoSProfile(depth=5))
        planner = GroundedPlannerClient(client)
        graph.start()
        say(f"  in-process graph (ROS_DOMAIN_ID {domain_id}, MultiThreadedExecutor): {', '.join(graph.nodes)}")

        say("[3/6] planning")
        if choice.backend == "replay":
            say(f"  planner: REPLAY of a recorded plan ({choice.why}); file {choice.replay_file}")
        else:
            say(
                f"  planner: {choice.backend} model {choice.model or '(server default)'}"
                f"{' at ' + choice.base_url if choice.base_url else ''} ({choice.why})"
            )
        # the pixel plan first (the back-projection stage below shows the topic path); empty image: the bag's frame
        planned = planner.plan(instruction, backproject=False, timeout_s=180.0, service_wait_s=30.0)
        if not planned.succeeded:
            raise DemoError(f"planning failed: {planner.last_error}")
        plan = planned.plan
        report.plan = plan
        say(f"  '{instruction}' -> {len(plan.actions)} action(s) in {planned.duration_s:.2f} s:")
        for i, action in enumerate(plan.actions):
            where = (
                f"point {[round(v) for v in action.point]}"
                if action.point is not None
                else f"box {[round(v) for v in action.bbox]}"
            )
            what = f"{action.object} -> {action.target}".strip() if action.target else action.object
            say(f"    {i + 1}. {action.type} {what} at {where} px")
        if not plan.actions:
            say(f"  empty plan: {plan.reason}")
        overlay = _overlay_of(graph.nodes["planner"], 10.0)  # drawn off the response path: it may lag the answer
        if overlay is not None:
            report.overlay = out_dir / "overlay.png"
            Image.fromarray(overlay).save(report.overlay)
            say(f"  overlay image: {report.overlay}")

        say("[4/6] back-projection")
        if not plan.actions:
            raise DemoError("nothing to back-project: the planner returned an empty plan")
        deadline = time.monotonic() + 10.0
        while pixels_pub.get_subscription_count() == 0:  # discovery of the in-process subscriber: milliseconds
            if time.monotonic() > deadline:
                raise DemoError(
                    "back-projection: backprojection_node never subscribed to /grounded_planner/plan_pixels"
                )
            time.sleep(0.01)
        pixels_pub.publish(plan_to_msg(plan, header=planned.msg.header))
        msg = plan_3d.wait(60.0, "the back-projected plan on /grounded_planner/plan_3d")
        node = graph.nodes["backprojection"]
        if node.last_error and node.plans_done == 0:
            raise DemoError(f"back-projection failed: {node.last_error}")
        located = plan_from_msg(msg)
        report.targets = plan_from_msg(targets.wait(10.0, "the targets")).target_set().to_dict()
        for i, action in enumerate(located.actions):
            t = action.target_3d
            extra = f", width {t.width * 1000:.0f} mm" if t.width else ""
            say(
                f"    {i + 1}. {action.type:5s} -> ({t.position[0]:+.3f}, {t.position[1]:+.3f}, {t.position[2]:+.3f}) m "
                f"in {t.frame} ({t.method}{extra})"
            )

        say("[5/6] execution on the MuJoCo simulator")

        def on_feedback(step: int, state: str, _action) -> None:
            report.feedback.append((step, state))
            say(f"    step {step + 1}: {state}")

        outcome = planner.execute(msg, feedback=on_feedback, timeout_s=300.0, server_wait_s=30.0)
        if outcome.status.value in ("rejected", "unavailable"):
            raise DemoError(f"execution: {planner.last_error}")
        report.result = execution_result_from_msg(result_msg.wait(10.0, "the execution result"))
        report.task_success = report.result.get("scene_success")
        say(
            f"  result: {'success' if outcome.succeeded else 'failed'} ({outcome.message}); step outcomes "
            f"{outcome.step_outcomes}; task check in the simulator: "
            f"{'box is in the bowl' if report.task_success else 'NOT done'}"
        )

        say("[6/6] rollout")
        report.rollout = Path(rollout_closed.wait(30.0, "the rollout logger to close the episode").data)
        say(f"  rollout: {report.rollout}/rollout.json + rollout.mcap")
    cell.close()
    return report


def how_to_plug_in_a_vlm() -> str:
    return (
        "To plan with a real VLM instead: serve one with an OpenAI-compatible API (e.g. "
        "`vllm serve Qwen/Qwen3-VL-8B-Instruct`) and run\n"
        "  GP_VLM_BASE_URL=http://localhost:8000/v1 GP_VLM_MODEL=Qwen/Qwen3-VL-8B-Instruct make demo\n"
        "or set GEMINI_API_KEY (Gemini) or OPENAI_API_KEY (OpenAI)."
    )
