"""Launch arguments that say what is wrong: every refusal names the argument as NAME:=VALUE (the rules live in
grounded_planner/ros/launch_args.py, which both launch files call; launch/launch_ros are not needed here)."""

from __future__ import annotations

import os

import pytest

from conftest import REPO
from helpers.launch_files import launch_table
from grounded_planner.ros import launch_args
from grounded_planner.ros.launch_args import LaunchArgumentError


def _declared(name: str) -> dict[str, tuple[str, str]]:
    """ARGUMENTS of a launch file: name -> (default, description), read without importing launch."""
    return {key: (default, text) for key, default, text in launch_table(name, "ARGUMENTS")}


@pytest.mark.parametrize("name", ["real.launch.py", "replay.launch.py"])
def test_both_launch_files_take_a_namespace_and_say_where_logs_go(name):
    args = _declared(name)
    assert "namespace" in args
    assert args["log_dir"][0] == "<DEFAULT_LOG_DIR>" and launch_args.DEFAULT_LOG_DIR.startswith("~/.ros/")
    assert "relative to the directory ros2 launch runs in" in args["log_dir"][1]
    assert "decoupled" in args["planner_backend"][1]
    assert "a missing file is an error" in args["config"][1]


def test_real_launch_has_dry_run_and_realsense_camera_names():
    args = _declared("real.launch.py")
    assert args["dry_run"][0] == "false"
    assert args["camera_namespace"][0] == "camera" and args["camera_name"][0] == "camera"
    assert args["moveit_config"][0] == ""  # the robot decides: never the Franka config for an SO-101


@pytest.mark.parametrize("text,value", [("true", True), ("False", False), ("1", True), ("off", False)])
def test_booleans_read_as_ros_users_write_them(text, value):
    assert launch_args.boolean("loop", text) is value


@pytest.mark.parametrize("text", ["maybe", "", "ture", "2"])
def test_a_word_that_is_not_a_boolean_is_refused_by_the_arguments_name(text):
    """It used to be taken as false: loop:=ture stopped looping without a word."""
    with pytest.raises(LaunchArgumentError, match=r"loop:=.* is not a boolean: use loop:=true or loop:=false"):
        launch_args.boolean("loop", text)


@pytest.mark.parametrize("text", ["fast", "0", "-1", "nan", "inf", ""])
def test_a_rate_that_is_not_a_positive_number_is_refused_by_name(text):
    with pytest.raises(LaunchArgumentError, match=r"launch argument rate:=.* must be a number > 0"):
        launch_args.positive_number("rate", text)
    assert launch_args.positive_number("rate", "2.5") == 2.5


@pytest.mark.parametrize("backend", ["openai", "transformers", "decoupled"])
def test_a_backend_that_needs_a_model_refuses_to_start_without_model(backend):
    """Every request used to fail naming the CLI's `--model or GP_VLM_MODEL`, which a launch user cannot pass."""
    with pytest.raises(LaunchArgumentError) as info:
        launch_args.planner(backend, "", "")
    message = str(info.value)
    assert f"model:= is required with planner_backend:={backend}" in message
    assert "--model" not in message and "GP_VLM_MODEL" not in message
    assert launch_args.planner(backend, "Qwen/Qwen3-VL-8B-Instruct", "")["model"] == "Qwen/Qwen3-VL-8B-Instruct"


def test_gemini_has_a_default_model_and_replay_needs_its_file(tmp_path):
    assert launch_args.planner("gemini", "", "")["backend"] == "gemini"
    with pytest.raises(LaunchArgumentError, match=r"replay_file:='': no such file"):
        launch_args.planner("replay", "", "")
    plans = tmp_path / "plans.jsonl"
    plans.write_text("{}\n")
    assert launch_args.planner("replay", "", str(plans))["replay_file"] == str(plans)
    with pytest.raises(LaunchArgumentError, match=r"planner_backend:=gpt must be one of openai \| gemini"):
        launch_args.planner("gpt", "m", "")


def test_a_missing_config_file_is_an_error_not_built_in_defaults(tmp_path):
    with pytest.raises(LaunchArgumentError, match=r"config:=/missing.yaml: no such file"):
        launch_args.existing_file("config", "/missing.yaml", "the parameters file for every node")
    real = launch_args.existing_file("config", str(REPO / "config" / "real.yaml"), "x")
    assert os.path.isabs(real)


def test_the_so101_never_gets_the_franka_moveit_config():
    assert launch_args.moveit_config("franka", "", "") == ("franka_fr3_moveit_config", "fr3")
    with pytest.raises(LaunchArgumentError, match=r"robot:=so101 needs moveit_config:=PACKAGE"):
        launch_args.moveit_config("so101", "", "")
    assert launch_args.moveit_config("so101", "so101_moveit_config", "so101") == ("so101_moveit_config", "so101")


