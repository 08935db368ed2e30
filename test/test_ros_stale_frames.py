"""Fresh frames or a clear refusal (issue 30.1): a camera publisher killed mid-run leaves planner_node with old frames,
and a plan request then fails naming the topic and the age (and planner_status says so) instead of planning on them;
colour, depth and camera_info are taken as one matched set before the model call, and that set is what the rollout
records. Real processes: the camera, planner_node and rollout_logger_node each in their own."""

from __future__ import annotations

import re
import time

import pytest

from conftest import requires_ros
from helpers.camera import TOPICS, start_camera_process
from helpers.ros_wait import call, spin_until, start_node, stop_process

pytestmark = [requires_ros, pytest.mark.ros]
pytest.importorskip("httpx")

from helpers.tabletop import INSTRUCTION, SCENE_COLORS  # noqa: E402

from grounded_planner.ros import names  # noqa: E402


def start_camera(shift_s: float = 0.0):
    """A 10 Hz camera in its own process, as realsense-ros publishes: colour, aligned depth and camera_info with one
    stamp each frame (depth ``shift_s`` older when given: a depth stream that is not of the colour's instant)."""
    return start_camera_process(older_s={"depth": shift_s} if shift_s else None)


@pytest.fixture
def vlm():
    from grounded_planner.vlm.fake_server import FakeVLMServer

    server = FakeVLMServer(SCENE_COLORS).start()
    yield server
    server.stop()


class Probe:
    """The test's node: a plan client, the planner's parameters, and what planner_status and the logger say."""

    def __init__(self, context):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from rcl_interfaces.srv import SetParameters
        from std_msgs.msg import String

        from grounded_planner_interfaces.msg import PlannerStatus
        from grounded_planner_interfaces.srv import GetGroundedPlan

        self.node = rclpy.create_node("stale_probe", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.client = self.node.create_client(GetGroundedPlan, "/grounded_planner/plan")
        self.set_params = self.node.create_client(SetParameters, "/planner/set_parameters")
        self.Request = GetGroundedPlan.Request
        self.statuses: list = []
        self.node.create_subscription(
            PlannerStatus, "/grounded_planner/planner_status", self.statuses.append, QoSProfile(depth=10)
        )
        self.closed: list[str] = []
        self.node.create_subscription(
            String,
            "/grounded_planner/rollout/closed",
            lambda m: self.closed.append(m.data),
            QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL),
        )

    def plan(self, backproject: bool = True):
        # The camera's and the planner's processes discover each other in their own time (under load, longer than
        # the 1 s frame_wait_s these tests give the planner): a request before that fails "nothing received", before
        # the model is asked, and is asked again. Every other answer, stale and unmatched frames included, is the
        # test's to check.
        deadline = time.monotonic() + 30.0
        while True:
            response = call(
                self.executor,
                self.client,
                self.Request(instruction=INSTRUCTION, backproject=backproject),
                60.0,
                "/grounded_planner/plan",
            )
            if response.success or "nothing received on" not in response.message or time.monotonic() > deadline:
                return response
            time.sleep(0.2)

    def set(self, name: str, value: float) -> None:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        request = SetParameters.Request(
            parameters=[
                Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value))
            ]
        )
        result = call(self.executor, self.set_params, request, 30.0, "/planner/set_parameters")
        assert result.results[0].successful, result.results[0].reason

    def close(self):
        self.node.destroy_node()


def start_planner(vlm_url, tmp_path, *extra):
    from test_ros_planner_node import start_planner as start

    return start(vlm_url, tmp_path, "-p", "frame_wait_s:=1.0", *extra)


def test_frame_check_names_the_stale_topic_its_age_and_an_unmatched_pair():
    from types import SimpleNamespace

    from grounded_planner.ros.frames import FrameCheck, Snapshot, StaleFrameError, UnmatchedFramesError

    def msg(t_s):
        sec, nsec = divmod(int(t_s * 1e9), 1_000_000_000)
        return SimpleNamespace(header=SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nsec)))

    topics = {"color": "/c", "depth": "/d", "camera_info": "/i"}
    keys = ("color", "depth", "camera_info")
    now = lambda: int(100.0 * 1e9)  # noqa: E731
    fresh = Snapshot(msg(99.8), msg(99.81), msg(99.8))
    FrameCheck(now, 1.0, 0.05)(fresh, keys, topics)
    with pytest.raises(StaleFrameError, match=r"^stale frame: /d is 34\.2 s old \(max_frame_age_s 1\)$"):
        FrameCheck(now, 1.0, 0.05)(Snapshot(msg(99.8), msg(65.8), msg(99.8)), keys, topics)
    FrameCheck(now, 0.0, 50.0)(Snapshot(msg(99.8), msg(65.8), msg(99.8)), keys, topics)  # 0: no age limit
    with pytest.raises(
        UnmatchedFramesError, match=r"/d is stamped 0\.200 s before /c \(frame_stamp_tolerance_s 0\.05\)"
    ):
        FrameCheck(now, 1.0, 0.05)(Snapshot(msg(99.8), msg(99.6), msg(99.8)), keys, topics)
    FrameCheck(now, 1.0, 0.25)(Snapshot(msg(99.8), msg(99.6), msg(99.8)), keys, topics)  # a wider tolerance
    with pytest.raises(StaleFrameError, match="the request's image is 5.0 s old"):
        FrameCheck(now, 1.0, 0.05, given_ns=int(95e9))(fresh, keys, topics)
    with pytest.raises(StaleFrameError, match="different origins"):  # stamps of 1970 against a 2026 clock
        FrameCheck(lambda: 1_780_000_000 * 10**9, 1.0, 0.05)(fresh, keys, topics)


