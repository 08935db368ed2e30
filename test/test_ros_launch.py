"""Static checks of the launch files and config profiles (launch/launch_ros are not installable as wheels here):
every executable, config and calibration file they name exists, and every parameter they set is one the node has."""

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO, requires_ros

LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))


def _is_profile(path: Path) -> bool:
    """A bringup/launch profile is a ROS 2 parameters file: every top-level value holds ros__parameters."""
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    return bool(data) and all(isinstance(v, dict) and "ros__parameters" in v for v in data.values())


PROFILES = sorted(p for p in (REPO / "config").glob("*.yaml") if _is_profile(p))


def console_scripts() -> dict[str, str]:
    text = (REPO / "setup.py").read_text()
    return dict(re.findall(r'"([\w-]+) = ([\w.]+:\w+)"', text))


def share_files(path: Path) -> list[str]:
    """The package data files a launch file names (``os.path.join(SHARE, "config", ...)``), as repository paths."""
    calls = (n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Call))
    return [
        "/".join(ast.literal_eval(a) for a in call.args[1:])
        for call in calls
        if ast.unparse(call.func) == "os.path.join" and len(call.args) == 3 and ast.unparse(call.args[0]) == "SHARE"
    ]


@pytest.fixture
def every_node(tmp_path, monkeypatch):
    """path -> the Node keyword arguments the launch file returns when it starts every node it can (console too)."""
    pytest.importorskip("ament_index_python")
    from helpers.launch_files import EVERY_NODE, launched_nodes

    return lambda path: launched_nodes(path.name, EVERY_NODE[path.name], tmp_path, monkeypatch)


def test_there_are_real_and_replay_launch_files_and_profiles():
    assert {p.name for p in LAUNCH_FILES} >= {"real.launch.py", "replay.launch.py"}
    assert {p.name for p in PROFILES} >= {"real.yaml", "replay.yaml"}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_names_only_things_that_exist(path, every_node):
    scripts = console_scripts()
    nodes = every_node(path)
    assert {node["name"] for node in nodes} >= {"planner", "executor", "rollout_logger", "console"}, path.name
    for exe in (node["executable"] for node in nodes):
        assert exe in scripts, f"{path.name}: executable {exe!r} is not a console script in setup.py"
        module, func = scripts[exe].split(":")
        source = REPO / (module.replace(".", "/") + ".py")
        assert source.is_file() and f"def {func}(" in source.read_text(), f"{exe}: {scripts[exe]} does not exist"
    for rel in share_files(path):
        assert (REPO / rel).is_file(), f"{path.name} names {rel}, which is not in the repository"
        top = rel.split("/")[0]
        assert top in ("config", "calibration"), f"{rel}: setup.py installs only config/ and calibration/ data"


@requires_ros
@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_overrides_are_parameters_the_nodes_have(path, every_node):
    from grounded_planner.ros.bringup import NODE_TYPES, _node_module

    for node in every_node(path):
        name = node["name"]
        assert name in NODE_TYPES, f"{path.name}: node name {name!r} has no section type (profile sections key on it)"
        have = {p.name for p in _node_module(name).PARAMS}
        given = {key for values in node["parameters"] if isinstance(values, dict) for key in values}
        assert given <= have, f"{path.name}: {name} gets unknown parameter(s) {given - have}"


@requires_ros
@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_profile_parameters_and_files_exist(path):
    from grounded_planner.ros.bringup import Profile, parameter_overrides
    from grounded_planner.ros.params import resolve_data_path

    profile = Profile.load(path)
    assert profile.params, f"{path.name} names no node"
    for node, values in profile.params.items():
        parameter_overrides(node, values)  # raises for a parameter the node does not have
        for key, value in values.items():
            if key.endswith("_file") and value:
                assert Path(resolve_data_path(value)).is_file(), f"{path.name}: {node}.{key} = {value} does not exist"


@requires_ros
def test_profile_errors_name_the_problem(tmp_path):
    from grounded_planner.ros.bringup import Profile, ProfileError, parameter_overrides

    bad = tmp_path / "bad.yaml"
    bad.write_text("planer:\n  ros__parameters: {backend: openai}\n")
    with pytest.raises(ProfileError, match="unknown node 'planer'"):
        Profile.load(bad)
    profile = Profile.load(REPO / "config" / "replay.yaml")
    with pytest.raises(ProfileError, match="must look like node.param=value"):
        profile.set("planner=openai")
    profile.set("planner.timeout_s=5")
    assert parameter_overrides("planner", profile.params["planner"])  # 5 becomes 5.0 for a float parameter
    with pytest.raises(ProfileError, match="node 'planner' has no parameter 'modle'"):
        parameter_overrides("planner", {"modle": "x"})


