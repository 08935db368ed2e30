"""Node parameters off their defaults (issue 31.2): each one that changes what a node does fails a test here when the
node ignores it. The nodes run in this process on the test's own ROS domain (``rclpy_context``); what each check reads
is what a user sees -- the topics the node subscribes and publishes on (``ros2 node info``), the QoS it hands the
middleware, the options its recorder writes with, the frames and verdicts it serves -- not a private copy of the
parameter."""

from __future__ import annotations

import time

import pytest

from conftest import requires_ros

pytestmark = [requires_ros, pytest.mark.ros]


def _overrides(values: dict):
    from rclpy.parameter import Parameter

    return [Parameter(name, value=value) for name, value in values.items()]


def _graph(node, want: set[str], timeout_s: float = 10.0) -> tuple[set[str], set[str]]:
    """(subscribed, published) topic names of ``node`` once every name in ``want`` appears among them."""
    deadline = time.monotonic() + timeout_s
    while True:
        subs = {n for n, _ in node.get_subscriber_names_and_types_by_node(node.get_name(), node.get_namespace())}
        pubs = {n for n, _ in node.get_publisher_names_and_types_by_node(node.get_name(), node.get_namespace())}
        if want <= subs | pubs or time.monotonic() > deadline:
            return subs, pubs
        time.sleep(0.05)  # the graph cache of this very process: no spinning needed, only the rmw's update


# -- backprojection_node: its six topic parameters -----------------------------------------------------------------


def test_backprojection_node_wires_every_topic_parameter(rclpy_context):
    from grounded_planner.ros import names
    from grounded_planner.ros.backprojection_node import BackprojectionNode

    custom = {
        "input_topic": "/other/plan_pixels",
        "output_topic": "/other/plan_3d",
        "targets_topic": "/other/targets",
        "markers_topic": "/other/target_markers",
        "camera_info_topic": "/other/color/camera_info",
        "depth_camera_info_topic": "/other/depth/camera_info",
    }
    node = BackprojectionNode(context=rclpy_context, parameter_overrides=_overrides(custom))
    try:
        subs, pubs = _graph(node, set(custom.values()))
        assert {custom[k] for k in ("input_topic", "camera_info_topic", "depth_camera_info_topic")} <= subs, subs
        assert {custom[k] for k in ("output_topic", "targets_topic", "markers_topic")} <= pubs, pubs
        defaults = {
            "/" + t
            for t in (
                names.PLAN_PIXELS,
                names.PLAN_3D,
                names.TARGETS,
                names.TARGET_MARKERS,
                names.COLOR_CAMERA_INFO,
                names.ALIGNED_DEPTH_CAMERA_INFO,
            )
        }
        assert not defaults & (subs | pubs), defaults & (subs | pubs)
    finally:
        node.destroy_node()


def test_backprojection_node_trusts_depth_registered_depth(rclpy_context):
    """depth_registered:=true: depth whose own camera_info differs from colour's (a depth camera registered to colour
    by other means) is back-projected; the default refuses it (DepthNotAlignedError, test_ros_frames.py)."""
    import copy
    import threading

    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros.backprojection_node import BackprojectionNode
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner.ros.frames import DepthNotAlignedError, check_depth_aligned
    from helpers.camera import publish_camera
    from helpers.tabletop import scene_messages

    _color, depth, info = scene_messages()
    depth_info = copy.deepcopy(info)
    depth_info.k = [info.k[0] + 25.0, *list(info.k)[1:]]  # its own focal length: not the colour camera's
    with pytest.raises(DepthNotAlignedError):  # what the default (depth_registered false) says of this pair
        check_depth_aligned(depth, info, depth_info)
    node = BackprojectionNode(context=rclpy_context, parameter_overrides=_overrides({"depth_registered": True}))
    probe = rclpy.create_node("depth_camera", context=rclpy_context)
    publish_camera(probe, {"depth": depth, "info": info, "depth_info": depth_info})  # one stamp a frame, 10 Hz
    executor = MultiThreadedExecutor(num_threads=3, context=rclpy_context)
    executor.add_node(node)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        plan = GroundedPlan(
            "put the red cube on the right",
            (320, 240),
            [
                GroundedAction("grasp", "red cube", bbox=(80.0, 90.0, 120.0, 150.0)),
                GroundedAction("place", "red cube", "table", point=(240.0, 200.0)),
            ],
        )
        _msg, located = node.process(plan_to_msg(plan))
        assert all(action.target_3d is not None for action in located.actions)
    finally:
        executor.shutdown()
        spinner.join(timeout=10)
        probe.destroy_node()
        node.destroy_node()


