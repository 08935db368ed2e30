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
    assert built == {"sim": "SimBackend", "franky": "FrankyBackend", "lerobot": "LeRobotBackend",
                     "moveit": "MoveItBackend"}


def test_the_nodes_backend_parameters_accept_the_registries_names_and_refuse_others():
    pytest.importorskip("rclpy")
    from grounded_planner.ros.executor_node import PARAMS as EXECUTOR_PARAMS
    from grounded_planner.ros.planner_node import PARAMS as PLANNER_PARAMS

    for params, names in ((PLANNER_PARAMS, BACKENDS), (EXECUTOR_PARAMS, BACKEND_NAMES)):
        check = next(p for p in params if p.name == "backend").check
        assert [check(name) for name in names] == [None] * len(names)
        assert "ur5" in check("ur5")
