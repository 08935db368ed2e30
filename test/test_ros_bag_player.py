"""bag_player_node replays a rosbag2 the test wrote (MCAP and sqlite3), across processes over real DDS."""

import numpy as np
import pytest

from conftest import requires_ros, spawn_python
from helpers.ros_wait import spin_until, stop_process

pytestmark = [requires_ros, pytest.mark.ros]
pytest.importorskip("rosbags")

COLOR = "/camera/camera/color/image_raw"
DEPTH = "/camera/camera/aligned_depth_to_color/image_raw"
INFO = "/camera/camera/color/camera_info"
GAP_NS = 100_000_000  # 0.1 s between recorded frames


def write_test_bag(path, storage, frames=3):
    from sensor_msgs.msg import CameraInfo

    from grounded_planner.ros.bags import write_bag
    from grounded_planner.ros.convert import numpy_to_image

    rng = np.random.default_rng(0)
    messages, colors = [], []
    for i in range(frames):
        stamp_ns = 1_700_000_000_000_000_000 + i * GAP_NS
        color = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
        depth = np.full((24, 32), 500 + i, np.uint16)
        colors.append(color)
        for topic, msg in ((COLOR, numpy_to_image(color)), (DEPTH, numpy_to_image(depth))):
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
            msg.header.frame_id = "camera_color_optical_frame"
            messages.append((topic, stamp_ns, msg))
        info = CameraInfo(width=32, height=24, k=[30.0, 0.0, 16.0, 0.0, 30.0, 12.0, 0.0, 0.0, 1.0])
        messages.append((INFO, stamp_ns, info))
    return write_bag(path, messages, storage), colors


def test_write_bag_rejects_unknown_storage(tmp_path):
    from grounded_planner.ros.bags import BagFileError, read_bag_raw, write_bag

    with pytest.raises(BagFileError, match="storage must be one of mcap, sqlite3"):
        write_bag(tmp_path / "b", [], storage="bag")
    with pytest.raises(BagFileError, match="does not exist"):
        list(read_bag_raw(tmp_path / "missing"))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_player_replays_every_frame_at_scaled_rate(tmp_path, rclpy_context, storage):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CameraInfo, Image

    from grounded_planner.ros.convert import image_to_numpy

    bag, colors = write_test_bag(tmp_path / "scene", storage)
    rate = 0.5  # half speed: 3 frames 0.1 s apart must take at least 0.4 s
    child = spawn_python(
        [
            "-m",
            "grounded_planner.ros.bag_player_node",
            "--ros-args",
            "-p",
            f"bag:={bag}",
            "-p",
            f"rate:={rate}",
            "-p",
            "wait_for_subscribers:=true",
            "-p",
            "restamp:=false",
        ]
    )
    node = rclpy.create_node("bag_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        got = {"color": [], "depth": [], "info": []}
        # when the player published each colour frame (the writer's source timestamp, ns): the rate is the
        # player's promise, and the probe's own callback times bunch up whenever a loaded machine starves it
        published_ns = []
        qos = QoSProfile(depth=10)
        node.create_subscription(
            Image, COLOR, lambda m, info: (got["color"].append(m), published_ns.append(info["source_timestamp"])), qos
        )
        node.create_subscription(Image, DEPTH, got["depth"].append, qos)
        node.create_subscription(CameraInfo, INFO, got["info"].append, qos)
        spin_until(
            executor,
            lambda: len(got["color"]) == 3 and len(got["depth"]) == 3 and len(got["info"]) == 3,
            30.0,
            "3 colour, depth and camera_info messages from the bag",
        )
        assert [image_to_numpy(m).tolist() for m in got["color"]] == [c.tolist() for c in colors]
        assert [int(image_to_numpy(m)[0, 0]) for m in got["depth"]] == [500, 501, 502]
        assert got["color"][1].header.stamp.nanosec - got["color"][0].header.stamp.nanosec == GAP_NS
        assert list(got["info"][0].k)[0] == 30.0
        played_s = (published_ns[-1] - published_ns[0]) / 1e9
        assert played_s >= 0.8 * (2 * GAP_NS / 1e9) / rate, (
            f"3 frames played in {played_s:.3f} s: faster than the scaled rate"
        )
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_player_restamps_frames_to_playback_time_at_the_played_rate(tmp_path, rclpy_context):
    """restamp (default): a recording plays as a live camera stamps (issue 30.1: nodes refuse frames older than
    max_frame_age_s); colour, depth and camera_info of one frame keep one stamp, frames keep their spacing scaled
    by the rate."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CameraInfo, Image

    bag, _ = write_test_bag(tmp_path / "scene", "mcap")
    rate = 2.0
    child = spawn_python(
        [
            "-m",
            "grounded_planner.ros.bag_player_node",
            "--ros-args",
            "-p",
            f"bag:={bag}",
            "-p",
            f"rate:={rate}",
            "-p",
            "wait_for_subscribers:=true",
        ]
    )
    node = rclpy.create_node("bag_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        got = {"color": [], "depth": [], "info": []}
        ages_s = []

        def color(m):
            got["color"].append(m)
            ages_s.append((node.get_clock().now().nanoseconds - stamp(m)) / 1e9)

        qos = QoSProfile(depth=10)
        node.create_subscription(Image, COLOR, color, qos)
        node.create_subscription(Image, DEPTH, got["depth"].append, qos)
        node.create_subscription(CameraInfo, INFO, got["info"].append, qos)
        spin_until(executor, lambda: all(len(v) == 3 for v in got.values()), 30.0, "3 frames from the bag")
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out
    assert max(ages_s) < 1.0 and min(ages_s) > -0.1, f"frames not stamped at playback time: ages {ages_s} s"
    assert [stamp(m) for m in got["color"]] == [stamp(m) for m in got["depth"]]  # one instant, as recorded
    assert [stamp(m) for m in got["info"]] == [0, 0, 0]  # unstamped stays unstamped: refused, not passed off as fresh
    assert stamp(got["color"][1]) - stamp(got["color"][0]) == pytest.approx(GAP_NS / rate, abs=1)


def stamp(msg) -> int:
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def test_player_loops(tmp_path, rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image

    bag, _ = write_test_bag(tmp_path / "scene", "mcap", frames=2)
    child = spawn_python(
        [
            "-m",
            "grounded_planner.ros.bag_player_node",
            "--ros-args",
            "-p",
            f"bag:={bag}",
            "-p",
            "rate:=10.0",
            "-p",
            "loop:=true",
            "-p",
            f"topics:=[{COLOR}]",
            "-p",
            "wait_for_subscribers:=true",
        ]
    )
    node = rclpy.create_node("bag_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        got = []
        node.create_subscription(Image, COLOR, got.append, QoSProfile(depth=10))
        depth_seen = []
        node.create_subscription(Image, DEPTH, depth_seen.append, QoSProfile(depth=10))
        spin_until(executor, lambda: len(got) >= 7, 30.0, "more colour frames than the 2-frame bag holds (looping)")
        assert depth_seen == [], "topics:=[color] still played the depth topic"
    finally:
        node.destroy_node()
        out = stop_process(child)
    assert "Traceback" not in out, out


def test_player_names_a_missing_bag(ros_domain):
    child = spawn_python(["-m", "grounded_planner.ros.bag_player_node", "--ros-args", "-p", "bag:=/nonexistent/bag"])
    out, _ = child.communicate(timeout=60)
    assert child.returncode != 0 and "parameter 'bag' names nothing that exists: /nonexistent/bag" in out, out
