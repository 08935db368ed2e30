"""sensor_msgs Image / CompressedImage (JPEG/PNG colour, ``compressedDepth``) <-> numpy, rclpy and rosbags alike.

Messages are duck-typed: an Image has ``encoding``/``step``/``data``; a CompressedImage has ``format``/``data``.
Classes to build messages are passed in (``make``), so this module imports no rclpy.

``compressedDepth`` is image_transport's depth plugin format, read from ros-perception/image_transport_plugins
(``compressed_depth_image_transport/src/codec.cpp`` and ``include/.../compression_common.hpp``, the ROS 2
``rolling`` branch at commit 33a7dc9, package version 4.x; the ROS 1 1.14 codec writes the same bytes):
``format`` is ``"<encoding>; compressedDepth [png|rvl]"`` (older publishers: ``"<encoding>; compressedDepth"``),
``data`` is a 12-byte ``ConfigHeader`` (int32 ``format`` enum, INV_DEPTH = 0; float32 ``depthParam[2]``, the
inverse-depth quantisation A and B), then the PNG. 16UC1 depth is stored as is (values over ``depth_max`` are
zeroed by the publisher); 32FC1 depth is stored as quantised inverse depth q = A / z + B, decoded
z = A / (q - B), q = 0 meaning no reading. RVL-coded payloads are refused with a clear error.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Callable

import numpy as np
from PIL import Image as PILImage, UnidentifiedImageError

from grounded_planner.errors import InputError


IMAGE_MSGTYPE = "sensor_msgs/msg/Image"
COMPRESSED_MSGTYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO_MSGTYPE = "sensor_msgs/msg/CameraInfo"
IMAGE_MSGTYPES = (IMAGE_MSGTYPE, COMPRESSED_MSGTYPE)
# 16UC1 depth is in millimetres (realsense-ros and image_transport's compressedDepth); 32FC1 is in metres.
DEPTH_UNIT_16UC1_M = 0.001

# encoding -> (numpy dtype, channels); colour comes back RGB(A)
ENCODINGS = {
    "rgb8": (np.uint8, 3),
    "bgr8": (np.uint8, 3),
    "rgba8": (np.uint8, 4),
    "bgra8": (np.uint8, 4),
    "mono8": (np.uint8, 1),
    "8UC1": (np.uint8, 1),
    "8UC3": (np.uint8, 3),
    "mono16": (np.uint16, 1),
    "16UC1": (np.uint16, 1),
    "32FC1": (np.float32, 1),
}
DEPTH_ENCODINGS = ("16UC1", "mono16", "32FC1")

# compression_common.hpp: struct ConfigHeader { compressionFormat format; float depthParam[2]; } (12 bytes)
_CONFIG_HEADER = struct.Struct("<iff")
_INV_DEPTH = 0


class ImageDecodeError(InputError):
    """An image message that cannot be turned into an array (names the encoding/format and what is accepted)."""


class TopicTypeError(InputError):
    """A topic whose type is not one a node can read (the message names the topic, its type and the accepted types)."""


# -- which kind of message ---------------------------------------------------------------------------------
def is_compressed(msg: Any) -> bool:
    """True for a CompressedImage (it has ``format``), False for an Image (it has ``encoding``)."""
    return hasattr(msg, "format") and not hasattr(msg, "encoding")


def is_compressed_depth(msg: Any) -> bool:
    return is_compressed(msg) and "compresseddepth" in str(msg.format).lower()


def transport_of_topic(topic: str) -> str:
    """image_transport naming: ``.../compressedDepth`` -> ``compressedDepth``, ``.../compressed`` -> ``compressed``,
    anything else ``raw``."""
    last = topic.rstrip("/").rsplit("/", 1)[-1]
    return last if last in ("compressed", "compressedDepth") else "raw"


def camera_info_topic_of(image_topic: str) -> str:
    """The camera_info topic beside an image topic, as image_transport's CameraSubscriber finds it: the transport
    suffix dropped, then the image's last name replaced (``.../depth/image_rect_raw/compressedDepth`` ->
    ``.../depth/camera_info``)."""
    base = image_topic.rstrip("/")
    if transport_of_topic(base) != "raw":
        base = base.rsplit("/", 1)[0]
    return f"{base.rsplit('/', 1)[0]}/camera_info" if "/" in base else "camera_info"


def image_topic_type(topic: str, advertised: list[str] | tuple[str, ...] = (), what: str = "image") -> str:
    """The message type to subscribe ``topic`` with: the type its publishers advertise, else what its name says.

    Parameters
    ----------
    topic : str
        The topic name.
    advertised : list of str
        Types the ROS graph reports for it (``Node.get_topic_names_and_types``); empty when nobody publishes yet.
    what : str
        What the topic is for (``colour image``, ``depth image``), for the error message.

    Raises
    ------
    TopicTypeError
        When the topic is advertised with none of :data:`IMAGE_MSGTYPES`.
    """
    usable = [t for t in advertised if t in IMAGE_MSGTYPES]
    if usable:
        return usable[0]
    if advertised:
        raise TopicTypeError(
            f"{what} topic {topic} has type {', '.join(advertised)}; expected one of {', '.join(IMAGE_MSGTYPES)}"
        )
    return COMPRESSED_MSGTYPE if transport_of_topic(topic) != "raw" else IMAGE_MSGTYPE


# -- raw Image ------------------------------------------------------------------------------------------
def image_to_numpy(msg: Any) -> np.ndarray:
    """sensor_msgs/Image -> array (H, W) or (H, W, C); colour comes back as RGB(A)."""
    if msg.encoding not in ENCODINGS:
        raise ImageDecodeError(f"unsupported image encoding {msg.encoding!r} (supported: {', '.join(ENCODINGS)})")
    dtype, channels = ENCODINGS[msg.encoding]
    itemsize = np.dtype(dtype).itemsize
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    row = width * channels * itemsize
    data = _byte_view(msg.data)
    if step < row or len(data) < step * height:
        raise ImageDecodeError(
            f"image data too short: {len(data)} bytes for {width}x{height} {msg.encoding} (step {step})"
        )
    buf = data[: step * height].reshape(height, step)[:, :row]
    arr = np.ascontiguousarray(buf).view(np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<"))
    arr = arr.astype(dtype, copy=False)
    arr = arr.reshape(height, width, channels) if channels > 1 else arr.reshape(height, width)
    if msg.encoding in ("bgr8", "bgra8"):
        arr = arr[..., [2, 1, 0] + ([3] if channels == 4 else [])]
    return arr


def _byte_view(data: Any) -> np.ndarray:
    """Read-only uint8 view of a message's ``data`` without copying it: rclpy gives ``array.array('B')``, rosbags a
    uint8 ndarray, hand-made messages bytes; anything else (a list of ints) is copied once."""
    try:
        view = np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError):
        view = np.frombuffer(bytes(data), dtype=np.uint8)
    view.flags.writeable = False  # a view of the message: the caller's array must not write into it
    return view


def numpy_to_image(array: np.ndarray, make: Callable[..., Any], encoding: str | None = None, header: Any = None) -> Any:
    """Array -> Image of class ``make``. (H, W, 3) uint8 -> rgb8; (H, W) uint16 -> 16UC1; float32 -> 32FC1."""
    array = np.ascontiguousarray(array)
    if encoding is None:
        if array.dtype == np.uint8:
            encoding = "mono8" if array.ndim == 2 else {3: "rgb8", 4: "rgba8"}.get(array.shape[2], "")
        elif array.dtype == np.uint16:
            encoding = "16UC1"
        elif array.dtype == np.float32:
            encoding = "32FC1"
        if not encoding:
            raise ImageDecodeError(f"no image encoding for an array of dtype {array.dtype} and shape {array.shape}")
    if encoding not in ENCODINGS:
        raise ImageDecodeError(f"unsupported image encoding {encoding!r} (supported: {', '.join(ENCODINGS)})")
    dtype, channels = ENCODINGS[encoding]
    if array.dtype != dtype:
        raise ImageDecodeError(f"encoding {encoding} needs dtype {np.dtype(dtype)}, got {array.dtype}")
    if encoding in ("bgr8", "bgra8"):
        array = np.ascontiguousarray(array[..., [2, 1, 0] + ([3] if channels == 4 else [])])
    height, width = int(array.shape[0]), int(array.shape[1])
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    fields = dict(
        height=height, width=width, encoding=encoding, is_bigendian=0, step=int(width * channels * array.dtype.itemsize)
    )
    return _build(make, header, fields, data)


# -- CompressedImage ------------------------------------------------------------------------------------
def compressed_to_numpy(msg: Any) -> np.ndarray:
    """A JPEG/PNG CompressedImage (image_transport ``compressed``) -> (H, W, 3) uint8 RGB, or (H, W) for mono.

    16-bit mono PNG comes back uint16. ``compressedDepth`` payloads go to :func:`compressed_depth_to_numpy`.
    """
    if is_compressed_depth(msg):
        raise ImageDecodeError(f"CompressedImage format {msg.format!r} is depth (compressedDepth), not a colour image")
    image = _open_image(bytes(msg.data), f"CompressedImage format {msg.format!r}")
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        return np.asarray(image).astype(np.uint16)
    if image.mode in ("L", "1"):
        return np.asarray(image.convert("L"))
    return np.asarray(image.convert("RGB"))


def numpy_to_compressed(
    array: np.ndarray, make: Callable[..., Any], fmt: str = "jpeg", header: Any = None, quality: int = 90
) -> Any:
    """(H, W, 3) uint8 RGB (or (H, W) mono) -> CompressedImage as image_transport's ``compressed`` plugin writes it.

    ``format`` reads ``"rgb8; jpeg compressed bgr8"`` (or ``png``), as compressed_image_transport 4.x spells it.
    """

    if fmt not in ("jpeg", "png"):
        raise ImageDecodeError(f"compressed format must be jpeg or png, got {fmt!r}")
    array = np.ascontiguousarray(array)
    buf = io.BytesIO()
    PILImage.fromarray(array).save(
        buf, format="JPEG" if fmt == "jpeg" else "PNG", **({"quality": int(quality)} if fmt == "jpeg" else {})
    )
    encoding = "mono8" if array.ndim == 2 else "rgb8"
    return _build(
        make,
        header,
        {"format": f"{encoding}; {fmt} compressed {'mono8' if array.ndim == 2 else 'bgr8'}"},
        buf.getvalue(),
    )


def compressed_depth_to_numpy(msg: Any) -> tuple[np.ndarray, str]:
    """A ``compressedDepth`` CompressedImage -> (depth array, encoding): uint16 ``16UC1`` or float32 ``32FC1``.

    32FC1 pixels without a reading come back NaN, as the image_transport plugin decodes them.
    """
    fmt = str(msg.format)
    encoding, _, rest = fmt.partition(";")
    encoding = encoding.strip()
    rest = rest.strip()
    if rest and not rest.startswith("compressedDepth"):
        raise ImageDecodeError(f"CompressedImage format {fmt!r} is not compressedDepth")
    codec = rest[len("compressedDepth") :].strip() or "png"
    if codec != "png":
        raise ImageDecodeError(f"compressedDepth codec {codec!r} is not supported (expected png); format {fmt!r}")
    if encoding not in DEPTH_ENCODINGS:
        raise ImageDecodeError(
            f"compressedDepth encoding {encoding!r} is not depth (expected one of "
            f"{', '.join(DEPTH_ENCODINGS)}); format {fmt!r}"
        )
    data = bytes(msg.data)
    if len(data) <= _CONFIG_HEADER.size:
        raise ImageDecodeError(
            f"compressedDepth message of {len(data)} bytes has no image after its {_CONFIG_HEADER.size}-byte header"
        )
    _fmt_enum, quant_a, quant_b = _CONFIG_HEADER.unpack_from(data)
    png = np.asarray(_open_image(data[_CONFIG_HEADER.size :], f"compressedDepth format {fmt!r}"))
    if png.ndim != 2:
        raise ImageDecodeError(f"compressedDepth PNG has {png.shape[2]} channels, expected 1")
    png = png.astype(np.uint16)
    if encoding != "32FC1":
        return png, encoding
    q = png.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        depth = np.where(png > 0, np.float32(quant_a) / (q - np.float32(quant_b)), np.nan).astype(np.float32)
    return depth, encoding


def numpy_to_compressed_depth(
    depth: np.ndarray,
    make: Callable[..., Any],
    header: Any = None,
    depth_max_m: float = 10.0,
    depth_quantization: float = 100.0,
    png_level: int | None = None,
) -> Any:
    """Depth (uint16 mm -> ``16UC1``, float32 m -> ``32FC1``) -> a ``compressedDepth`` CompressedImage.

    The bytes are what compressed_depth_image_transport's publisher writes with its defaults
    (``depth_max`` 10 m, ``depth_quantization`` 100, PNG). ``png_level`` (0-9) is the zlib level of the PNG
    (the publisher's ``png_level`` parameter, default 9; None = Pillow's default, 6): any level decodes alike.
    """

    depth = np.ascontiguousarray(depth)
    quant_a = quant_b = 0.0
    if depth.dtype == np.uint16:
        encoding = "16UC1"
        stored = np.where(depth > np.uint16(min(depth_max_m * 1000.0, 65535)), 0, depth).astype(np.uint16)
    elif depth.dtype == np.float32:
        encoding = "32FC1"
        quant_a = np.float32(depth_quantization * (depth_quantization + 1.0))
        quant_b = np.float32(1.0 - quant_a / depth_max_m)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = quant_a / depth + quant_b
        stored = np.where(np.isfinite(depth) & (depth < depth_max_m) & (depth > 0), inv, 0)
        stored = np.clip(stored, 0, 65535).astype(np.uint16)
    else:
        raise ImageDecodeError(
            f"compressedDepth takes uint16 (16UC1, mm) or float32 (32FC1, m) depth, got {depth.dtype}"
        )
    if depth.ndim != 2:
        raise ImageDecodeError(f"depth must be (H, W), got shape {depth.shape}")
    buf = io.BytesIO()
    PILImage.fromarray(stored).save(buf, format="PNG", **({} if png_level is None else {"compress_level": png_level}))
    data = _CONFIG_HEADER.pack(_INV_DEPTH, float(quant_a), float(quant_b)) + buf.getvalue()
    return _build(make, header, {"format": f"{encoding}; compressedDepth png"}, data)


# -- what nodes need --------------------------------------------------------------------------------------
def color_to_rgb(msg: Any) -> np.ndarray:
    """A colour Image (rgb8, bgr8, rgba8, bgra8, mono8) or JPEG/PNG CompressedImage -> (H, W, 3) uint8 RGB."""
    if is_compressed(msg):
        arr = compressed_to_numpy(msg)
        what = f"CompressedImage {msg.format!r}"
    else:
        arr = image_to_numpy(msg)
        what = f"image encoding {msg.encoding!r}"
    if arr.dtype != np.uint8:
        raise ImageDecodeError(
            f"{what} is not a colour image (expected 8-bit rgb8/bgr8/rgba8/bgra8/mono8, jpeg or png)"
        )
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    return np.ascontiguousarray(arr[..., :3])


def depth_to_numpy(msg: Any) -> tuple[np.ndarray, str]:
    """A depth Image or ``compressedDepth`` CompressedImage -> (array as stored, encoding)."""
    if is_compressed(msg):
        if not is_compressed_depth(msg):
            raise ImageDecodeError(
                f"CompressedImage format {msg.format!r} is not depth (expected "
                f"'16UC1; compressedDepth' or '32FC1; compressedDepth', the compressedDepth transport)"
            )
        return compressed_depth_to_numpy(msg)
    if msg.encoding not in DEPTH_ENCODINGS:
        raise ImageDecodeError(
            f"depth image encoding {msg.encoding!r} is not depth (expected 16UC1 in mm or 32FC1 in m)"
        )
    return image_to_numpy(msg), msg.encoding


def depth_to_m(msg: Any, depth_unit_m: float = DEPTH_UNIT_16UC1_M) -> np.ndarray:
    """A depth Image or compressedDepth message -> (H, W) float64 metres, 0 where the sensor gave no reading."""
    depth, encoding = depth_to_numpy(msg)
    if encoding == "32FC1":
        out = depth.astype(np.float64)
        out[~np.isfinite(out)] = 0.0
        return out
    return depth.astype(np.float64) * depth_unit_m


def image_size(msg: Any) -> tuple[int, int]:
    """(width, height) of an Image or CompressedImage (a compressed one's header is read, not the whole image)."""
    if not is_compressed(msg):
        return int(msg.width), int(msg.height)
    data = bytes(msg.data)
    if is_compressed_depth(msg):
        data = data[_CONFIG_HEADER.size :]
    return tuple(_open_image(data, f"CompressedImage format {msg.format!r}", load=False).size)  # type: ignore[return-value]


def describe(msg: Any) -> str:
    """``rgb8 640x480`` or ``CompressedImage 'rgb8; jpeg compressed bgr8'``: for log lines."""
    if is_compressed(msg):
        return f"CompressedImage {msg.format!r}"
    return f"{msg.encoding} {msg.width}x{msg.height}"


# -- helpers ----------------------------------------------------------------------------------------------
def _open_image(data: bytes, what: str, load: bool = True):
    try:
        image = PILImage.open(io.BytesIO(data))
        if load:
            image.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageDecodeError(f"{what}: {len(data)} bytes that are not a readable JPEG/PNG ({exc})") from exc
    if image.format not in ("JPEG", "PNG"):
        raise ImageDecodeError(f"{what}: a {image.format} image, expected JPEG or PNG")
    return image


def _build(make: Callable[..., Any], header: Any, fields: dict, data: bytes) -> Any:
    """Instantiate ``make`` for rclpy (no-argument constructor, then fields) or rosbags (every field up front)."""
    if hasattr(make, "__dataclass_fields__"):  # rosbags typestore class: data is a uint8 array
        return make(header=header, **fields, data=np.frombuffer(data, dtype=np.uint8).copy())
    msg = make()
    if header is not None:
        msg.header = header
    for key, value in fields.items():
        setattr(msg, key, value)
    msg.data = data
    return msg
