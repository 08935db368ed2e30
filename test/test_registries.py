"""Backend names are written once, in their registries (vlm.config.BACKENDS, execution.config.BACKEND_NAMES), and
every place that offers a choice of backend (the command line, the nodes' parameters, the factories) takes them
from there: a backend added to a registry is offered everywhere, and nothing offers a name the registry lacks."""

import pytest

from grounded_planner.cli.main import build_parser
from grounded_planner.execution.config import BACKEND_NAMES, ExecutorConfig
from grounded_planner.vlm.config import BACKENDS


def _choices(command: str, flag: str) -> tuple:
    sub = build_parser([command])._subparsers._group_actions[0].choices[command]
    return tuple(next(a for a in sub._actions if flag in a.option_strings).choices)


def test_the_command_line_offers_the_registries_backends():
    assert _choices("plan", "--backend") == BACKENDS
    assert _choices("execute", "--backend") == BACKEND_NAMES


def test_make_backend_builds_every_registered_robot_backend():
    from grounded_planner.execution.backends import make_backend

    built = {name: type(make_backend(name, ExecutorConfig())).__name__ for name in BACKEND_NAMES}
    assert built == {
        "sim": "SimBackend",
        "franky": "FrankyBackend",
        "lerobot": "LeRobotBackend",
        "moveit": "MoveItBackend",
    }


def test_the_nodes_backend_parameters_accept_the_registries_names_and_refuse_others():
    pytest.importorskip("rclpy")
    from grounded_planner.ros.executor_node import PARAMS as EXECUTOR_PARAMS
    from grounded_planner.ros.planner_node import PARAMS as PLANNER_PARAMS

    for params, names in ((PLANNER_PARAMS, BACKENDS), (EXECUTOR_PARAMS, BACKEND_NAMES)):
        check = next(p for p in params if p.name == "backend").check
        assert [check(name) for name in names] == [None] * len(names)
        assert "ur5" in check("ur5")


def test_every_ros_name_of_the_stack_is_written_in_ros_names_only():
    """Topic, service and action names of the stack (grounded_planner/...) and of the camera (camera/camera/...)
    appear as string literals in grounded_planner/ros/names.py only; nodes, the CLI, the console and the launch
    files import them. (A bag's recorded topics, rollout.record.RolloutTopics, are a file format, not the graph's
    names: the rollout layer is below ros/.)"""
    import ast
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    name = re.compile(r"^/?(grounded_planner|camera/camera)/[a-z_]+(/[a-z_]+)*$")
    # realsense-ros's stream names under any camera prefix (f"{prefix}/color/image_raw"): names.CAMERA_STREAMS
    stream = re.compile(r"(^|/)(color|aligned_depth_to_color|depth)/(image_raw|camera_info)$")
    found = []
    for path in sorted(
        [
            *(repo / "grounded_planner").glob("ros/*.py"),
            *(repo / "grounded_planner").glob("cli/*.py"),
            *(repo / "grounded_planner").glob("console/*.py"),
            *(repo / "launch").glob("*.py"),
        ]
    ):
        if path.name == "names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and (name.match(node.value) or stream.search(node.value))
            ):
                found.append(f"{path.relative_to(repo)}:{node.lineno}: {node.value!r}")
    assert not found, "ROS names written outside grounded_planner/ros/names.py:\n" + "\n".join(found)


def test_the_nodes_say_what_node_main_reads_in_a_base_class():
    """node_main reads configure_error and executor_threads from StackNode, which every node class derives from,
    instead of getattr with a default on whatever node it is given."""
    pytest.importorskip("rclpy")
    import importlib
    import inspect
    from pathlib import Path

    from rclpy.node import Node

    from grounded_planner.ros.node_main import StackNode

    ros = Path(__file__).resolve().parents[1] / "grounded_planner" / "ros"
    nodes = []
    for path in sorted(ros.glob("*_node.py")):
        module = importlib.import_module(f"grounded_planner.ros.{path.stem}")
        nodes += [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, Node) and obj.__module__ == module.__name__
        ]
    assert len(nodes) >= 7
    assert [n.__name__ for n in nodes if not issubclass(n, StackNode)] == []


def test_a_backend_says_whether_the_scene_succeeded_through_the_base_class():
    """The executor node asks its backend (RobotBackend.scene_success) instead of reaching into the simulator's
    workcell: a real robot cannot tell (None), the simulator answers its scenario's success predicates."""
    pytest.importorskip("mujoco")
    from grounded_planner.execution.backends import make_backend
    from grounded_planner.sim.backend import SimBackend

    assert make_backend("franky", ExecutorConfig()).scene_success() is None
    sim = SimBackend()
    assert sim.scene_success() is None  # no workcell before connect()
    sim.connect()
    try:
        assert sim.scene_success() is False  # box_in_bowl: the box starts beside the bowl
        assert sim.scene_success() == sim.workcell.success()
    finally:
        sim.disconnect()


def test_the_simulated_arms_are_the_same_three_wherever_they_are_offered():
    """A scenario's robot: names the arm whose RobotSpec the workcell builds (sim.robots.ROBOT_SPECS), and Spa-Bench
    offers the same arms: scenario.py sits below robots.py (robots -> scene -> scenario), so it keeps its own
    tuple, and this is what keeps the lists one."""
    from grounded_planner.sim.robots import ROBOT_SPECS
    from grounded_planner.sim.scenario import ROBOTS as SCENARIO_ROBOTS
    from grounded_planner.spabench.trial import ROBOTS as SPABENCH_ROBOTS

    assert set(SCENARIO_ROBOTS) == set(ROBOT_SPECS) == set(SPABENCH_ROBOTS)
    assert all(spec.name == name for name, spec in ROBOT_SPECS.items())
