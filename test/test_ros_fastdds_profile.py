"""config/fastdds_large_images.xml, the opt-in Fast DDS profile for large images: Fast DDS takes it (each
participant maps an 8 MB shared-memory segment), and with it in every process a 1280x720 image in a plan request
reaches planner_node intact (the replay backend answers only for that image's hash) across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from grounded_planner.vlm.image import image_sha256
from conftest import REPO, requires_ros
from helpers.ros_wait import stop_process

pytestmark = [requires_ros, pytest.mark.ros]

PROFILE = REPO / "config" / "fastdds_large_images.xml"
SEGMENT_BYTES = 8 * 1024 * 1024

SHM_SEGMENTS = r"""
import rclpy
rclpy.init()
node = rclpy.create_node("segment_probe")
sizes = []
for line in open("/proc/self/maps"):
    if "/dev/shm/fastdds_" in line and "port" not in line.rsplit("/", 1)[-1]:
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        sizes.append(end - start)
print(max(sizes, default=0))
"""

CLIENT = r"""
import sys
import numpy as np
import rclpy
from grounded_planner.ros.client import GroundedPlannerClient
rclpy.init()
node = rclpy.create_node("large_image_client")
client = GroundedPlannerClient(node)
image = np.random.default_rng(7).integers(0, 255, (720, 1280, 3), dtype=np.uint8)
result = client.plan("put the red cube in the bowl", image=image, backproject=False, timeout_s=60.0,
                     service_wait_s=60.0)
print(result.status.name, len(result.plan.actions) if result.plan else -1, client.last_error, flush=True)
client.destroy()
"""


def _env(profile: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FASTDDS_DEFAULT_PROFILES_FILE"}
    if profile:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(PROFILE)
    return env


def _largest_segment(profile: bool) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SHM_SEGMENTS], env=_env(profile), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


def test_fast_dds_takes_the_profile():
    """With the profile a participant maps an 8 MB segment; without it, Fast DDS's default (about 512 KB)."""
    assert _largest_segment(True) >= SEGMENT_BYTES
    assert 0 < _largest_segment(False) < SEGMENT_BYTES


def test_a_large_image_reaches_the_planner_intact_with_the_profile(tmp_path, ros_domain):
    image = np.random.default_rng(7).integers(0, 255, (720, 1280, 3), dtype=np.uint8)
    plan = {
        "instruction": "put the red cube in the bowl",
        "image_size": [1280, 720],
        "actions": [
            {"type": "grasp", "object": "red cube", "bbox": [500, 300, 580, 420]},
            {"type": "place", "object": "red cube", "point": [900, 500]},
        ],
    }
    replay = tmp_path / "replay.jsonl"
    replay.write_text(
        json.dumps({"instruction": plan["instruction"], "image_sha256": image_sha256(image), "plan": plan}) + "\n"
    )
    planner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grounded_planner.ros.planner_node",
            "--ros-args",
            "-p",
            "backend:=replay",
            "-p",
            f"replay_file:={replay}",
        ],
        cwd=REPO,
        env=_env(True),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", CLIENT], cwd=REPO, env=_env(True), capture_output=True, text=True, timeout=180
        )
    finally:
        log = stop_process(planner)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["SUCCEEDED", "2"], out.stdout + out.stderr + log
    assert "Traceback" not in log, log
