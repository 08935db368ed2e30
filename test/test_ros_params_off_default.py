"""Node parameters off their defaults (issue 31.2): each one that changes what a node does fails a test here when the
node ignores it. The nodes run in this process on the test's own ROS domain (``rclpy_context``); what each check reads
is what a user sees -- the topics the node subscribes and publishes on (``ros2 node info``), the QoS it hands the
middleware, the options its recorder writes with, the frames and verdicts it serves -- not a private copy of the
parameter."""

from __future__ import annotations

import time

import pytest

from conftest import requires_ros

pytestmark = [requires_ros, pytest.mark.ros]


def _overrides(values: dict):
    from rclpy.parameter import Parameter

    return [Parameter(name, value=value) for name, value in values.items()]


def _graph(node, want: set[str], timeout_s: float = 10.0) -> tuple[set[str], set[str]]:
    """(subscribed, published) topic names of ``node`` once every name in ``want`` appears among them."""
    deadline = time.monotonic() + timeout_s
    while True:
        subs = {n for n, _ in node.get_subscriber_names_and_types_by_node(node.get_name(), node.get_namespace())}
        pubs = {n for n, _ in node.get_publisher_names_and_types_by_node(node.get_name(), node.get_namespace())}
        if want <= subs | pubs or time.monotonic() > deadline:
            return subs, pubs
        time.sleep(0.05)  # the graph cache of this very process: no spinning needed, only the rmw's update


# -- backprojection_node: its six topic parameters -----------------------------------------------------------------

def test_backprojection_node_wires_every_topic_parameter(rclpy_context):
    from grounded_planner.ros import names
    from grounded_planner.ros.backprojection_node import BackprojectionNode

    custom = {"input_topic": "/other/plan_pixels", "output_topic": "/other/plan_3d", "targets_topic": "/other/targets",
              "markers_topic": "/other/target_markers", "camera_info_topic": "/other/color/camera_info",
              "depth_camera_info_topic": "/other/depth/camera_info"}
    node = BackprojectionNode(context=rclpy_context, parameter_overrides=_overrides(custom))
    try:
        subs, pubs = _graph(node, set(custom.values()))
        assert {custom[k] for k in ("input_topic", "camera_info_topic", "depth_camera_info_topic")} <= subs, subs
        assert {custom[k] for k in ("output_topic", "targets_topic", "markers_topic")} <= pubs, pubs
        defaults = {"/" + t for t in (names.PLAN_PIXELS, names.PLAN_3D, names.TARGETS, names.TARGET_MARKERS,
                                      names.COLOR_CAMERA_INFO, names.ALIGNED_DEPTH_CAMERA_INFO)}
        assert not defaults & (subs | pubs), defaults & (subs | pubs)
    finally:
        node.destroy_node()


# -- planner_node: camera_info_topic, request_queue_depth ----------------------------------------------------------

def test_planner_node_takes_camera_info_topic_and_request_queue_depth(rclpy_context):
    from grounded_planner.ros import names
    from grounded_planner.ros.planner_node import PlannerNode

    node = PlannerNode(context=rclpy_context, parameter_overrides=_overrides({
        "model": "m", "base_url": "http://127.0.0.1:9/v1", "camera_info_topic": "/other/color/camera_info",
        "request_queue_depth": 7}))
    try:
        subs, _ = _graph(node, {"/other/color/camera_info"})
        assert "/other/color/camera_info" in subs and "/" + names.COLOR_CAMERA_INFO not in subs, subs
        # the depth the service's reader history is created with: requests beyond it are dropped by DDS
        (service,) = [s for s in node.services if s.service_name.lstrip("/") == names.PLAN_SERVICE]
        assert service.qos_profile.depth == 7
    finally:
        node.destroy_node()


# -- executor_node: camera_info_topic (closed loop) ----------------------------------------------------------------

def test_executor_node_closed_loop_reads_camera_info_topic(rclpy_context, tmp_path):
    from grounded_planner.ros import names
    from grounded_planner.ros.executor_node import ExecutorNode
    from helpers.tabletop import EXTRINSICS

    (tmp_path / "extrinsics.yaml").write_text(EXTRINSICS)
    node = ExecutorNode(context=rclpy_context, parameter_overrides=_overrides({
        "closed_loop": True, "extrinsics_file": str(tmp_path / "extrinsics.yaml"),
        "camera_info_topic": "/other/color/camera_info"}))
    try:
        node.trigger_configure()  # what autostart does in run_node: the closed loop's camera is taken at configure
        subs, _ = _graph(node, {"/other/color/camera_info"})
        assert "/other/color/camera_info" in subs and "/" + names.COLOR_CAMERA_INFO not in subs, subs
    finally:
        node.destroy_node()


# -- rollout_logger_node: camera_info_topic and the recording options ----------------------------------------------

def test_rollout_logger_takes_camera_info_topic_and_recording_options(rclpy_context, tmp_path):
    from grounded_planner.ros import names
    from grounded_planner.ros.params import values
    from grounded_planner.ros.rollout_logger_node import PARAMS, RolloutLoggerNode, recording_options
    from grounded_planner.rollout.record import RecordingOptions

    default = RecordingOptions()
    chosen = {"png_level": 9, "jpeg_quality": 33, "compression": "lz4", "chunk_size": 4096, "chunk_interval_s": 0.125}
    assert all(getattr(default, k) != v for k, v in chosen.items())  # each one off the default
    node = RolloutLoggerNode(context=rclpy_context, parameter_overrides=_overrides({
        "log_dir": str(tmp_path), "camera_info_topic": "/other/color/camera_info", **chosen}))
    try:
        subs, _ = _graph(node, {"/other/color/camera_info"})
        assert "/other/color/camera_info" in subs and "/" + names.COLOR_CAMERA_INFO not in subs, subs
        # the options every episode's recorder is made with (recording_options(p) at each episode's start)
        options = recording_options(values(node, PARAMS))
        assert {k: getattr(options, k) for k in chosen} == chosen
    finally:
        node.destroy_node()
