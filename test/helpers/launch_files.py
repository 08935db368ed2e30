"""What launch/*.launch.py say, read without a ROS install: a module-level table as a literal (AST only), and the
nodes a launch file starts for given arguments (evaluated under the launch/launch_ros double of
helpers/launch_double.py, nothing started)."""

from __future__ import annotations

import ast
import importlib.util
import sys

from conftest import REPO
from grounded_planner.ros import launch_args

# arguments with which each launch file starts every node it can (the console included) without hardware or MoveIt
EVERY_NODE = {
    "real.launch.py": {"model": "Qwen/Qwen3-VL-8B-Instruct", "console": "true"},
    "replay.launch.py": {
        "model": "Qwen/Qwen3-VL-8B-Instruct",
        "console": "true",
        "extrinsics_file": str(REPO / "calibration" / "realsense_d435_eye_to_hand.yaml"),
    },
}

# franka_ros2's packages that real.launch.py reads for executor_backend:=moveit, as helpers/fake_moveit_configs.py
# lays them out (its FRANKA_FILES), for load_launch's ``packages``
FRANKA_ROS2 = {"franka_fr3_moveit_config": None, "franka_bringup": None, "franka_description": None}


def launch_table(name: str, table: str):
    """A module-level literal of a launch file: ``os.path.join(SHARE, ...)`` read as a repository path, a constant
    imported from the package (``DEFAULT_LOG_DIR``) as ``<NAME>``, and ``launch_args.X`` (``*launch_args.X``: its
    rows) as the value of grounded_planner.ros.launch_args.X (plain Python, imported)."""
    tree = ast.parse((REPO / "launch" / name).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == table:

            class Literal(ast.NodeTransformer):
                def visit_Call(self, call):
                    if ast.unparse(call.func) == "os.path.join":
                        return ast.Constant("/".join(ast.literal_eval(a) for a in call.args[1:]))
                    return self.generic_visit(call)

                def visit_Name(self, name):
                    return ast.Constant(f"<{name.id}>")

                def visit_Attribute(self, attribute):
                    if ast.unparse(attribute.value) == "launch_args":
                        return ast.Constant(getattr(launch_args, attribute.attr))
                    return self.generic_visit(attribute)

                def visit_List(self, rows):
                    elements = []
                    for element in rows.elts:
                        if isinstance(element, ast.Starred) and ast.unparse(element.value).startswith("launch_args."):
                            shared = getattr(launch_args, element.value.attr)
                            elements += [ast.Constant(row) for row in shared]
                        else:
                            elements.append(self.visit(element))
                    return ast.List(elements, ast.Load())

            return ast.literal_eval(Literal().visit(node.value))
    raise AssertionError(f"{name} has no {table}")


def load_launch(name: str, tmp_path, monkeypatch, packages: dict | None = None):
    """(defaults, make_nodes, nodes) of launch/NAME under the launch/launch_ros stand-ins of
    helpers/fake_moveit_configs.py: ``make_nodes(arguments)`` runs its OpaqueFunction, and every ``Node(...)`` it
    makes lands in ``nodes`` as its keyword arguments. The ament prefix under ``tmp_path`` holds ``packages``
    (default: grounded_planner, its share folder the repository); ``monkeypatch`` puts the environment and
    ``sys.modules`` back afterwards."""
    from helpers.fake_moveit_configs import launch_modules, write_ament_prefix

    prefix = tmp_path / "ament_prefix"
    if not prefix.exists():  # a second launch in the same test finds the package where the first registered it
        write_ament_prefix(prefix, packages or {"grounded_planner": REPO})
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    nodes: list = []
    for module_name, module in launch_modules(nodes).items():
        monkeypatch.setitem(sys.modules, module_name, module)
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), REPO / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    *declared, make_nodes = module.generate_launch_description()
    return dict(declared), make_nodes, nodes


def launched_nodes(name: str, assignments: dict[str, str], tmp_path, monkeypatch) -> list[dict]:
    """The ``Node(...)`` keyword arguments launch/NAME returns for ``assignments`` over its defaults (see
    :func:`load_launch`). A replay without ``bag`` gets an empty bag folder."""
    defaults, make_nodes, nodes = load_launch(name, tmp_path, monkeypatch)
    if name == "replay.launch.py" and "bag" not in assignments:
        (tmp_path / "bag").mkdir(exist_ok=True)
        assignments = {**assignments, "bag": str(tmp_path / "bag")}
    unknown = sorted(set(assignments) - set(defaults))
    assert not unknown, f"{name} declares no argument(s) {', '.join(unknown)}"  # ros2 launch would ignore them
    make_nodes({**defaults, **assignments})
    return nodes