def test_missing_moveit_says_what_to_install(monkeypatch):
    monkeypatch.setenv("ROS_DISTRO", "jazzy")
    error = launch_args.moveit_missing(ModuleNotFoundError("No module named 'moveit_configs_utils'"))
    message = str(error)
    assert "executor_backend:=moveit needs MoveIt 2" in message
    assert "sudo apt install ros-jazzy-moveit" in message and "ros-jazzy-moveit-configs-utils" in message
    assert "not on PyPI" in message and "executor_backend:=franky" in message


def test_replay_defaults_to_the_calibration_stored_beside_the_bag_or_refuses(tmp_path):
    bag = tmp_path / "out" / "scene"
    bag.mkdir(parents=True)
    (bag / "metadata.yaml").write_text("{}\n")
    with pytest.raises(LaunchArgumentError, match=r"extrinsics_file:= is required for bag:="):
        launch_args.extrinsics_beside_bag(str(bag))
    beside = tmp_path / "out" / "calibration" / "extrinsics.yaml"  # what the demo writes
    beside.parent.mkdir()
    beside.write_text("x: 1\n")
    assert launch_args.extrinsics_beside_bag(str(bag)) == str(beside)
    inside = bag / "extrinsics.yaml"
    inside.write_text("x: 1\n")
    assert launch_args.extrinsics_beside_bag(str(bag)) == str(inside)  # the bag's own first


def test_namespace_and_log_dir(tmp_path, monkeypatch):
    assert launch_args.namespace("") == "" and launch_args.namespace("robot1") == "robot1"
    assert launch_args.namespace("/fleet/robot1/") == "/fleet/robot1"  # absolute stays absolute
    with pytest.raises(LaunchArgumentError, match=r"namespace:=robot 1"):
        launch_args.namespace("robot 1")
    monkeypatch.chdir(tmp_path)
    assert launch_args.log_dir("rollouts") == str(tmp_path / "rollouts")
    assert launch_args.log_dir("") == os.path.expanduser(launch_args.DEFAULT_LOG_DIR)


def test_install_hints_name_a_command_for_a_colcon_install_and_one_for_the_venv():
    from grounded_planner.install_hints import install_hint

    hint = install_hint("franky-control", "execution")
    assert hint.startswith("pip install franky-control (a colcon install: pip install franky-control")
    assert "this repository's venv: pip install -e '.[execution]'" in hint
    assert "grounded_planner[" not in hint  # an extra a colcon install does not have
    assert "rosdep install --from-paths src -y (key python3-mujoco-pip)" in install_hint(
        "mujoco", "sim", "python3-mujoco-pip"
    )


@pytest.mark.parametrize("name", ["real.launch.py", "replay.launch.py"])
def test_both_launch_files_declare_the_console_arguments_the_console_helper_reads(name):
    declared = _declared(name)
    for key, default, text in launch_args.CONSOLE_ARGUMENTS:
        assert declared[key] == (default, text), name


def test_the_console_starts_only_when_asked_with_its_address_port_token_and_rollouts():
    arguments = {"console": "false", "console_host": "0.0.0.0", "console_port": "8090", "console_token": "s3cret"}
    assert launch_args.console(arguments, "/data/rollouts") == {}
    assert launch_args.console({**arguments, "console": "on"}, "/data/rollouts") == {
        "console": {"host": "0.0.0.0", "port": 8090, "token": "s3cret", "rollouts_dir": "/data/rollouts"}
    }
    with pytest.raises(LaunchArgumentError, match=r"console_port:=http must be a number > 0"):
        launch_args.console({**arguments, "console": "true", "console_port": "http"}, "/data/rollouts")
    with pytest.raises(LaunchArgumentError, match=r"console:=maybe is not a boolean"):
        launch_args.console({**arguments, "console": "maybe"}, "/data/rollouts")


def test_each_node_reads_the_parameters_file_then_its_overrides_in_the_namespace_given():
    nodes = launch_args.nodes("robot1", "/cfg/real.yaml", {"planner": {"model": "m"}, "executor": {}})
    assert nodes == [
        {
            "package": "grounded_planner",
            "executable": "planner_node",
            "name": "planner",
            "namespace": "robot1",
            "output": "screen",
            "parameters": ["/cfg/real.yaml", {"model": "m"}],
        },
        {
            "package": "grounded_planner",
            "executable": "executor_node",
            "name": "executor",
            "namespace": "robot1",
            "output": "screen",
            "parameters": ["/cfg/real.yaml"],
        },
    ]


def test_the_backend_arguments_offer_the_registries_names():
    from grounded_planner.execution.config import BACKEND_NAMES
    from grounded_planner.vlm.config import BACKENDS

    assert [launch_args.executor_backend(name) for name in BACKEND_NAMES] == list(BACKEND_NAMES)
    with pytest.raises(LaunchArgumentError, match=r"executor_backend:=ur5 must be one of sim \| franky"):
        launch_args.executor_backend("ur5")
    real, replay = _declared("real.launch.py"), _declared("replay.launch.py")
    assert real["executor_backend"][1].endswith("(" + " | ".join(BACKEND_NAMES) + ")")
    assert real["planner_backend"] == replay["planner_backend"] == ("openai", " | ".join(BACKENDS))