def test_planner_node_trusts_depth_registered_depth(rclpy_context):
    """planner_node's depth_registered:=true: a plan request with backproject on, depth whose own camera_info differs
    from colour's, gets its 3D targets; the default says why not (DepthNotAlignedError, a plan left in pixels)."""
    import copy
    import threading

    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    pytest.importorskip("httpx")
    from grounded_planner.ros.planner_node import PlannerNode
    from grounded_planner.vlm.fake_server import FakeVLMServer
    from grounded_planner_interfaces.srv import GetGroundedPlan
    from helpers.camera import publish_camera
    from helpers.tabletop import INSTRUCTION, SCENE_COLORS, scene_messages

    color, depth, info = scene_messages()
    depth_info = copy.deepcopy(info)
    depth_info.k = [info.k[0] + 25.0, *list(info.k)[1:]]  # its own focal length: not the colour camera's
    server = FakeVLMServer(SCENE_COLORS).start()
    common = {"backend": "openai", "base_url": server.base_url, "model": "qwen3-vl-test", "max_retries": 0}
    probe = rclpy.create_node("depth_camera", context=rclpy_context)
    publish_camera(probe, {"color": color, "depth": depth, "info": info, "depth_info": depth_info})
    nodes = [
        PlannerNode(context=rclpy_context, parameter_overrides=_overrides({**common, "depth_registered": flag}))
        for flag in (True, False)
    ]
    executor = MultiThreadedExecutor(num_threads=3, context=rclpy_context)
    for node in (probe, *nodes):
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        request = GetGroundedPlan.Request(instruction=INSTRUCTION, backproject=True)

        def plan_with_depth_info(node):
            """The node's answer once the frame set it took holds the depth camera_info (it arrives on its own)."""
            deadline = time.monotonic() + 10.0
            while True:
                plan, _header, _rgb, note, frames = node.plan(request)
                if frames.depth_camera_info is not None or time.monotonic() > deadline:
                    assert frames.depth_camera_info is not None, "no depth camera_info reached the planner"
                    return plan, note
                time.sleep(0.1)

        trusted, note = plan_with_depth_info(nodes[0])
        assert trusted.actions and trusted.is_backprojected, note
        assert all(action.target_3d is not None for action in trusted.actions)
        refused, note = plan_with_depth_info(nodes[1])  # the default, on the same frames
        assert not refused.is_backprojected and "DepthNotAlignedError" in note, note
    finally:
        executor.shutdown()
        spinner.join(timeout=10)
        for node in (probe, *nodes):
            node.destroy_node()
        server.stop()


# -- planner_node: camera_info_topic, depth_camera_info_topic, request_queue_depth ----------------------------------------------------------


