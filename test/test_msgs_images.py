"""msgs.images: Image / CompressedImage / compressedDepth <-> numpy on rclpy and rosbags message objects alike."""

import struct

import numpy as np
import pytest

from grounded_planner.msgs.images import (
    COMPRESSED_MSGTYPE,
    IMAGE_MSGTYPE,
    ImageDecodeError,
    TopicTypeError,
    color_to_rgb,
    compressed_depth_to_numpy,
    depth_to_m,
    depth_to_numpy,
    image_size,
    image_to_numpy,
    image_topic_type,
    numpy_to_compressed,
    numpy_to_compressed_depth,
    numpy_to_image,
)


def _rosbags():
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    header = store.types["std_msgs/msg/Header"](
        stamp=store.types["builtin_interfaces/msg/Time"](sec=1, nanosec=2), frame_id="camera_color_optical_frame"
    )
    return store.types["sensor_msgs/msg/Image"], store.types["sensor_msgs/msg/CompressedImage"], header


def _rclpy():
    sensor_msgs = pytest.importorskip("sensor_msgs.msg")
    std_msgs = pytest.importorskip("std_msgs.msg")
    return sensor_msgs.Image, sensor_msgs.CompressedImage, std_msgs.Header(frame_id="camera_color_optical_frame")


FAMILIES = [pytest.param(_rosbags, id="rosbags"), pytest.param(_rclpy, id="rclpy")]


@pytest.fixture
def rgb():
    rng = np.random.default_rng(0)
    # smooth content, as a camera sees it (JPEG on white noise says nothing about a real frame)
    y, x = np.mgrid[0:48, 0:64]
    base = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
    return np.clip(base + rng.integers(0, 3, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("encoding", ["rgb8", "bgr8"])
def test_raw_colour_round_trip_is_exact_and_rgb(family, encoding, rgb):
    Image, _, header = family()
    msg = numpy_to_image(rgb, Image, encoding, header)
    assert msg.encoding == encoding
    np.testing.assert_array_equal(color_to_rgb(msg), rgb)
    if encoding == "bgr8":  # the bytes on the wire are in BGR order
        assert bytes(msg.data)[:3] == bytes(rgb[0, 0, ::-1])


@pytest.mark.parametrize("family", FAMILIES)
def test_png_is_lossless_and_jpeg_close(family, rgb):
    _, Compressed, header = family()
    png = numpy_to_compressed(rgb, Compressed, "png", header)
    assert png.format == "rgb8; png compressed bgr8"
    np.testing.assert_array_equal(color_to_rgb(png), rgb)
    jpeg = numpy_to_compressed(rgb, Compressed, "jpeg", header)
    assert np.abs(color_to_rgb(jpeg).astype(int) - rgb).mean() < 3.0
    assert image_size(jpeg) == (64, 48)


@pytest.mark.parametrize("family", FAMILIES)
def test_compressed_depth_16uc1_round_trip_in_millimetres(family):
    _, Compressed, header = family()
    depth_mm = np.random.default_rng(1).integers(300, 4000, (48, 64)).astype(np.uint16)
    depth_mm[0, :5] = 0  # holes stay holes
    msg = numpy_to_compressed_depth(depth_mm, Compressed, header)
    assert msg.format == "16UC1; compressedDepth png"
    array, encoding = depth_to_numpy(msg)
    assert encoding == "16UC1"
    np.testing.assert_array_equal(array, depth_mm)
    np.testing.assert_allclose(depth_to_m(msg), depth_mm / 1000.0)


def test_compressed_depth_32fc1_inverse_depth_quantisation_as_the_plugin_decodes_it():
    _, Compressed, header = _rosbags()
    depth_m = np.linspace(0.3, 4.0, 48 * 64, dtype=np.float32).reshape(48, 64)
    depth_m[3, 3] = np.nan
    msg = numpy_to_compressed_depth(depth_m, Compressed, header)
    # the 12-byte ConfigHeader: INV_DEPTH (0), A = q (q + 1) with q = 100, B = 1 - A / depth_max (10 m)
    fmt, quant_a, quant_b = struct.unpack_from("<iff", bytes(msg.data))
    assert (fmt, quant_a) == (0, pytest.approx(10100.0)) and quant_b == pytest.approx(1 - 10100.0 / 10.0)
    decoded, encoding = compressed_depth_to_numpy(msg)
    assert encoding == "32FC1" and np.isnan(decoded[3, 3])
    ok = np.isfinite(depth_m)
    # inverse-depth quantisation: the step grows with z^2 / A, under 2 mm at 4 m
    assert np.max(np.abs(decoded[ok] - depth_m[ok])) < 0.002
    assert depth_to_m(msg)[3, 3] == 0.0


def test_bad_payloads_give_one_line_errors_naming_the_format():
    _, Compressed, header = _rosbags()
    junk = Compressed(header=header, format="jpeg", data=np.frombuffer(b"not an image at all", np.uint8).copy())
    with pytest.raises(ImageDecodeError, match="'jpeg'.*not a readable JPEG/PNG"):
        color_to_rgb(junk)
    rvl = Compressed(header=header, format="16UC1; compressedDepth rvl", data=np.zeros(20, np.uint8))
    with pytest.raises(ImageDecodeError, match="codec 'rvl' is not supported"):
        depth_to_m(rvl)
    colour = numpy_to_compressed(np.zeros((4, 4, 3), np.uint8), Compressed, "png", header)
    with pytest.raises(ImageDecodeError, match="is not depth"):
        depth_to_m(colour)
    Image, _, _ = _rosbags()
    with pytest.raises(ImageDecodeError, match="'yuv422'"):
        image_to_numpy(
            Image(
                header=header, height=1, width=1, encoding="yuv422", is_bigendian=0, step=2, data=np.zeros(2, np.uint8)
            )
        )


def test_camera_info_beside_an_image_topic_as_image_transport_finds_it():
    from grounded_planner.msgs.images import camera_info_topic_of

    assert (
        camera_info_topic_of("/camera/camera/aligned_depth_to_color/image_raw")
        == "/camera/camera/aligned_depth_to_color/camera_info"
    )
    assert (
        camera_info_topic_of("/camera/camera/depth/image_rect_raw/compressedDepth")
        == "/camera/camera/depth/camera_info"
    )
    assert camera_info_topic_of("image_raw/compressed") == "camera_info"


def test_topic_type_follows_the_publisher_then_image_transport_naming():
    assert image_topic_type("/cam/color/image_raw") == IMAGE_MSGTYPE
    assert image_topic_type("/cam/color/image_raw/compressed") == COMPRESSED_MSGTYPE
    assert image_topic_type("/cam/depth/image_raw/compressedDepth") == COMPRESSED_MSGTYPE
    assert image_topic_type("/cam/color/image_raw", [COMPRESSED_MSGTYPE]) == COMPRESSED_MSGTYPE
    with pytest.raises(TopicTypeError) as info:
        image_topic_type("/cam/color/image_raw", ["std_msgs/msg/String"], "colour image")
    message = str(info.value)
    assert "\n" not in message
    assert "/cam/color/image_raw" in message and "std_msgs/msg/String" in message and COMPRESSED_MSGTYPE in message
