"""planner_node in a child process against a local OpenAI-compatible server the test runs: plans, back-projection,
a dead and a slow VLM (real HTTP, real DDS between processes)."""

import time

import numpy as np
import pytest

from conftest import requires_ros, spawn_python
from helpers.camera import publish_camera
from helpers.ros_wait import call, reach, spin_until, stop_process

pytestmark = [requires_ros, pytest.mark.ros]
pytest.importorskip("httpx")

from helpers.tabletop import (  # noqa: E402 - after importorskip(httpx)
    CUBE_M,
    CUBE_PX,
    EXTRINSICS,
    INSTRUCTION,
    SCENE_COLORS,
    TABLE_M,
    W,
    H,
    base_point,
    scene_messages,
)


class Graph:
    """The test's side of the graph: a camera stand-in publishing the scene, and a plan client."""

    def __init__(self, context, camera: bool = True):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rcl_interfaces.srv import GetParameters

        from grounded_planner_interfaces.srv import GetGroundedPlan

        self.node = rclpy.create_node("planner_probe", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.color, self.depth, self.info = scene_messages()
        if camera:
            publish_camera(self.node, {"color": self.color, "depth": self.depth, "info": self.info})  # 10 Hz
        self.client = self.node.create_client(GetGroundedPlan, "/grounded_planner/plan")
        self.params = self.node.create_client(GetParameters, "/planner/get_parameters")
        self.Request = GetGroundedPlan.Request

    def plan(self, instruction=INSTRUCTION, image=True, backproject=False, timeout_s=30.0):
        request = self.Request(instruction=instruction, backproject=backproject)
        if image:
            request.image = self.color
        return call(self.executor, self.client, request, timeout_s, "/grounded_planner/plan")

    def close(self):
        self.node.destroy_node()


class VLMProcess:
    """The same stand-in server in a child process: killing it drops open connections, as a crashed server does
    (a stopped in-process server would keep serving the planner's kept-alive connection)."""

    def __init__(self):
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = None
        self.start()

    def start(self):
        code = (
            "import threading; from grounded_planner.vlm.fake_server import FakeVLMServer; "
            f"FakeVLMServer({SCENE_COLORS!r}, port={self.port}).start(); print('ready', flush=True); threading.Event().wait()"
        )
        self.proc = spawn_python(["-c", code])
        assert self.proc.stdout.readline().strip() == "ready", "the stand-in VLM did not start"

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def vlm():
    """The vlm layer's stand-in server (real HTTP, finds objects by colour, answers like the model named)."""
    from grounded_planner.vlm.fake_server import FakeVLMServer

    server = FakeVLMServer(SCENE_COLORS).start()
    yield server
    server.stop()


def start_planner(vlm_url, tmp_path, *extra):
    """The installed console script, as a user starts it: .venv/bin/planner_node --ros-args -p ..."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "extrinsics.yaml").write_text(EXTRINSICS)
    script = Path(sys.executable).parent / "planner_node"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "grounded_planner.ros.planner_node"]
    return subprocess.Popen(
        command
        + [
            "--ros-args",
            "-p",
            "backend:=openai",
            "-p",
            f"base_url:={vlm_url}",
            "-p",
            "model:=qwen3-vl-test",
            "-p",
            "max_retries:=0",
            "-p",
            f"extrinsics_file:={tmp_path / 'extrinsics.yaml'}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_client_gets_a_valid_plan_and_backprojected_poses(vlm, tmp_path, rclpy_context):
    from grounded_planner.ros.convert import plan_from_msg

    child = start_planner(vlm.base_url, tmp_path)
    graph = Graph(rclpy_context)
    try:
        response = graph.plan()
        assert response.success, response.message
        plan = plan_from_msg(response.plan)  # validates: grasp then place, boxes inside the image
        assert [a.type for a in plan.actions] == ["grasp", "place"]
        # the stand-in answers like Qwen3-VL (0-1000 relative, on the image resized to multiples of 28 px):
        # back in pixels of the 320x240 image, within the resize rounding
        assert plan.actions[0].bbox == pytest.approx(CUBE_PX, abs=1.5)
        assert plan.actions[1].point == pytest.approx((W / 2, H / 2), abs=1.5)  # the table centre
        assert plan.model == "qwen3-vl-test" and len(vlm.requests) == 1
        assert all(a.pose.header.frame_id == "" for a in response.plan.actions), "poses filled without backproject"
        user = next(m for m in vlm.requests[-1]["messages"] if m["role"] == "user")
        assert any(part.get("type") == "image_url" for part in user["content"]), "the image never reached the VLM"

        response = graph.plan(image=False, backproject=True)  # latest camera frame, poses from depth
        assert response.success, response.message
        targets = plan_from_msg(response.plan).target_set()
        assert targets.frame == "fr3_link0" and [t.method for t in targets.targets] == ["top_surface", "depth"]
        assert response.plan.actions[0].width > 0 and response.plan.actions[0].normal.z == pytest.approx(1.0, abs=0.05)
        grasp, place = (t.position for t in targets.targets)
        # the cube's top is 5 cm above the table, centred on pixel (100, 120); the place point is on the table
        assert grasp == pytest.approx(base_point(100.5, 120.5, CUBE_M), abs=0.01)
        assert place == pytest.approx(base_point(W / 2, H / 2, TABLE_M), abs=0.01)

        # the last plan is shown: an overlay image of the frame and one sphere marker per pose (latched topics)
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from sensor_msgs.msg import Image
        from visualization_msgs.msg import Marker, MarkerArray

        from grounded_planner.ros.convert import image_to_numpy

        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        shown = {}
        graph.node.create_subscription(
            Image, "/grounded_planner/overlay", lambda m: shown.__setitem__("overlay", m), latched
        )
        graph.node.create_subscription(
            MarkerArray, "/grounded_planner/plan_markers", lambda m: shown.__setitem__("markers", m), latched
        )
        spin_until(graph.executor, lambda: len(shown) == 2, 30.0, "overlay image and plan markers")
        overlay = image_to_numpy(shown["overlay"])
        assert overlay.shape == (240, 320, 3) and not np.array_equal(overlay, image_to_numpy(graph.color)), (
            "nothing drawn"
        )
        spheres = [m for m in shown["markers"].markers if m.type == Marker.SPHERE]
        assert len(spheres) == 2 and spheres[0].header.frame_id == "fr3_link0"
        assert spheres[0].pose.position.z == pytest.approx(grasp[2])
    finally:
        graph.close()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_dead_vlm_fails_fast_and_node_recovers(tmp_path, rclpy_context):
    timeout_s = 5.0
    vlm = VLMProcess()
    child = start_planner(vlm.url, tmp_path, "-p", f"timeout_s:={timeout_s}")
    graph = Graph(rclpy_context)
    try:
        assert graph.plan().success
        vlm.kill()
        started = time.monotonic()
        response = graph.plan()
        elapsed = time.monotonic() - started
        assert not response.success
        assert "VLMUnavailableError" in response.message, response.message
        assert elapsed < timeout_s, f"a dead server took {elapsed:.1f} s to report"
        vlm.start()  # same port
        response = graph.plan()
        assert response.success, response.message
    finally:
        graph.close()
        vlm.kill()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_slow_vlm_times_out_without_blocking_other_callbacks(vlm, tmp_path, rclpy_context):
    from rcl_interfaces.srv import GetParameters

    from grounded_planner.vlm.fake_server import Reply

    timeout_s = 2.0
    vlm.script.append(Reply(delay_s=30.0))  # answers far too late
    child = start_planner(vlm.base_url, tmp_path, "-p", f"timeout_s:={timeout_s}")
    graph = Graph(rclpy_context)
    try:
        assert graph.client.wait_for_service(timeout_sec=30.0)
        reach(graph.executor, graph.node, "/grounded_planner/plan", 30.0)
        started = time.monotonic()
        pending = graph.client.call_async(graph.Request(instruction=INSTRUCTION, image=graph.color))
        spin_until(graph.executor, lambda: len(vlm.requests) >= 1, 30.0, "the request to reach the slow VLM")
        # while the plan request hangs in the VLM, the node still answers its parameter service
        params = call(graph.executor, graph.params, GetParameters.Request(names=["backend"]), 10.0, "get_parameters")
        assert not pending.done(), "the slow VLM answered?"
        assert params.values[0].string_value == "openai"
        spin_until(graph.executor, pending.done, timeout_s + 20.0, "the slow plan request to fail")
        elapsed = time.monotonic() - started
        response = pending.result()
        assert not response.success and "Timeout" in response.message, response.message
        assert elapsed < timeout_s + 5.0, f"timed out only after {elapsed:.1f} s (timeout_s {timeout_s})"
    finally:
        graph.close()
        vlm.stop()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_parameters_are_checked_on_set_and_a_new_model_takes_effect(vlm, tmp_path, rclpy_context):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    child = start_planner(vlm.base_url, tmp_path)
    graph = Graph(rclpy_context)
    try:
        setter = graph.node.create_client(SetParameters, "/planner/set_parameters")

        def set_param(name, **value):
            request = SetParameters.Request(parameters=[Parameter(name=name, value=ParameterValue(**value))])
            return call(graph.executor, setter, request, 30.0, f"set {name}").results[0]

        refused = set_param("backend", type=ParameterType.PARAMETER_STRING, string_value="chatgpt")
        assert not refused.successful and "backend must be one of openai" in refused.reason
        refused = set_param("timeout_s", type=ParameterType.PARAMETER_DOUBLE, double_value=-1.0)
        assert not refused.successful and "timeout_s must be > 0" in refused.reason
        assert graph.plan().plan.model == "qwen3-vl-test"
        assert set_param("model", type=ParameterType.PARAMETER_STRING, string_value="qwen3-vl-other").successful
        response = graph.plan()
        assert response.success and response.plan.model == "qwen3-vl-other", "the planner was not rebuilt"
        assert vlm.requests[-1]["model"] == "qwen3-vl-other"
    finally:
        graph.close()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_without_a_camera_the_reason_names_the_missing_topic(vlm, tmp_path, rclpy_context):
    child = start_planner(vlm.base_url, tmp_path, "-p", "frame_wait_s:=0.5")
    graph = Graph(rclpy_context, camera=False)
    try:
        response = graph.plan(image=False)
        assert not response.success and "nothing received on /camera/camera/color/image_raw" in response.message
        response = graph.plan(backproject=True)  # the image comes with the request; depth never does
        assert not response.success
        assert "back-projection failed" in response.message and "aligned_depth_to_color" in response.message
        assert len(response.plan.actions) == 2, "the pixel plan is still returned when only back-projection fails"
    finally:
        graph.close()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_bad_parameter_values_are_refused(tmp_path, ros_domain):
    child = spawn_python(["-m", "grounded_planner.ros.planner_node", "--ros-args", "-p", "backend:=chatgpt"])
    out, _ = child.communicate(timeout=60)
    assert child.returncode != 0 and "parameter 'backend' must be one of openai" in out, out
    assert "Traceback" not in out, out