def test_a_killed_camera_makes_the_next_plan_a_clear_refusal(vlm, tmp_path, rclpy_context):
    camera = start_camera()
    child = start_planner(vlm.base_url, tmp_path)
    probe = Probe(rclpy_context)
    try:
        response = probe.plan()
        assert response.success, response.message
        assert len(response.plan.actions) == 2

        camera.kill()  # SIGKILL: the camera stops mid-stream, its last frames stay in the planner's reader
        camera.wait(timeout=10)
        killed = time.monotonic()
        spin_until(probe.executor, lambda: time.monotonic() - killed > 1.5, 5.0, "the last frame to age past 1 s")
        before = len(probe.statuses)
        response = probe.plan()
        assert not response.success
        assert re.search(r"stale frame: /camera/camera/\S+ is \d+\.\d s old \(max_frame_age_s 1\)", response.message), (
            response.message
        )
        assert len(response.plan.actions) == 0, "no plan is made on a stale frame"
        spin_until(probe.executor, lambda: len(probe.statuses) > before, 10.0, "planner_status of the refusal")
        assert not probe.statuses[-1].success and "stale frame" in probe.statuses[-1].message

        probe.set("max_frame_age_s", 60.0)  # an operator who accepts older frames says so
        response = probe.plan()
        assert response.success, response.message
    finally:
        probe.close()
        out = stop_process(child)
        if camera.poll() is None:
            camera.kill()
    assert "Traceback" not in out, out


def test_depth_of_another_instant_is_refused_unless_the_tolerance_allows_it(vlm, tmp_path, rclpy_context):
    camera = start_camera(shift_s=0.2)
    child = start_planner(vlm.base_url, tmp_path)
    probe = Probe(rclpy_context)
    try:
        response = probe.plan()
        assert not response.success
        assert re.search(
            r"frames do not match: /camera/camera/aligned_depth_to_color/image_raw is stamped 0\.2\d\d s "
            r"before /camera/camera/color/image_raw \(frame_stamp_tolerance_s 0\.05\)",
            response.message,
        ), response.message
        response = probe.plan(backproject=False)  # colour alone is one instant: planned
        assert response.success, response.message
        probe.set("frame_stamp_tolerance_s", 0.3)
        response = probe.plan()
        assert response.success and response.plan.actions[0].pose.header.frame_id == "fr3_link0", response.message
    finally:
        probe.close()
        out = stop_process(child)
        stop_process(camera)
    assert "Traceback" not in out, out


def test_the_rollout_records_the_frame_set_the_plan_was_made_on(vlm, tmp_path, rclpy_context):
    from grounded_planner.rollout.bag import read_bag, stamp_to_ns
    from grounded_planner.rollout.record import RolloutTopics
    from grounded_planner.vlm.fake_server import Reply

    vlm.script.append(Reply(delay_s=1.5))  # the model answers 1.5 s after the frame: 15 newer frames by then
    camera = start_camera()
    logger = start_node("rollout_logger_node", f"log_dir:={tmp_path / 'rollouts'}", "frame_rate_hz:=0.0")
    child = start_planner(vlm.base_url, tmp_path)
    probe = Probe(rclpy_context)
    try:
        spin_until(
            probe.executor,
            lambda: all(
                probe.node.count_subscribers(topic) > 0
                for topic in (
                    names.PLAN_FRAMES_COLOR,
                    names.PLAN_FRAMES_DEPTH,
                    names.PLAN_FRAMES_CAMERA_INFO,
                    names.LAST_PLAN,
                )
            ),
            30.0,
            "the logger to subscribe",
        )
        response = probe.plan()
        assert response.success, response.message
        plan_ns = stamp_to_ns(response.plan.header.stamp)
        topics = RolloutTopics()

        wanted = (topics.color_compressed, topics.depth_compressed, topics.camera_info)  # the logger's default

        def logged():
            # every rollout: a request that failed before the model was asked ("nothing received", retried by
            # probe.plan) has a rollout of its own, before the plan's (reading only the first found lost a CI run)
            found = {}
            for bag in sorted((tmp_path / "rollouts").glob("*/rollout.mcap")):
                for m in read_bag(bag.parent, topics=list(wanted)):
                    found.setdefault(m.topic, []).append(stamp_to_ns(m.msg.header.stamp))
            return found

        try:
            spin_until(
                probe.executor,
                lambda: all(plan_ns in logged().get(t, []) for t in wanted),
                20.0,
                "the plan's colour, depth and camera_info in the rollout",
            )
        except AssertionError as exc:  # say what was logged instead, and what the logger and the planner said
            raise AssertionError(
                f"{exc}; the plan's stamp {plan_ns}, the rollout's {logged()}; logger: "
                f"{stop_process(logger)[-3000:]}; planner: {stop_process(child)[-3000:]}"
            ) from None
    finally:
        probe.close()
        out = stop_process(child)
        stop_process(logger)
        stop_process(camera)
    assert "Traceback" not in out, out


