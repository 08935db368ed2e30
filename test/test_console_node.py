"""console_node's live frames from image_transport's ``compressed`` topic: a JPEG no wider than ``max_image_width``
goes to the page untouched however narrow the page shows it (no decoding, no encoding: the camera's own JPEG), one
wider is scaled to the width the pages show it and encoded again, and data that is no JPEG shows nothing while the
node goes on."""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import requires_ros
from helpers.console_stack import InstantGraph
from helpers.ros_wait import LEASE_S, spin_until

pytestmark = [requires_ros, pytest.mark.ros]
pytest.importorskip("aiohttp")

TOPIC = "/cam/color/image_raw/compressed"


def jpeg_of(rgb: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


@pytest.fixture
def console(rclpy_context, tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CompressedImage

    from grounded_planner.ros.console_node import ConsoleNode

    values = {
        "port": 0,
        "rollouts_dir": str(tmp_path),
        "color_topic": TOPIC,
        "max_image_width": 320,
        "camera_idle_s": 1.0,  # the default is 30 s
    }
    node = ConsoleNode(context=rclpy_context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    probe = rclpy.create_node("camera_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    executor.add_node(probe)
    pub = probe.create_publisher(CompressedImage, TOPIC, QoSProfile(depth=2))

    def show(data: bytes, tries: int = 0, width: int = 0, after_seq: int = 0, fmt: str = "rgb8; jpeg compressed bgr8"):
        """Publish ``data`` (``fmt``: image_transport's format string, a JPEG of an rgb8 image unless said) until the
        console shows a frame newer than ``after_seq`` (the last a page has) to pages showing it ``width`` pixels wide
        (0: they do not say); with ``tries``: that many times, and None when it showed nothing."""
        msg = CompressedImage(format=fmt, data=data)
        msg.header.stamp.sec = 1_700_000_000
        shown = []

        def taken() -> bool:
            pub.publish(msg)
            executor.spin_once(timeout_sec=0.02)
            shown.append(node.latest_frame(after_seq, width))
            return shown[-1] is not None or 0 < tries <= len(shown)

        spin_until(executor, taken, 30.0, "the console to take the frame")
        return shown[-1]

    show.publisher, show.executor = pub, executor
    try:
        yield node, show
    finally:
        probe.destroy_node()
        node.destroy_node()


def test_a_jpeg_from_the_compressed_topic_goes_to_the_page_untouched(console):
    node, show = console
    rgb = np.random.default_rng(5).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    data = jpeg_of(rgb)
    frame = show(data)
    assert frame.jpeg == data and (frame.width, frame.height) == (320, 240)
    assert frame.stamp_ns == 1_700_000_000 * 1_000_000_000


def test_a_jpeg_wider_than_max_image_width_is_scaled_and_encoded_again(console):
    from PIL import Image

    node, show = console
    data = jpeg_of(np.random.default_rng(6).integers(0, 255, (480, 640, 3), dtype=np.uint8))
    frame = show(data)
    assert (frame.width, frame.height) == (320, 240) and frame.jpeg != data
    assert Image.open(io.BytesIO(frame.jpeg)).size == (320, 240)


def test_a_png_from_the_compressed_topic_is_shown_as_a_jpeg(console):
    """image_transport's ``compressed`` plugin publishes PNG where its ``format`` parameter says so: the console
    decodes it and sends the pages a JPEG (the live view's frames are all JPEG), its pixels kept."""
    from PIL import Image

    node, show = console
    rgb = np.zeros((240, 320, 3), np.uint8)
    rgb[:, :160] = (200, 30, 30)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    frame = show(buffer.getvalue(), fmt="rgb8; png compressed bgr8")
    assert frame.jpeg[:2] == b"\xff\xd8" and (frame.width, frame.height) == (320, 240)
    shown = np.asarray(Image.open(io.BytesIO(frame.jpeg)).convert("RGB")).astype(int)
    assert np.abs(shown[120, 60] - (200, 30, 30)).max() < 12 and np.abs(shown[120, 260]).max() < 12


def test_data_that_is_no_jpeg_shows_nothing_and_the_next_frame_is_shown(console):
    node, show = console
    assert show(b"\xff\xd8 not a jpeg at all", tries=20) is None
    frame = show(jpeg_of(np.zeros((240, 320, 3), np.uint8)))
    assert (frame.width, frame.height) == (320, 240)


def test_bytes_that_do_not_read_as_an_image_show_nothing_and_the_next_frame_is_shown(console):
    """A publisher sends CDR bytes cut short on the camera topic (rclpy publishes raw bytes unchecked; the middleware
    delivers them as they are): the console reads them with rosbags, shows nothing, and the next good frame is shown.
    Before, rosbags' SerdeError came out of latest_frame and ended the thread that serves the live view."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage

    node, show = console
    good = jpeg_of(np.zeros((240, 320, 3), np.uint8))
    raw = serialize_message(CompressedImage(format="jpeg", data=good))
    for _ in range(20):
        show.publisher.publish(raw[: len(raw) // 2])
        show.executor.spin_once(timeout_sec=0.02)
        assert node.latest_frame(0, 0) is None
    frame = show(good)
    assert (frame.width, frame.height) == (320, 240) and frame.jpeg == good


def test_an_image_the_pages_stopped_wanting_while_it_was_scaled_is_not_encoded(console, monkeypatch):
    """``wanted`` (the live view not paused) is asked once the image is read and scaled, before the encoding: False
    drops it there (no frame, no JPEG encoded); the camera's next image is encoded and shown."""
    from sensor_msgs.msg import CompressedImage

    from grounded_planner.ros import console_node

    node, show = console
    encoded = []
    real_encode = console_node.encode_jpeg
    monkeypatch.setattr(console_node, "encode_jpeg", lambda *a, **k: encoded.append(1) or real_encode(*a, **k))
    data = jpeg_of(np.random.default_rng(12).integers(0, 255, (480, 640, 3), dtype=np.uint8))  # wider: encoded again
    asked = []

    def paused_meanwhile() -> bool:
        asked.append(1)
        return False

    def dropped() -> bool:
        show.publisher.publish(CompressedImage(format="rgb8; jpeg compressed bgr8", data=data))
        show.executor.spin_once(timeout_sec=0.02)
        assert node.latest_frame(0, 0, wanted=paused_meanwhile) is None
        return bool(asked)

    spin_until(show.executor, dropped, 30.0, "the console to take an image and ask whether it is still wanted")
    assert encoded == []
    frame = show(data)
    assert (frame.width, frame.height) == (320, 240) and encoded == [1]


def test_the_camera_s_jpeg_goes_as_it_came_to_a_narrower_page_and_one_encoded_again_no_wider_than_shown(console):
    """The pages show the camera 192 px wide. The camera's 320 px JPEG (``max_image_width`` is 320 here) goes to them
    as it came: the page scales it down itself, and the robot's computer neither decodes nor encodes it. A 640 px JPEG,
    wider than ``max_image_width``, is decoded anyway: it is scaled to the 192 px the pages show (the aspect kept)
    and encoded again; a page wider than ``max_image_width`` still gets 320 px."""
    from PIL import Image

    node, show = console
    data = jpeg_of(np.random.default_rng(7).integers(0, 255, (240, 320, 3), dtype=np.uint8))
    frame = show(data, width=192)
    assert frame.jpeg == data and (frame.width, frame.height) == (320, 240)
    wide = jpeg_of(np.random.default_rng(8).integers(0, 255, (480, 640, 3), dtype=np.uint8))
    frame = show(wide, width=192, after_seq=frame.seq)
    assert (frame.width, frame.height) == (192, 144) and Image.open(io.BytesIO(frame.jpeg)).size == (192, 144)
    frame = show(wide, width=1024, after_seq=frame.seq)
    assert (frame.width, frame.height) == (320, 240) and Image.open(io.BytesIO(frame.jpeg)).size == (320, 240)


def test_a_still_camera_s_image_is_encoded_again_for_a_wider_page_never_for_a_narrower_one(console):
    """The camera publishes no new image (a still scene, a paused bag): a page wider than the last frame was made
    for gets the same image again, sharper; a narrower page gets nothing new (it scales the frame down itself), so
    pages of two widths never take turns encoding one image. The camera's JPEG is wider than ``max_image_width``
    (320 here), so it is encoded for the pages' width; the widest it goes is 320 px."""
    node, show = console
    data = jpeg_of(np.random.default_rng(9).integers(0, 255, (480, 640, 3), dtype=np.uint8))
    small = show(data, width=192)
    assert small.width == 192
    last = small
    while (newer := node.latest_frame(last.seq, 192)) is not None:  # an image still on its way: the same, 192 px
        assert newer.width == 192
        last = newer
    sharper = node.latest_frame(last.seq, 320)
    assert sharper is not None and sharper.seq > last.seq and sharper.stamp_ns == small.stamp_ns
    assert sharper.width == 320 and sharper.height == 240
    assert node.latest_frame(sharper.seq, 192) is None and node.latest_frame(sharper.seq, 0) is None


def test_the_console_leaves_the_camera_topic_while_no_page_asks_for_frames(console):
    """With no page showing the live view the camera's images do not reach the console at all (it has no
    subscription, so the middleware delivers nothing: a 1280x720 stream's receive alone cost 3.8 % of a core); the
    first page that asks subscribes it again and is shown frames. ``camera_idle_s`` is 1 s here."""
    node, show = console
    publisher, executor = show.publisher, show.executor
    assert publisher.get_subscription_count() == 0 and not node.camera_subscribed  # no page asked yet
    data = jpeg_of(np.random.default_rng(11).integers(0, 255, (240, 320, 3), dtype=np.uint8))
    assert show(data).jpeg == data
    assert node.camera_subscribed and publisher.get_subscription_count() == 1
    spin_until(executor, lambda: publisher.get_subscription_count() == 0, 15.0, "the console to leave the topic")
    assert not node.camera_subscribed
    assert show(data).jpeg == data  # a page asks again
    assert publisher.get_subscription_count() == 1


def test_the_console_leaves_the_camera_topic_while_the_live_view_is_paused(console):
    """While the planner works (the live view paused) the console receives no camera images: it leaves the topic
    (with a page open, the raw stream's receive was most of its CPU while the planner worked), and the next frame a
    page asks for subscribes again and is shown."""
    node, show = console
    publisher = show.publisher
    first = jpeg_of(np.random.default_rng(12).integers(0, 255, (240, 320, 3), dtype=np.uint8))
    shown = show(first)
    assert shown.jpeg == first
    assert node.camera_subscribed and publisher.get_subscription_count() == 1
    node.frames_paused()
    assert not node.camera_subscribed
    spin_until(show.executor, lambda: publisher.get_subscription_count() == 0, 15.0, "the console to leave the topic")
    node.frames_paused()  # told again (a second pause before any frame): nothing to leave, no error
    second = jpeg_of(np.random.default_rng(13).integers(0, 255, (240, 320, 3), dtype=np.uint8))
    # the page has the first frame and asks for a newer one, as the frame pump does: the live view goes on,
    # subscribed again, the new image shown
    assert show(second, after_seq=shown.seq).jpeg == second
    assert node.camera_subscribed and publisher.get_subscription_count() == 1


def test_with_no_page_and_no_news_the_console_does_not_wake(console):
    """A console that nobody watches costs the robot's computer nothing: no timer of its node wakes the executor
    (the camera's idle watch and type check are off it: each tick built the executor's wait set of 34 entities
    again), and the news thread sleeps until a message or a shutdown comes (it used to look at the context once a
    second). This holds with the camera subscribed (a page asked a moment ago) and after the console left it."""
    from rclpy.executors import TimeoutException

    node, show = console
    executor = show.executor
    data = jpeg_of(np.random.default_rng(14).integers(0, 255, (240, 320, 3), dtype=np.uint8))
    assert show(data).jpeg == data and node.camera_subscribed
    with pytest.raises(TimeoutException):  # 1.5 s: the camera's type check was due every 1 s
        executor.wait_for_ready_callbacks(timeout_sec=1.5)
    spin_until(executor, lambda: not node.camera_subscribed, 15.0, "the console to leave the camera (1 s idle)")
    news = node._news._thread.native_id  # noqa: SLF001 - its wake-ups, as the kernel counts them
    slices = Path(f"/proc/self/task/{news}/schedstat")
    before = int(slices.read_text().split()[2])
    with pytest.raises(TimeoutException):  # the camera's idle check was due every 5 s
        executor.wait_for_ready_callbacks(timeout_sec=5.5)
    assert int(slices.read_text().split()[2]) - before <= 1, "the news thread woke with no news"


def test_stop_reset_and_approve_with_no_executor_on_the_graph_name_what_they_looked_for(console, monkeypatch):
    """The page's Stop, Reset scene and Approve, with no executor on the graph: each says which of the executor's
    services it found no one offering (the page shows it, 502), none waits longer than the console's service wait."""
    from grounded_planner.console.graph import GraphError
    from grounded_planner.ros import console_node, names

    node, _ = console
    monkeypatch.setattr(console_node, "SERVICE_WAIT_S", 0.3)  # 5 s by default

    def calls(graph):
        return {
            names.EXECUTE_ACTION: graph.stop,  # the action's cancel service
            names.RESET_SCENE_SERVICE: graph.reset_scene,
            names.APPROVE_SERVICE: lambda: graph.answer_approval(True, 1.0),
        }

    doubles = calls(InstantGraph())  # the browser tests' and the benchmark's graph with no executor behind it
    for name, call in calls(node).items():
        with pytest.raises(GraphError) as refused:
            call()
        assert str(refused.value) == f"no executor offers {name}"
        with pytest.raises(GraphError) as said:
            doubles[name]()
        assert str(said.value) == str(refused.value)  # the double says what the node says


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="MuJoCo not installed (sim extra)")
def test_an_executor_killed_mid_goal_is_shown_gone_with_its_step_and_back_once_it_returns(tmp_path, rclpy_context):
    """The executor's process dies while the arm moves (SIGKILL: no result, no goodbye): the console shows the
    executor gone, with the step it was in and that what the arm did since is not known, and logs it; it no longer
    shows the step running. A new executor on the graph shows it back, idle. The real executor_node on the simulator
    in other processes; DDS notices a killed process within its participant lease."""
    import rclpy
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from grounded_planner.ros.console_node import ConsoleNode
    from grounded_planner_interfaces.action import ExecutePlan
    from helpers.sim_executor import EXECUTE_ACTION, plan_msg, send_goal, start_sim_executor

    child = start_sim_executor(tmp_path, realtime_factor=1.0)  # paced: the kill after the first motion is mid-plan
    node = ConsoleNode(
        context=rclpy_context,
        parameter_overrides=[Parameter("port", value=0), Parameter("rollouts_dir", value=str(tmp_path / "rollouts"))],
    )
    probe = rclpy.create_node("goal_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(probe)
    shown = lambda: node.app.state.snapshot()["executor"]  # noqa: E731
    children = [child]
    try:
        client = ActionClient(probe, ExecutePlan, EXECUTE_ACTION)
        assert send_goal(executor, probe, client, ExecutePlan.Goal(plan=plan_msg())).accepted
        spin_until(executor, lambda: shown()["state"] == "running", 60.0, "the console to show the goal running")
        child.kill()
        spin_until(executor, lambda: shown()["state"] == "gone", LEASE_S + 15.0, "the console to show it gone")
        gone = shown()
        assert re.fullmatch(
            r"the executor left the graph while step [12] ran \(\w+\): what the arm did after that is not known; "
            r"check the robot",
            gone["message"],
        ), gone
        assert any(line.endswith(gone["message"]) for line in node.app.state.snapshot()["log"])
        children.append(start_sim_executor(tmp_path))
        spin_until(executor, lambda: shown()["state"] == "idle", 60.0, "the console to show the executor back")
        assert shown()["message"] == "the executor is back"
    finally:
        probe.destroy_node()
        node.destroy_node()
        for c in children:
            if c.poll() is None:
                c.kill()
            c.wait(10)
