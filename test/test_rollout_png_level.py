"""RecordingOptions.png_level (the rollout logger's png_level parameter) off its default: the depth PNG in the bag is
written at that zlib level -- level 0 stores it uncompressed, 9 squeezes it hardest -- and decodes alike at any
level (lossless). A real RealSense depth frame (librealsense's own recording, test/helpers/realdata.py)."""

from __future__ import annotations

import numpy as np
import pytest

from grounded_planner.msgs.images import depth_to_numpy
from grounded_planner.rollout import bag as B
from grounded_planner.rollout.record import RecordingOptions, RolloutRecorder, RolloutTopics


def _depth_message(folder, frame, png_level: int):
    with RolloutRecorder(
        folder, instruction="look at the office corner", options=RecordingOptions(png_level=png_level)
    ) as rec:
        rec.log_frame(frame.color_rgb, frame.depth_mm, stamp_ns=1_000)
    return next(m.msg for m in B.read_bag(folder) if m.topic == RolloutTopics().depth_compressed)


def test_png_level_sets_the_depth_png_compression(tmp_path):
    pytest.importorskip("pyrealsense2")
    from helpers.realdata import real_frame

    frame = real_frame()
    by_level = {level: _depth_message(tmp_path / f"level{level}", frame, level) for level in (0, 1, 9)}
    sizes = {level: len(msg.data) for level, msg in by_level.items()}
    # level 0 = stored: at least the raw 16-bit pixels; the default (1) and 9 compress, 9 no worse than 1
    assert sizes[0] >= frame.depth_mm.nbytes > 2 * sizes[1] >= 2 * sizes[9], sizes
    for msg in by_level.values():
        counts, encoding = depth_to_numpy(msg)
        assert encoding == "16UC1"
        np.testing.assert_array_equal(counts, frame.depth_mm)