def test_a_logger_matched_after_the_plan_still_gets_the_plans_frame_set(vlm, tmp_path, rclpy_context):
    """The planner publishes a plan's frame set only while someone subscribes; a subscriber the middleware matches
    after the plan (a logger that just started, or one discovery had not matched yet: a CI run lost a rollout's frames
    so) still gets the newest set, the plan's own."""
    from sensor_msgs.msg import CameraInfo, Image

    from grounded_planner.rollout.bag import stamp_to_ns
    from grounded_planner.ros.frames import PLAN_FRAMES_QOS

    camera = start_camera()
    child = start_planner(vlm.base_url, tmp_path)
    probe = Probe(rclpy_context)
    try:
        response = probe.plan()  # nobody subscribes to the frame set yet
        assert response.success, response.message
        plan_ns = stamp_to_ns(response.plan.header.stamp)
        got: dict[str, list[int]] = {}
        for topic, kind in (
            (names.PLAN_FRAMES_COLOR, Image),
            (names.PLAN_FRAMES_DEPTH, Image),
            (names.PLAN_FRAMES_CAMERA_INFO, CameraInfo),
        ):
            probe.node.create_subscription(
                kind,
                "/" + topic,
                lambda m, t=topic: got.setdefault(t, []).append(stamp_to_ns(m.header.stamp)),
                PLAN_FRAMES_QOS,
            )
        spin_until(
            probe.executor,
            lambda: (
                plan_ns in got.get(names.PLAN_FRAMES_COLOR, [])
                and got.get(names.PLAN_FRAMES_DEPTH)
                and got.get(names.PLAN_FRAMES_CAMERA_INFO)
            ),
            20.0,
            "the plan's frame set for a subscriber matched after the plan",
        )
    finally:
        probe.close()
        out = stop_process(child)
        stop_process(camera)
    assert "Traceback" not in out, out


def test_planner_node_uses_the_server_pool_of_base_urls(vlm, tmp_path, rclpy_context):
    """Issue 30.5: planner_node takes the CLI's server pool: base_url (here a dead server) and base_urls; a request
    goes around the dead one to a live one."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on: a dead server
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    camera = start_camera()
    child = start_planner(dead, tmp_path, "-p", f"base_urls:=['{vlm.base_url}']")
    probe_node = Probe(rclpy_context)
    try:
        response = probe_node.plan(backproject=False)
        assert response.success, response.message
        assert len(response.plan.actions) == 2
    finally:
        probe_node.close()
        out = stop_process(child)
        stop_process(camera)
    assert "Traceback" not in out, out


def test_the_closed_loop_refuses_to_check_a_step_on_a_dead_camera(rclpy_context):
    """The executor's closed loop reads frames as the planner does (issue 30.1): a check takes a matched set stamped
    after it asked; once the camera process is killed it fails naming the topic instead of looking at old frames."""
    import threading

    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from grounded_planner.ros.closed_loop_io import RosClosedLoopIO
    from grounded_planner.ros.frames import FRESHNESS_PARAMS, LatestFrames, StaleFrameError
    from grounded_planner.ros.params import declare_all

    camera = start_camera()
    node = rclpy.create_node("closed_loop_probe", context=rclpy_context)
    executor = MultiThreadedExecutor(num_threads=2, context=rclpy_context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    try:
        declare_all(node, FRESHNESS_PARAMS)  # as executor_node declares them
        frames = LatestFrames(node, TOPICS["color"], TOPICS["depth"], TOPICS["info"])
        spinner.start()
        io = RosClosedLoopIO(node, frames, extrinsics=None, frame_wait_s=10.0)
        seen = io.observe()  # a live camera: a set taken after the call
        assert seen.rgb.shape[:2] == (240, 320) and seen.depth_m.shape == (240, 320)
        camera.kill()
        camera.wait(10)
        io.frame_wait_s = 1.0
        with pytest.raises(
            StaleFrameError,
            match=r"stale frame: /camera/camera/\S+ is (\d+\.\d s old|stamped \d+\.\d s "
            r"before the frame was asked for)",
        ):
            io.observe()
    finally:
        executor.shutdown(timeout_sec=5.0)
        node.destroy_node()
        if camera.poll() is None:
            camera.kill()
