"""Many robots on one ROS graph: every name is relative, each stack runs in a namespace of its own, the profiles'
/**/NODE keys reach namespaced nodes, and a client names the stack it talks to."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO, requires_ros

PROFILES = (REPO / "config" / "real.yaml", REPO / "config" / "replay.yaml")


def test_every_graph_name_is_relative_so_a_namespace_applies_to_it():
    from grounded_planner.ros import names

    graph_names = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and "/" in v}
    assert {"PLAN_SERVICE", "EXECUTE_ACTION", "COLOR_IMAGE", "ROLLOUT_CLOSED"} <= set(graph_names)
    for key, value in graph_names.items():
        assert not value.startswith("/"), f"names.{key} = {value!r} is absolute: a namespace would not apply to it"
    assert names.COLOR_IMAGE == "camera/camera/color/image_raw"  # realsense-ros: camera_namespace/camera_name/...
    assert names.in_namespace("robot1", names.PLAN_SERVICE) == "/robot1/grounded_planner/plan"
    assert names.in_namespace("/fleet/robot2/", names.COLOR_IMAGE) == "/fleet/robot2/camera/camera/color/image_raw"
    assert names.in_namespace("", names.PLAN_SERVICE) == "/grounded_planner/plan"
    assert names.in_namespace("robot1", "/grounded_planner/plan") == "/grounded_planner/plan"  # absolute: as it is


@pytest.mark.parametrize("bad", ["robot 1", "1robot", "a//b", "robot-1"])
def test_a_namespace_ros_would_refuse_is_refused_by_name(bad):
    from grounded_planner.ros.names import NamespaceError, normalize_namespace

    with pytest.raises(NamespaceError, match="is not a ROS namespace") as info:
        normalize_namespace(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_profile_keys_match_a_node_in_any_namespace(path):
    data = yaml.safe_load(path.read_text())
    for key in data:
        assert key.startswith("/**/"), f"{path.name}: key {key!r} reaches only a node in the root namespace"


@requires_ros
def test_a_plain_node_key_misses_a_namespaced_node_and_the_profiles_do_not(tmp_path, rclpy_context):
    """What the issue saw under ros2 launch: rcl (which reads launch_ros's --params-file) applies `executor:` only to
    /executor, so a namespaced executor ran with dry_run false where the profile said true."""
    import rclpy
    from rclpy.context import Context

    plain = tmp_path / "plain.yaml"
    plain.write_text("executor:\n  ros__parameters:\n    dry_run: true\n")
    seen = {}
    for label, params_file in (("plain", plain), ("replay.yaml", REPO / "config" / "replay.yaml")):
        context = Context()
        rclpy.init(args=["--ros-args", "--params-file", str(params_file)], context=context)
        try:
            node = rclpy.create_node(
                "executor", namespace="robot1", context=context, automatically_declare_parameters_from_overrides=True
            )
            seen[label] = node.get_parameter("dry_run").value if node.has_parameter("dry_run") else None
            node.destroy_node()
        finally:
            rclpy.shutdown(context=context)
    assert seen == {"plain": None, "replay.yaml": True}


@requires_ros
def test_bringup_reads_wildcard_keys_and_refuses_a_bad_namespace(tmp_path):
    from grounded_planner.ros.bringup import Bringup, Profile, ProfileError

    profile = Profile.load(REPO / "config" / "replay.yaml")
    assert profile.params["executor"]["dry_run"] is True and profile.params["bag_player"]["loop"] is True
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "executor:\n  ros__parameters: {dry_run: true}\n/**/executor:\n  ros__parameters: {dry_run: false}\n"
    )
    with pytest.raises(ProfileError, match="two sections"):
        Profile.load(twice)
    with pytest.raises(ProfileError, match="not a ROS namespace"):
        Bringup(Profile(None, {"backprojection": {}}), namespace="robot 1")


def _stack(tmp_path: Path, namespace: str, seed: int, domain: int):
    """One robot's complete replay stack (bag player, planner, back-projection, sim executor, rollout logger) from
    config/replay.yaml in ``namespace``, on its own rendered scene and bag."""
    from grounded_planner.ros.bringup import Bringup, Profile
    from grounded_planner.ros.demo import write_scene
    from grounded_planner.sim.backend import SimBackend

    out = tmp_path / namespace
    cell, bag, extrinsics, replay_file, instruction = write_scene(out, seed, lambda _line: None)
    profile = Profile.load(REPO / "config" / "replay.yaml")
    profile.params.pop("console", None)  # one web console per port: not part of what this test checks
    for assignment in (
        f"bag_player.bag={bag}",
        "planner.backend=replay",
        f"planner.replay_file={replay_file}",
        f"planner.extrinsics_file={extrinsics}",
        f"backprojection.extrinsics_file={extrinsics}",
        "planner.frame_wait_s=20.0",
        "executor.dry_run=false",
        "executor.base_frame=base_link",
        f"rollout_logger.log_dir={out / 'rollouts'}",
    ):
        profile.set(assignment)
    factories = {"executor": {"backend_factory": lambda name, config: SimBackend(cell)}}
    return Bringup(profile, factories=factories, domain_id=domain, namespace=namespace).start(), cell, instruction


@requires_ros
def test_two_complete_stacks_side_by_side_each_plan_and_goal_reach_only_their_own(tmp_path, ros_domain, rclpy_context):
    """Two robots, two bags (two different rendered scenes), two sim executors on one graph: a plan and a goal sent
    to one stack are answered by that stack alone, on its own camera's frames, and logged by its own logger."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import String

    from grounded_planner.ros import names
    from grounded_planner.ros.client import GroundedPlannerClient, PlanStatus
    from grounded_planner_interfaces.msg import ExecutionResult, PlannerStatus
    from helpers.ros_wait import spin_until

    stacks = {}
    try:
        for seed, ns in enumerate(("robot1", "robot2")):
            stacks[ns] = _stack(tmp_path, ns, seed, ros_domain)
        instructions = {ns: stack[2] for ns, stack in stacks.items()}
        node = rclpy.create_node("fleet_operator", context=rclpy_context)  # in the root namespace
        executor = SingleThreadedExecutor(context=rclpy_context)
        executor.add_node(node)
        heard = {(ns, what): [] for ns in stacks for what in ("status", "result", "closed")}
        latched = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        for ns in stacks:
            node.create_subscription(
                PlannerStatus,
                names.in_namespace(ns, names.PLANNER_STATUS),
                heard[(ns, "status")].append,
                QoSProfile(depth=10),
            )
            node.create_subscription(
                ExecutionResult,
                names.in_namespace(ns, names.EXECUTION_RESULT),
                heard[(ns, "result")].append,
                QoSProfile(depth=10),
            )
            node.create_subscription(
                String, names.in_namespace(ns, names.ROLLOUT_CLOSED), heard[(ns, "closed")].append, latched
            )

        nowhere = GroundedPlannerClient(node, executor=executor)  # the root namespace has no planner now
        assert nowhere.plan_service == "/grounded_planner/plan"
        went_out = []  # GroundedPlannerClient.plan's on_sent: called once its request is on its way, never without one
        nowhere_plan = nowhere.plan("anything", service_wait_s=1.0, on_sent=lambda: went_out.append("nowhere"))
        assert nowhere_plan.status is PlanStatus.UNAVAILABLE and went_out == []

        for ns, other in (("robot1", "robot2"), ("robot2", "robot1")):
            client = GroundedPlannerClient(node, namespace=ns, executor=executor)
            assert client.plan_service == f"/{ns}/grounded_planner/plan"
            before = {key: len(value) for key, value in heard.items()}
            # the replay planner answers only for the image it recorded: a stack fed the other's bag would fail here
            planned = client.plan(
                instructions[ns],
                backproject=True,
                timeout_s=60.0,
                service_wait_s=30.0,
                on_sent=lambda ns=ns: went_out.append(ns),
            )
            assert planned.succeeded, client.last_error
            assert went_out[-1:] == [ns] and went_out.count(ns) == 1
            assert planned.plan.actions and all(a.target_3d is not None for a in planned.plan.actions)
            done = client.execute(planned.msg, timeout_s=120.0, server_wait_s=30.0)
            assert done.succeeded, (done.status, done.message)
            spin_until(
                executor,
                lambda: len(heard[(ns, "closed")]) > before[(ns, "closed")],
                30.0,
                f"{ns}'s rollout logger to close the episode",
            )
            spin_until(
                executor, lambda: len(heard[(ns, "status")]) > before[(ns, "status")], 10.0, f"{ns}'s planner status"
            )
            executor.spin_once(timeout_sec=1.0)  # anything the other stack would have said by now
            for what in ("status", "result", "closed"):
                assert len(heard[(other, what)]) == before[(other, what)], f"{other} heard {ns}'s {what}"
            closed = Path(heard[(ns, "closed")][-1].data)
            assert closed.is_relative_to(tmp_path / ns / "rollouts"), closed
            assert (closed / "rollout.json").is_file()
        for ns, (bringup, _cell, _instruction) in stacks.items():
            assert bringup.nodes["executor"].get_fully_qualified_name() == f"/{ns}/executor"
            assert bringup.nodes["executor"].get_parameter("dry_run").value is False
        node.destroy_node()
    finally:
        for bringup, cell, _ in stacks.values():
            bringup.shutdown()
            cell.close()


@requires_ros
def test_the_bringup_command_takes_a_namespace(tmp_path, rclpy_context):
    """`grounded-planner bringup --namespace robot1`: every node of the profile in /robot1, its services there."""
    import subprocess
    import sys

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from helpers.bringup import stop_bringup, wait_running
    from helpers.ros_wait import spin_until

    profile = tmp_path / "one.yaml"
    profile.write_text("/**/backprojection:\n  ros__parameters: {}\n")
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grounded_planner.cli.main",
            "bringup",
            "--namespace",
            "robot1",
            "--config",
            str(profile),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    printed = wait_running(child)
    node = rclpy.create_node("namespace_probe", context=rclpy_context)
    executor = SingleThreadedExecutor(context=rclpy_context)
    executor.add_node(node)
    try:
        spin_until(
            executor,
            lambda: ("backprojection", "/robot1") in node.get_node_names_and_namespaces(),
            30.0,
            "backprojection in /robot1",
        )
        assert ("backprojection", "/") not in node.get_node_names_and_namespaces()
    finally:
        node.destroy_node()
        out = printed + stop_bringup(child)
    assert "running in namespace /robot1" in out, out
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "grounded_planner.cli.main",
            "bringup",
            "--namespace",
            "robot 1",
            "--config",
            str(profile),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "'robot 1' is not a ROS namespace" in bad.stderr, bad.stderr