def test_planner_node_takes_camera_info_topics_and_request_queue_depth(rclpy_context):
    from grounded_planner.ros import names
    from grounded_planner.ros.planner_node import PlannerNode

    node = PlannerNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {
                "model": "m",
                "base_url": "http://127.0.0.1:9/v1",
                "camera_info_topic": "/other/color/camera_info",
                "depth_camera_info_topic": "/other/depth/camera_info",
                "request_queue_depth": 7,
            }
        ),
    )
    try:
        subs, _ = _graph(node, {"/other/color/camera_info", "/other/depth/camera_info"})
        assert {"/other/color/camera_info", "/other/depth/camera_info"} <= subs, subs
        assert not {"/" + names.COLOR_CAMERA_INFO, "/" + names.ALIGNED_DEPTH_CAMERA_INFO} & subs, subs
        # the depth the service's reader history is created with: requests beyond it are dropped by DDS
        (service,) = [s for s in node.services if s.service_name.lstrip("/") == names.PLAN_SERVICE]
        assert service.qos_profile.depth == 7
        # the camera topics are read once at startup, as back-projection's are: a change at run time is refused,
        # not taken and ignored (the node went on reading the old topics)
        for name in ("color_topic", "depth_topic", "camera_info_topic", "depth_camera_info_topic"):
            (result,) = node.set_parameters(_overrides({name: "/elsewhere/topic"}))
            assert not result.successful and "read-only" in result.reason, (name, result.reason)
    finally:
        node.destroy_node()


def test_planner_node_model_settings_reach_the_planner_config(rclpy_context, tmp_path):
    from grounded_planner.ros.params import values
    from grounded_planner.ros.planner_node import PARAMS, PlannerNode, planner_config
    from grounded_planner.vlm.config import PlannerConfig

    chosen = {
        "model": "qwen3-vl-test",
        "base_url": "http://127.0.0.1:9/v1",
        "base_urls": ["http://127.0.0.1:10/v1"],
        "api_key_env": "MY_VLM_KEY",
        "timeout_s": 7.5,
        "max_retries": 3,
        "prompt_family": "gemini",
        "record_file": str(tmp_path / "plans.jsonl"),
    }
    node = PlannerNode(context=rclpy_context, parameter_overrides=_overrides(chosen))
    try:
        # the config every plan request's planner is built from (make_planner(planner_config(...)) on first use)
        config = planner_config(values(node, PARAMS))
    finally:
        node.destroy_node()
    default = PlannerConfig()
    assert all(getattr(default, k) != v for k, v in chosen.items())
    assert {k: getattr(config, k) for k in chosen} == chosen


# -- executor_node: camera_info_topic (closed loop), link_check_period_s -------------------------------------------


def test_executor_node_closed_loop_reads_camera_info_topic_and_checks_the_link_every_period(rclpy_context, tmp_path):
    from grounded_planner.ros import names
    from grounded_planner.ros.executor_node import ExecutorNode
    from helpers.tabletop import EXTRINSICS

    (tmp_path / "extrinsics.yaml").write_text(EXTRINSICS)
    node = ExecutorNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {
                "closed_loop": True,
                "extrinsics_file": str(tmp_path / "extrinsics.yaml"),
                "camera_info_topic": "/other/color/camera_info",
                "link_check_period_s": 0.25,
            }
        ),
    )
    try:
        node.trigger_configure()  # what autostart does in run_node: the closed loop's camera is taken at configure
        subs, _ = _graph(node, {"/other/color/camera_info"})
        assert "/other/color/camera_info" in subs and "/" + names.COLOR_CAMERA_INFO not in subs, subs
        # the idle link check (a robot that dropped out is noticed within this period) runs every 0.25 s
        assert 250_000_000 in [timer.timer_period_ns for timer in node.timers]
    finally:
        node.destroy_node()


# -- rollout_logger_node: camera_info_topic, task, scene_id and the recording options -------------------------------


