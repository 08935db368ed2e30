"""JPEG for the browser, encoded (and scaled) with the GIL released where OpenCV is installed: a frame encoded for a
page must not hold up the other threads of the process it runs in (in a bringup: the planner and the executor)."""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image

JPEG_QUALITY = 80


@functools.cache
def _cv2():
    """OpenCV (the console and geometry extras), or None. Its calls run without the GIL; Pillow's JPEG encoder into
    memory holds it throughout (about 10 ms a 1280x720 frame: every other thread of the process waits).

    OpenCV's work is kept on the thread that asks for it (``cv2.setNumThreads(1)``, for the process: only the
    console encodes with this module). With its own pool, a resize ran on both CPUs of this machine at the
    process's priority, beside the console's frame thread, whose nice value it did not share: scaling a 1280x720
    frame to 832 px and encoding it cost 2.3-2.9 ms of CPU on two threads, 1.5-1.6 ms on one (the wall time 1.3-1.7
    ms either way; benchmarks/bench_console.py gives the CPU per displayed frame)."""
    try:
        import cv2  # lazy: optional SDK (cv2), not in install_requires; Pillow does the work without it
    except ImportError:
        return None
    cv2.setNumThreads(1)
    return cv2


def encode_jpeg(rgb: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    """(H, W, 3) uint8 RGB -> JPEG bytes at ``quality`` (1-100)."""
    cv2 = _cv2()
    if cv2 is not None:
        ok, encoded = cv2.imencode(
            ".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
        )
        if ok:
            return encoded.tobytes()
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def scale_to_width(rgb: np.ndarray, width: int) -> np.ndarray:
    """(H, W, 3) uint8 RGB scaled (bilinear) to ``width`` pixels, the aspect kept."""
    height = max(1, round(rgb.shape[0] * width / rgb.shape[1]))
    cv2 = _cv2()
    if cv2 is not None:
        return cv2.resize(rgb, (width, height), interpolation=cv2.INTER_LINEAR)
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.BILINEAR))
