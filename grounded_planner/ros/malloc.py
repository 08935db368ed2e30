"""Keep freed image-sized buffers in the process instead of handing them back to the kernel after every frame.

A node subscribed to a 1280x720 rgb8 stream allocates and frees a 2.8 MB buffer (several, between Fast DDS and
rclpy) per frame. glibc's defaults give that memory back to the kernel each time: its dynamic mmap threshold
starts at 128 KiB and the trim threshold follows it at twice that, so the freed top of a heap is released
(``madvise``/``munmap``) and the next frame faults its ~700 pages in again, zeroed by the kernel. Measured on a
2-CPU VM (`benchmarks/bench_latency.py`, the figures in docs/ros_nodes.md): a Python subscriber to a 30 Hz
1280x720 stream spent 8-10 ms of CPU per frame, three quarters of it in the kernel; with the thresholds below,
3-4 ms, for 2 MB more resident memory. On a small machine that CPU is taken from the VLM request being served.

The thresholds are glibc's own knobs (``mallopt(M_MMAP_THRESHOLD)``, ``mallopt(M_TRIM_THRESHOLD)``), the same as
the environment variables ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``; a user who set either of
those, or a ``glibc.malloc`` tunable, keeps their own. Other C libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's own upper limit for its dynamic threshold (64-bit)
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024

_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_image_buffers() -> str:
    """Set the thresholds for this process; returns what was done, for a debug log line."""
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "malloc thresholds left as the environment sets them"
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt  # glibc only (AttributeError elsewhere)
        libc.gnu_get_libc_version  # noqa: B018 - AttributeError off glibc: musl has a mallopt that does nothing
    except (OSError, AttributeError):
        return "malloc thresholds left alone (not glibc)"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) != 1:
        return "malloc thresholds refused by glibc"
    return f"malloc thresholds: mmap {MMAP_THRESHOLD_BYTES >> 20} MiB, trim {TRIM_THRESHOLD_BYTES >> 20} MiB"
