"""Real pixels through the ROS side: librealsense's own unit-test recording (a D400 frame of an office corner)
played by camera_node, and re-recorded the way image_transport users record it (JPEG colour, compressedDepth,
an ``equidistant`` camera_info) for bringup and `replay`."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, requires_ros
from helpers.bringup import CLI, start_bringup, stop_bringup
from helpers.realdata import (
    COLOR_COMPRESSED,
    DEPTH_COMPRESSED,
    LIBREALSENSE_BAG,
    PLANS,
    ask_every_plan,
    real_frame,
    write_compressed_equidistant_bag,
    write_replay_file,
)
from helpers.ros_wait import first_camera_frames

pytest.importorskip("pyrealsense2")
pytestmark = [requires_ros, pytest.mark.ros]


@pytest.fixture(scope="module")
def frame():
    return real_frame()


def test_camera_node_plays_librealsenses_recording(frame, rclpy_context):
    from grounded_planner.msgs.images import color_to_rgb, depth_to_m

    got, out = first_camera_frames(
        rclpy_context,
        [f"playback_file:={LIBREALSENSE_BAG}", "color_profile:=640x480", "depth_profile:=640x480"],
        "frames played from the librealsense recording",
    )
    assert "Traceback" not in out, out
    np.testing.assert_array_equal(color_to_rgb(got["color"]), frame.color_rgb)
    depth_m = depth_to_m(got["depth"])
    assert 1.3 < np.median(depth_m[300:400, 250:330][depth_m[300:400, 250:330] > 0]) < 1.7  # the backpack
    info = got["info"]
    assert (info.width, info.height, info.distortion_model) == (640, 480, "plumb_bob")
    assert info.k[0] == pytest.approx(frame.K[0, 0])


@pytest.mark.parametrize("model", ["equidistant", "F-Theta"])
def test_bringup_on_a_compressed_real_bag_answers_two_plans_and_stays_up(model, frame, tmp_path, rclpy_context):
    """equidistant: both plans come back with 3D poses. F-Theta (librealsense's, not deprojectable here): both
    come back with the typed error, and every node, the logger included, lives on and logs the frames."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from grounded_planner.ros.convert import plan_from_msg

    bag = write_compressed_equidistant_bag(tmp_path / "bag", frame, distortion_model=model)
    replay = write_replay_file(tmp_path / "plans.jsonl")
    sets = {
        "bag_player.bag": bag,
        "planner.backend": "replay",
        "planner.replay_file": replay,
        "planner.color_topic": COLOR_COMPRESSED,
        "planner.depth_topic": DEPTH_COMPRESSED,
        "backprojection.depth_topic": DEPTH_COMPRESSED,
        "rollout_logger.color_topic": COLOR_COMPRESSED,
        "rollout_logger.depth_topic": DEPTH_COMPRESSED,
        "rollout_logger.log_dir": tmp_path / "rollouts",
        "planner.frame_wait_s": 20.0,
    }
    child = start_bringup("config/replay.yaml", sets)
    node = rclpy.create_node("realdata_probe", context=rclpy_context)
    try:
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        for response in ask_every_plan(node, executor).values():
            if model == "F-Theta":
                assert not response.success and "UnsupportedDistortionError" in response.message, response.message
                assert "'F-Theta' is not supported" in response.message
                continue
            assert response.success, response.message
            targets = plan_from_msg(response.plan).target_set()
            assert len(targets.targets) == 2 and targets.frame == "panda_link0"
            xyz = np.array([t.position for t in targets.targets])
            assert np.all(np.isfinite(xyz)) and np.all(np.abs(xyz) < 5.0)
        # every node of the profile is still in the graph, and the process did not die of the calibration
        names = set(node.get_node_names())
        assert {"bag_player", "planner", "backprojection", "executor", "rollout_logger"} <= names, names
        assert child.poll() is None
    finally:
        node.destroy_node()
        out = stop_bringup(child)
    assert child.returncode == 0, out
    assert "Traceback" not in out, out
    # the logger kept the real frames and the camera_info as recorded
    from grounded_planner.rollout.bag import image_to_rgb, read_bag
    from grounded_planner.rollout.record import load_rollout

    folders = sorted(p.parent for p in (tmp_path / "rollouts").rglob("rollout.json"))
    assert folders, out
    record = load_rollout(folders[0]).data
    assert record["plan"]["instruction"] in PLANS
    infos = [m.msg for m in read_bag(folders[0]) if m.topic == "/camera/camera/color/camera_info"]
    assert infos and infos[0].distortion_model == model
    if model == "F-Theta":
        assert any("F-Theta" in w for w in record.get("warnings", [])), record.get("warnings")
    # stored as image_transport records it (the logger's default): JPEG on .../compressed; a compressed stream is
    # kept byte for byte, as ros2 bag would keep it (no second JPEG generation)
    colors = [m.msg for m in read_bag(folders[0]) if m.topic == "/camera/camera/color/image_raw/compressed"]
    assert colors and colors[0].format == "rgb8; jpeg compressed bgr8"
    assert image_to_rgb(colors[0]).shape == (480, 640, 3)
    # (the plan's own frame set comes from planner_node as rgb8 and is encoded here)
    played = {bytes(m.msg.data) for m in read_bag(bag, [COLOR_COMPRESSED])}
    assert any(bytes(c.data) in played for c in colors)


def test_replay_reads_a_bag_whose_colour_is_compressed(frame, tmp_path):
    bag = write_compressed_equidistant_bag(tmp_path / "bag", frame, frames=2)
    replay = write_replay_file(tmp_path / "plans.jsonl")
    out = tmp_path / "predictions.jsonl"
    done = subprocess.run(
        [
            *CLI,
            "replay",
            str(bag),
            "--out",
            str(out),
            "--backend",
            "replay",
            "--replay-file",
            str(replay),
            "--instruction",
            "put the backpack on the chair",
            "--color-topic",
            COLOR_COMPRESSED,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 1 and not records[0]["error"]
    assert [a["type"] for a in records[0]["plan"]["actions"]] == ["grasp", "place"]


def test_replay_names_the_topic_and_its_type_when_it_holds_no_image(frame, tmp_path):
    bag = write_compressed_equidistant_bag(tmp_path / "bag", frame, frames=1)
    done = subprocess.run(
        [
            *CLI,
            "replay",
            str(bag),
            "--out",
            str(tmp_path / "p.jsonl"),
            "--backend",
            "replay",
            "--replay-file",
            str(write_replay_file(tmp_path / "plans.jsonl")),
            "--instruction",
            "x",
            "--color-topic",
            "/camera/camera/color/camera_info",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "/camera/camera/color/camera_info" in line and "sensor_msgs/msg/CameraInfo" in line
    assert "sensor_msgs/msg/CompressedImage" in line