def test_rollout_logger_takes_camera_info_topic_labels_and_recording_options(rclpy_context, tmp_path):
    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros import names
    from grounded_planner.ros.convert import plan_to_msg
    from grounded_planner.ros.rollout_logger_node import RolloutLoggerNode
    from grounded_planner.rollout.record import RecordingOptions, find_rollouts

    default = RecordingOptions()
    chosen = {"png_level": 9, "jpeg_quality": 33, "compression": "lz4", "chunk_size": 4096, "chunk_interval_s": 0.125}
    assert all(getattr(default, k) != v for k, v in chosen.items())  # each one off the default
    node = RolloutLoggerNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {
                "log_dir": str(tmp_path),
                "camera_info_topic": "/other/color/camera_info",
                "task": "stacking",
                "scene_id": "kitchen_3",
                **chosen,
            }
        ),
    )
    try:
        subs, _ = _graph(node, {"/other/color/camera_info"})
        assert "/other/color/camera_info" in subs and "/" + names.COLOR_CAMERA_INFO not in subs, subs
        # one episode: a plan opens it, shutting the logger down closes it (aborted: no execution result came)
        node._on_plan(
            plan_to_msg(
                GroundedPlan(
                    "put the cup on the plate",
                    (64, 48),
                    [GroundedAction("grasp", "cup", bbox=(10.0, 10.0, 20.0, 20.0))],
                )
            )
        )
    finally:
        node.destroy_node()
    (record,) = find_rollouts([tmp_path])
    assert (record.data["task"], record.data["scene_id"]) == ("stacking", "kitchen_3")  # default: the instruction, ''
    assert {k: record.info.recording[k] for k in chosen} == chosen  # the options the episode was recorded with


# -- camera_node: serial, color_profile, depth_profile, fps, loop_playback, frame_id, camera_namespace, read_timeout_s ------------------------------------------


class _ReadRecorder:
    """Wraps a real pyrealsense2 software-device source and notes the timeout of every read."""

    def __init__(self, source):
        self.source, self.timeouts = source, []

    def read(self, timeout_s: float = 1.0):
        self.timeouts.append(timeout_s)
        return self.source.read(timeout_s)

    def __getattr__(self, name: str):  # restarts, ended: the source's own
        return getattr(self.source, name)

    def close(self) -> None:
        self.source.close()


def test_camera_node_publishes_under_camera_namespace_and_reads_with_read_timeout_s(rclpy_context):
    pytest.importorskip("pyrealsense2")
    from grounded_planner.ros.camera_node import CameraNode
    from grounded_planner.ros.realsense import SoftwareCamera
    from helpers.software_camera_node import COLOR_SIZE, DEPTH_SIZE, FX_PX

    camera = SoftwareCamera(COLOR_SIZE, DEPTH_SIZE, FX_PX, fps=30)  # nothing pushed: every read times out
    sources = []
    node = CameraNode(
        source_factory=lambda p: sources.append(_ReadRecorder(camera.source())) or sources[-1],
        context=rclpy_context,
        parameter_overrides=_overrides({"camera_namespace": "wrist/d405", "read_timeout_s": 0.125}),
    )
    try:
        node.trigger_configure()
        node.trigger_activate()
        _, pubs = _graph(node, {"/wrist/d405/color/image_raw"})
        assert {
            "/wrist/d405/color/image_raw",
            "/wrist/d405/color/camera_info",
            "/wrist/d405/aligned_depth_to_color/image_raw",
            "/wrist/d405/aligned_depth_to_color/camera_info",
        } <= pubs, pubs
        assert not any(t.startswith("/camera/camera/") for t in pubs), pubs
        deadline = time.monotonic() + 10.0
        while not sources or not sources[0].timeouts:
            assert time.monotonic() < deadline, "the camera never read a frame"
            time.sleep(0.01)
        assert sources[0].timeouts[0] == 0.125
    finally:
        node.destroy_node()
        camera.close()


def test_camera_node_opens_the_camera_serial_profiles_and_fps_name(rclpy_context):
    """No RealSense is attached here: pyrealsense2 refuses the start, and the refusal names the serial asked for
    (ignored, the camera node would have asked for any camera), and the stream profile and rate it asked for."""
    pytest.importorskip("pyrealsense2")
    from grounded_planner.ros.camera_node import CameraNode

    node = CameraNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {"serial": "123456789012", "color_profile": "640x480", "depth_profile": "640x360", "fps": 15}
        ),
    )
    try:
        node.trigger_configure()
        assert "cannot start camera 123456789012 with color 640x480, depth 640x360 @ 15 fps" in node.configure_error, (
            node.configure_error
        )
    finally:
        node.destroy_node()


