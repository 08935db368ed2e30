"""The console's live frames are scaled and encoded on the thread that asks for them: the console's frame thread,
whose nice value it raises so that a frame for a screen yields the CPUs to the planner and the executor. OpenCV's own
thread pool ran half of a resize on another thread, at the process's priority, and cost more CPU in all."""

from __future__ import annotations

import json
import os

import pytest

from conftest import spawn_python

pytest.importorskip("cv2")

# In a process of its own: the test process's other threads (those of earlier tests' ROS contexts, Ray's driver)
# would count as "other threads" here
FRAMES = """
import json, time
import numpy as np
from grounded_planner.console.jpeg import encode_jpeg, scale_to_width

rng = np.random.default_rng(11)
y, x = np.mgrid[0:720, 0:1280]
rgb = (np.stack([x % 256, y % 256, (x + y) % 256], -1) + rng.integers(0, 20, (720, 1280, 3))).clip(0, 255)
rgb = rgb.astype(np.uint8)
encode_jpeg(scale_to_width(rgb, 832))  # OpenCV loaded and set up
process, thread = time.process_time(), time.thread_time()
for _ in range(40):
    jpeg = encode_jpeg(scale_to_width(rgb, 832))
print(json.dumps({"process": time.process_time() - process, "thread": time.thread_time() - thread,
                  "jpeg": jpeg[:2].hex()}))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenCV has no second thread to use on one CPU")
def test_a_frame_is_scaled_and_encoded_on_the_asking_thread_alone():
    child = spawn_python(["-c", FRAMES])
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    cpu = json.loads(out.strip().splitlines()[-1])
    assert cpu["jpeg"] == "ffd8"
    other = cpu["process"] - cpu["thread"]
    # no other thread of the process worked on the frames (with its pool, the others took 45 % of the CPU here)
    assert other < 0.1 * cpu["thread"], f"other threads: {other:.4f} s, the asking one: {cpu['thread']:.4f} s"