@requires_ros
def test_docs_document_every_node_parameter():
    from grounded_planner.ros.bringup import NODE_TYPES, _node_module

    page = (REPO / "docs" / "ros_nodes.md").read_text()
    for name in NODE_TYPES:
        module = _node_module(name)
        exe = module.__name__.rsplit(".", 1)[1]
        assert f"<code>{exe}</code> parameters" in page, f"docs/ros_nodes.md has no parameter table for {exe}"
        # each node's table lists exactly its parameters (a parameter of another node does not count)
        table = page.split(f"<code>{exe}</code> parameters", 1)[1].split("</details>", 1)[0]
        for param in module.PARAMS:
            assert f"| `{param.name}` |" in table, f"docs/ros_nodes.md does not document {exe} parameter {param.name}"


def test_readme_is_a_front_door():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "README.md grew past 300 lines: move detail into docs/"
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), f"README links to missing {link}"
    for command in ("make demo", "make test"):
        assert command in readme


@requires_ros
def test_profile_paths_resolve_from_any_working_directory(tmp_path, monkeypatch):
    from grounded_planner.ros.params import resolve_data_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)  # a plain venv: no ament index to ask
    found = resolve_data_path("calibration/realsense_d435_eye_to_hand.yaml")
    assert Path(found).is_file() and Path(found).is_absolute()
    assert resolve_data_path("calibration/no_such.yaml") == "calibration/no_such.yaml"  # errors name what was written


def test_real_launch_with_moveit_hands_the_config_package_to_moveit_py(tmp_path, monkeypatch):
    """`real.launch.py robot:=franka executor_backend:=moveit moveit_config:=franka_fr3_moveit_config`, run with the
    test doubles of launch/launch_ros, MoveItConfigsBuilder and franka_ros2's file layout named in
    helpers/fake_moveit_configs.py (none is installable here): the executor gets a parameters file with the config
    package's robot, controllers and planners and our moveit_py settings, and moveit_py (double) starts and plans
    from it."""
    import tempfile

    import yaml

    pytest.importorskip("ament_index_python")
    pytest.importorskip("geometry_msgs.msg")
    from grounded_planner.execution.backends.moveit_backend import MoveItBackend, MoveItConfig
    from helpers.fake_moveit_py import FakeGripper, FakeMoveItModule
    from helpers.launch_files import FRANKA_ROS2, load_launch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the launch file writes the parameters file
    defaults, make_nodes, nodes = load_launch(
        "real.launch.py", tmp_path, monkeypatch, {"grounded_planner": REPO, **FRANKA_ROS2}
    )

    make_nodes({**defaults, "robot": "franka", "executor_backend": "moveit", "model": "Qwen/Qwen3-VL-8B-Instruct"})
    executor = next(node for node in nodes if node["name"] == "executor")
    overrides = executor["parameters"][1]
    assert overrides["backend"] == "moveit" and Path(overrides["moveit_params_file"]).parent == tmp_path
    params = yaml.safe_load(Path(overrides["moveit_params_file"]).read_text())["/**"]["ros__parameters"]
    assert params["robot_description"].startswith("<robot name='fr3'><!-- hand true, ee franka_hand -->")
    assert params["moveit_simple_controller_manager"]["controller_names"] == ["fr3_arm_controller", "fr3_gripper"]
    assert params["ompl"]["planning_plugins"] == ["ompl_interface/OMPLPlanner"]  # ours, beside the package's:
    assert "RRTConnectkConfigDefault" in params["ompl"]["planner_configs"]
    assert params["planning_pipelines"] == {"pipeline_names": ["ompl"]}
    fake = FakeMoveItModule()
    backend = MoveItBackend(
        MoveItConfig(params_files=[overrides["moveit_params_file"]]), **fake.backend_args(lambda c: FakeGripper(0.03))
    )
    backend.connect()
    backend.move_to_pose((0.5, 0.0, 0.3), 0.0, 0.3)
    assert fake[0].goals[-1][3] == "ompl" and fake[0].executed

    nodes.clear()
    make_nodes({**defaults, "robot": "franka", "model": "Qwen/Qwen3-VL-8B-Instruct"})  # franky: no MoveIt involved
    executor = next(node for node in nodes if node["name"] == "executor")
    assert executor["parameters"][1]["backend"] == "franky" and executor["parameters"][1]["moveit_params_file"] == ""
