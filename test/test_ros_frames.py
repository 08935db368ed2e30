"""ros.frames: image topics subscribed with the type their publisher uses; depth that is not aligned refused."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import requires_ros, spawn_python
from helpers.ros_wait import spin_until

pytestmark = [requires_ros, pytest.mark.ros]


def _info(fx: float, size=(64, 48)):
    from sensor_msgs.msg import CameraInfo

    info = CameraInfo(width=size[0], height=size[1], distortion_model="plumb_bob")
    info.k = [fx, 0.0, size[0] / 2, 0.0, fx, size[1] / 2, 0.0, 0.0, 1.0]
    info.d = [0.0] * 5
    info.header.frame_id = "camera_color_optical_frame"
    return info


def test_depth_whose_camera_info_differs_from_colours_is_refused_unless_registered():
    from grounded_planner.plan import GroundedAction, GroundedPlan
    from grounded_planner.ros.convert import numpy_to_image
    from grounded_planner.ros.frames import DepthNotAlignedError, backproject

    depth = numpy_to_image(np.full((48, 64), 800, np.uint16), "16UC1")
    depth.header.frame_id = "camera_color_optical_frame"
    plan = GroundedPlan("touch the middle", (64, 48), [GroundedAction("place", "x", "table", point=(32.0, 24.0))])
    colour, depth_own = _info(60.0), _info(45.0)  # same size, another camera's focal length
    with pytest.raises(DepthNotAlignedError, match="intrinsics differ.*depth_registered") as info:
        backproject(plan, depth, colour, depth_camera_info=depth_own)
    assert "\n" not in str(info.value)
    with pytest.raises(DepthNotAlignedError, match="depth is 64x48 but the colour camera_info is 128x96"):
        backproject(plan, depth, _info(60.0, (128, 96)))
    registered = backproject(plan, depth, colour, depth_camera_info=depth_own, depth_registered=True)
    assert registered.actions[0].target_3d.position[2] == pytest.approx(0.8, abs=1e-6)
    aligned = backproject(plan, depth, colour, depth_camera_info=_info(60.0))  # aligned: the same camera_info
    assert aligned.actions[0].target_3d.position[2] == pytest.approx(0.8, abs=1e-6)


def test_image_topic_follows_its_publishers_type_and_a_wrong_type_is_one_line(rclpy_context):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import CompressedImage
    from std_msgs.msg import String

    from grounded_planner.msgs.images import color_to_rgb, numpy_to_compressed
    from grounded_planner.ros.frames import LatestFrames

    node = rclpy.create_node("frames_probe", context=rclpy_context)
    errors: list[str] = []
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        # a CompressedImage on a topic whose name does not say so, and a String where depth should be
        colour_pub = node.create_publisher(CompressedImage, "/cam/color", QoSProfile(depth=2))
        node.create_publisher(String, "/cam/depth", QoSProfile(depth=2))
        frames = LatestFrames(node, "/cam/color", "/cam/depth", "/cam/info")
        assert frames.subscriptions["color"].msgtype == "sensor_msgs/msg/CompressedImage"
        assert frames.subscriptions["depth"].msgtype == ""
        errors.append(frames.subscriptions["depth"].error)
        rgb = np.zeros((8, 8, 3), np.uint8)
        rgb[..., 0] = 200
        msg = numpy_to_compressed(rgb, CompressedImage, "png")
        node.create_timer(0.05, lambda: colour_pub.publish(msg))
        spin_until(executor, lambda: frames.snapshot().color is not None, 20.0, "the compressed colour frame")
        np.testing.assert_array_equal(color_to_rgb(frames.snapshot().color), rgb)
    finally:
        node.destroy_node()
    (error,) = errors
    assert "\n" not in error
    assert "/cam/depth" in error and "std_msgs/msg/String" in error and "sensor_msgs/msg/CompressedImage" in error


CAMERA_STREAM = r"""
import sys, rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Image
try:
    with rclpy.init():
        node = rclpy.create_node("camera_stream")
        pub = node.create_publisher(Image, "/stream/color", QoSProfile(depth=2))
        # 640x480 rgb8: 0.9 MB, more than one DDS fragment (64 KB), as every real camera frame
        msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3, data=bytes(640 * 480 * 3))
        def tick():
            msg.header.stamp = node.get_clock().now().to_msg()
            pub.publish(msg)
        node.create_timer(1 / 30, tick)
        print("streaming", flush=True)
        rclpy.spin(node)
except (KeyboardInterrupt, ExternalShutdownException):
    pass