def test_camera_node_plays_a_recording_once_without_loop_playback_under_its_frame_id(rclpy_context, tmp_path, capfd):
    pytest.importorskip("pyrealsense2")
    from grounded_planner.ros.camera_node import CameraNode
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image

    from grounded_planner.ros import names
    from helpers.software_camera_node import record_pattern

    frames = 15
    recording = record_pattern(tmp_path / "session.db3", frames=frames)
    node = CameraNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {
                "playback_file": str(recording),
                "loop_playback": False,
                "read_timeout_s": 0.125,
                "frame_id": "d405_optical",
            }
        ),
    )
    probe = rclpy.create_node("camera_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(probe)
        got = []
        probe.create_subscription(Image, "/" + names.COLOR_IMAGE, got.append, QoSProfile(depth=50))
        node.trigger_configure()
        node.trigger_activate()
        # the recording plays once (half a second at 30 fps) and the count stops; looped, it would go on rising
        deadline, last, still_since = time.monotonic() + 30.0, -1, time.monotonic()
        while time.monotonic() - still_since < 2.0 or node.frames_published == 0:
            assert time.monotonic() < deadline, f"playback never ended: {node.frames_published} frames published"
            if node.frames_published != last:
                last, still_since = node.frames_published, time.monotonic()
            executor.spin_once(timeout_sec=0.05)
        assert 0 < node.frames_published <= frames
        assert got and {m.header.frame_id for m in got} == {"d405_optical"}  # frame_id: on every image
        # it says the recording ended, once, instead of warning every 5 s that no frames come
        logged = capfd.readouterr().err
        assert f"recording {recording} ended after {node.frames_published} frames (played once)" in logged, logged
        assert "no aligned frames" not in logged
    finally:
        probe.destroy_node()
        node.destroy_node()


# -- console_node: host, token, executor_config_file, plan_timeout_s, max_frame_rate, max_image_width, jpeg_quality,
#    live_while_planning


def test_console_node_takes_host_token_executor_config_file_plan_timeout_and_frame_settings(rclpy_context, tmp_path):
    import json
    import urllib.error
    import urllib.request

    import numpy as np
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image

    import rclpy

    from grounded_planner.console.jpeg import encode_jpeg, scale_to_width
    from grounded_planner.plan import GroundedAction, GroundedPlan, Target
    from grounded_planner.ros import names
    from grounded_planner.ros.console_node import ConsoleNode
    from grounded_planner.ros.convert import numpy_to_image
    from helpers.ros_wait import spin_until

    # a workspace that ends at x = 0.4 m: the built-in one (to 0.8 m) takes the grasp at x = 0.5 m
    (tmp_path / "executor.yaml").write_text(
        "safety:\n  workspace_min_m: [0.1, -0.45, 0.0]\n  workspace_max_m: [0.4, 0.45, 0.6]\n"
    )
    node = ConsoleNode(
        context=rclpy_context,
        parameter_overrides=_overrides(
            {
                "host": "127.0.0.2",
                "port": 0,
                "rollouts_dir": str(tmp_path / "rollouts"),
                "executor_config_file": str(tmp_path / "executor.yaml"),
                "max_image_width": 160,
                "jpeg_quality": 5,
                "plan_timeout_s": 7.5,
                "max_frame_rate": 4.0,
                "live_while_planning": True,
                "token": "sixteen-chars-tok",
            }
        ),
    )
    probe = rclpy.create_node("console_probe", context=rclpy_context)
    try:
        # host: the console answers on 127.0.0.2 (another loopback address than the default 127.0.0.1);
        # token: even there (loopback, where none is needed by default) a request without it is refused
        assert node.url.startswith("http://127.0.0.2:"), node.url
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(node.url + "api/state", timeout=10)
        assert refused.value.code == 401
        with urllib.request.urlopen(node.url + "api/state?token=sixteen-chars-tok", timeout=10) as reply:
            assert reply.status == 200 and json.load(reply) is not None

        # executor_config_file: the previewed step is judged by that file's envelope
        grasp = GroundedAction("grasp", "cube", bbox=(10.0, 10.0, 20.0, 20.0))
        grasp.target_3d = Target(0, "grasp", "cube", np.array([0.5, 0.0, 0.05]), width=0.03, frame="fr3_link0")
        (step,) = node._preview(GroundedPlan("pick up the cube", (64, 48), [grasp]))
        assert step.verdict == "outside_workspace", (step.verdict, step.verdict_message)

        # plan_timeout_s: what the console's plan requests wait for an answer
        assert node.app.plan_timeout_s == 7.5
        # max_frame_rate: the cap the app's frame thread keeps (test_console_app checks the spacing it makes)
        assert node.app.max_frame_rate == 4.0
        # live_while_planning: a plan request being answered does not pause the live view (by default it does:
        # test_console_app); plan_timeout_s is also how long a request with no answer keeps it paused
        node.app.plan_requests.started(("a client", 1))
        assert node.app.live_paused() is False and node.app.plan_requests.lost_after_s == 7.5
        # both can be set while the console runs (`ros2 param set /console live_while_planning false`)
        from rclpy.parameter import Parameter

        results = node.set_parameters(
            [Parameter("live_while_planning", value=False), Parameter("plan_timeout_s", value=9.0)]
        )
        assert all(r.successful for r in results), results
        assert node.app.live_paused() is True
        assert node.app.plan_timeout_s == node.app.plan_requests.lost_after_s == 9.0
        node.app.plan_requests.answered(("a client", 1))
        assert node.app.live_paused() is False

        # max_image_width: a 320 px frame is shown 160 px wide (the aspect kept)
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        executor.add_node(probe)
        pub = probe.create_publisher(Image, "/" + names.COLOR_IMAGE, QoSProfile(depth=2))
        rgb = np.random.default_rng(3).integers(0, 255, (240, 320, 3), dtype=np.uint8)
        msg = numpy_to_image(rgb, "rgb8")
        frame = None

        def shown():
            nonlocal frame
            pub.publish(msg)
            frame = node.latest_frame(0)
            return frame is not None

        spin_until(executor, shown, 30.0, "the console to show a camera frame")
        assert (frame.width, frame.height) == (160, 120)
        # jpeg_quality: the frame is encoded at quality 5
        shown = scale_to_width(rgb, 160)
        assert frame.jpeg == encode_jpeg(shown, 5) != encode_jpeg(shown, 80)
    finally:
        probe.destroy_node()
        node.destroy_node()


# -- bag_player_node: autostart -------------------------------------------------------------------------------------


def test_bag_player_without_autostart_waits_for_play(rclpy_context, tmp_path):
    from sensor_msgs.msg import CameraInfo

    from grounded_planner.ros.bag_player_node import BagPlayerNode
    from grounded_planner.ros.bags import write_bag

    info = CameraInfo(width=32, height=24, k=[30.0, 0.0, 16.0, 0.0, 30.0, 12.0, 0.0, 0.0, 1.0])
    bag = write_bag(
        tmp_path / "bag",
        [("/camera/camera/color/camera_info", 1_000_000_000 + i * 10_000_000, info) for i in range(3)],
        "mcap",
    )
    node = BagPlayerNode(context=rclpy_context, parameter_overrides=_overrides({"bag": str(bag), "autostart": False}))
    try:
        assert not node.finished.wait(1.0) and node.messages_published == 0  # nothing played by itself
        node.play()
        assert node.finished.wait(30.0) and node.messages_published == 3
    finally:
        node.destroy_node()
