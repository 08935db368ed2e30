"""The console's live frames are scaled and encoded on the thread that asks for them: the console's frame thread,
whose nice value it raises so that a frame for a screen yields the CPUs to the planner and the executor. OpenCV's own
thread pool ran half of a resize on another thread, at the process's priority, and cost more CPU in all."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("cv2")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenCV has no second thread to use on one CPU")
def test_a_frame_is_scaled_and_encoded_on_the_asking_thread_alone():
    from grounded_planner.console.jpeg import encode_jpeg, scale_to_width

    rng = np.random.default_rng(11)
    y, x = np.mgrid[0:720, 0:1280]
    rgb = (np.stack([x % 256, y % 256, (x + y) % 256], -1) + rng.integers(0, 20, (720, 1280, 3))).clip(0, 255)
    rgb = rgb.astype(np.uint8)
    encode_jpeg(scale_to_width(rgb, 832))  # OpenCV loaded and set up
    process, thread = time.process_time(), time.thread_time()
    for _ in range(40):
        jpeg = encode_jpeg(scale_to_width(rgb, 832))
    process, thread = time.process_time() - process, time.thread_time() - thread
    assert jpeg[:2] == b"\xff\xd8"
    # the other threads of this process (DDS, a test's leftovers) took well under a tenth of the frames' own CPU
    assert process - thread < 0.1 * thread, f"other threads: {process - thread:.4f} s, this one: {thread:.4f} s"