"""


def test_images_are_taken_on_demand_newest_and_an_idle_node_does_not_spin(rclpy_context):
    """A node holding LatestFrames on a multi-threaded executor (as planner_node) beside a 30 Hz camera process:
    each snapshot gives the newest frame (not the oldest still queued, and not one stuck frame: a reader history of
    depth 1 stalled on fragmented frames), and between requests the node's executor sleeps (the subscription's QoS
    events, ready while data waits untaken, once kept it at 100 % of a CPU)."""
    import threading
    import time

    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from grounded_planner.ros.frames import LatestFrames

    camera = spawn_python(["-c", CAMERA_STREAM])
    node = rclpy.create_node("frames_on_demand", context=rclpy_context)
    executor = MultiThreadedExecutor(num_threads=4, context=rclpy_context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    try:
        frames = LatestFrames(node, "/stream/color", "", "")
        spinner.start()
        frames.wait_for(("color",), 30.0)
        stamps, ages = [], []
        cpu_before, wall_before = time.process_time(), time.monotonic()
        for _ in range(8):
            time.sleep(0.25)
            color = frames.snapshot().color
            stamp_ns = color.header.stamp.sec * 1_000_000_000 + color.header.stamp.nanosec
            stamps.append(stamp_ns)
            ages.append((node.get_clock().now().nanoseconds - stamp_ns) / 1e9)
        cpu_share = (time.process_time() - cpu_before) / (time.monotonic() - wall_before)
    finally:
        executor.shutdown(timeout_sec=5.0)
        node.destroy_node()
        camera.terminate()
        camera.wait(timeout=20)
    assert all(b > a for a, b in zip(stamps, stamps[1:])), f"a snapshot gave an old frame again: {stamps}"
    assert max(ages) < 0.2, f"snapshots were not the newest frame (ages {ages} s at 30 Hz)"
    # receiving the 0.9 MB frames costs a few % of a CPU; an executor that never sleeps costs 100 %
    assert cpu_share < 0.5, f"the idle node used {cpu_share:.0%} of a CPU"


def test_a_best_effort_camera_is_received(rclpy_context):
    """Camera drivers often publish images best effort (sensor data QoS), which a reliable reader never matches;
    the images taken on demand have no QoS event handler to warn of it, so their reader follows the publisher."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from grounded_planner.ros.convert import numpy_to_image
    from grounded_planner.ros.frames import LatestFrames

    node = rclpy.create_node("best_effort_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        pub = node.create_publisher(Image, "/be/color", qos_profile_sensor_data)
        msg = numpy_to_image(np.full((48, 64, 3), 90, np.uint8), "rgb8")
        node.create_timer(0.05, lambda: pub.publish(msg))
        frames = LatestFrames(node, "/be/color", "", "")
        spin_until(executor, lambda: frames.snapshot().color is not None, 20.0, "a frame from the best-effort camera")
        assert frames.subscriptions["color"].best_effort
    finally:
        node.destroy_node()


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "mono8", "16UC1"])
def test_an_image_read_from_its_cdr_bytes_by_rosbags_is_the_image_rclpy_reads(encoding):
    """The console's live view reads camera images with rosbags (ros.frames.read_cdr, faster than rclpy's
    conversion): every field, and the pixels a page is shown, as rclpy's own message gives them, for an odd width
    with a padded row step, and for a CompressedImage."""
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from grounded_planner.msgs.images import color_to_rgb, image_to_numpy
    from grounded_planner.ros.frames import read_cdr

    channels, itemsize = {"rgb8": (3, 1), "bgr8": (3, 1), "mono8": (1, 1), "16UC1": (1, 2)}[encoding]
    width, height, pad = 37, 11, 5
    step = width * channels * itemsize + pad
    data = np.random.default_rng(3).integers(0, 256, step * height, dtype=np.uint8).tobytes()
    image = Image(height=height, width=width, encoding=encoding, step=step, data=data)
    image.header.stamp.sec, image.header.stamp.nanosec = 1_700_000_123, 456_789
    image.header.frame_id = "camera_color_optical_frame"
    raw = serialize_message(image)
    ours, theirs = read_cdr(raw, "sensor_msgs/msg/Image"), deserialize_message(raw, Image)
    for name in ("height", "width", "encoding", "step", "is_bigendian"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert (ours.header.stamp.sec, ours.header.stamp.nanosec, ours.header.frame_id) == (
        1_700_000_123,
        456_789,
        "camera_color_optical_frame",
    )
    assert bytes(ours.data) == bytes(theirs.data) == data
    read = color_to_rgb if encoding != "16UC1" else image_to_numpy
    assert np.array_equal(read(ours), read(theirs))

    jpeg = CompressedImage(format="rgb8; jpeg compressed bgr8", data=b"\xff\xd8\xff\xe0 not really a jpeg \xff\xd9")
    back = read_cdr(serialize_message(jpeg), "sensor_msgs/msg/CompressedImage")
    assert back.format == jpeg.format and bytes(back.data) == bytes(jpeg.data)


def test_bytes_that_do_not_read_as_an_image_raise_an_error_that_names_the_type_and_the_fault():
    """Cut short, a camera image's CDR bytes give CdrError (an InputError) naming the message type and where the
    bytes ran out; not rosbags' own SerdeError, which a caller of ros.frames would not know to catch."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    from grounded_planner.errors import InputError
    from grounded_planner.ros.frames import CdrError, read_cdr

    raw = serialize_message(Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(12)))
    with pytest.raises(CdrError, match=r"sensor_msgs/msg/Image: 49 bytes do not read as one .*sequence length 12"):
        read_cdr(raw[:49], "sensor_msgs/msg/Image")
    with pytest.raises(CdrError, match=r"sensor_msgs/msg/Image: 2 bytes .*CDR encapsulation"):
        read_cdr(raw[:2], "sensor_msgs/msg/Image")
    assert issubclass(CdrError, InputError)
