"""Images sent to VLMs: input checks, resize to a longest side, PNG/JPEG encoding, content hashes."""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

from grounded_planner.errors import InputError


def check_image(image_rgb: object, what: str = "image_rgb") -> np.ndarray:
    """Return ``image_rgb`` as a C-contiguous (H, W, 3) uint8 array, or raise ValueError naming the problem."""
    if not isinstance(image_rgb, np.ndarray):
        raise InputError(f"{what} must be a numpy array (H, W, 3) uint8, got {type(image_rgb).__name__}")
    if image_rgb.ndim != 3 or image_rgb.shape[2] != 3:
        raise InputError(f"{what} must have shape (H, W, 3), got {image_rgb.shape}")
    if image_rgb.dtype != np.uint8:
        raise InputError(f"{what} must be uint8 RGB, got dtype {image_rgb.dtype}")
    if image_rgb.shape[0] == 0 or image_rgb.shape[1] == 0:
        raise InputError(f"{what} is empty: shape {image_rgb.shape}")
    return np.ascontiguousarray(image_rgb)


def image_sha256(image_rgb: np.ndarray) -> str:
    """Content hash of an RGB image (pixels and shape), independent of any file encoding."""
    digest = hashlib.sha256()
    digest.update(repr(tuple(image_rgb.shape)).encode())
    digest.update(np.ascontiguousarray(image_rgb).tobytes())
    return digest.hexdigest()


def resized_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) scaled so the longest side is at most ``max_side`` (0 = unchanged), aspect kept."""
    longest = max(width, height)
    if not max_side or longest <= max_side:
        return width, height
    scale = max_side / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


@dataclass
class EncodedImage:
    """An image as sent to a model.

    ``size`` is (width, height) of the sent image, ``original_size`` that of the caller's image; pixel
    coordinates in the answer refer to ``size`` and are scaled back by the parser.
    """

    data: bytes
    mime_type: str
    size: tuple[int, int]
    original_size: tuple[int, int]
    sha256: str  # of the encoded bytes: part of the cache key

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def to_pil(self):
        return Image.open(io.BytesIO(self.data)).convert("RGB")


def encode_image(image_rgb: np.ndarray, max_side: int = 0, fmt: str = "png", jpeg_quality: int = 90) -> EncodedImage:
    """Resize (area filter) so the longest side is at most ``max_side`` and encode as PNG or JPEG."""
    image_rgb = check_image(image_rgb)
    height, width = image_rgb.shape[:2]
    size = resized_size(width, height, max_side)
    pil = Image.fromarray(image_rgb, "RGB")
    if size != (width, height):
        pil = pil.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    buf = io.BytesIO()
    if fmt == "jpeg":
        pil.save(buf, format="JPEG", quality=jpeg_quality)
        mime = "image/jpeg"
    elif fmt == "png":
        # Level 1: ~5x faster than the default for camera images, a few % larger.
        pil.save(buf, format="PNG", compress_level=1)
        mime = "image/png"
    else:
        raise InputError(f"image format must be png or jpeg, got {fmt!r}")
    data = buf.getvalue()
    return EncodedImage(
        data=data, mime_type=mime, size=size, original_size=(width, height), sha256=hashlib.sha256(data).hexdigest()
    )
