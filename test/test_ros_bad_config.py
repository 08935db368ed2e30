"""Bad configuration is refused at startup with one line naming the input, never a traceback: bad bringup profiles
through `grounded-planner bringup`, bad `--ros-args` to the standalone node scripts (issue 18 item 5)."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, requires_ros

pytestmark = [requires_ros, pytest.mark.ros]

NOT_YAML = "planner:\n  ros__parameters: {backend: [openai\n"
BAD_EXECUTOR_CONFIG = "safety:\n  workspace_min_m: [1, 1]\n"


def section(node, **params):
    lines = [f"{node}:", "  ros__parameters:"] + [f"    {k}: {v}" for k, v in params.items()]
    return "\n".join(lines) + "\n"


# (name, profile text ({tmp} = the test's folder), words the one line must contain)
BAD_PROFILES = [
    ("float_as_string", section("planner", timeout_s="fast"), ["'timeout_s'", "must be a number", "'fast'"]),
    ("int_as_float", section("planner", max_retries=1.5), ["'max_retries'", "must be an integer", "1.5"]),
    ("string_as_mapping", section("planner", model="{a: 1}"), ["'model'", "must be a string", "mapping"]),
    ("string_as_list", section("planner", backend="[openai]"), ["'backend'", "must be a string", "list"]),
    ("bool_as_string", section("executor", dry_run='"yes"'), ["'dry_run'", "must be a boolean"]),
    ("int_as_string", section("camera", fps='"30"'), ["'fps'", "must be an integer"]),
    ("bool_as_float", section("planner", timeout_s="true"), ["'timeout_s'", "must be a number", "boolean"]),
    ("nan_float", section("planner", timeout_s=".nan"), ["'timeout_s'", "finite"]),
    ("int_beyond_64_bits", section("planner", max_retries=10**30), ["'max_retries'", "within 64 bits"]),
    ("int_beyond_a_float", section("planner", timeout_s=10**400), ["'timeout_s'", "finite number, got inf"]),
    ("null_value", section("planner", model=""), ["'model'", "must be a string", "empty YAML value"]),
    ("list_as_string", section("bag_player", bag="{tmp}", topics="/camera"), ["'topics'", "list of strings"]),
    ("negative_rate", section("bag_player", bag="{tmp}", rate=-1.0), ["'rate'", "must be > 0"]),
    ("unknown_choice", section("executor", backend="ur5"), ["'backend'", "must be one of sim"]),
    (
        "missing_extrinsics",
        section("planner", extrinsics_file="{tmp}/no_such.yaml"),
        ["'extrinsics_file'", "no_such.yaml"],
    ),
    (
        "bad_extrinsics",
        section("backprojection", extrinsics_file="{tmp}/not_yaml.txt"),
        ["'extrinsics_file'", "not valid YAML"],
    ),
    (
        "missing_replay_file",
        section("planner", backend="replay", replay_file="{tmp}/no_plans.jsonl"),
        ["'replay_file'", "no_plans.jsonl"],
    ),
    ("replay_without_file", section("planner", backend="replay"), ["replay_file", "required"]),
    (
        "bad_replay_file",
        section("planner", backend="replay", replay_file="{tmp}/not_yaml.txt"),
        ["'replay_file'", "not a replay record"],
    ),
    ("missing_config_file", section("executor", config_file="{tmp}/no_exec.yaml"), ["'config_file'", "no_exec.yaml"]),
    ("bad_config_file", section("executor", config_file="{tmp}/bad_exec.yaml"), ["'config_file'", "workspace_min_m"]),
    ("missing_bag", section("bag_player", bag="{tmp}/no_bag"), ["'bag'", "no_bag"]),
    (
        "log_dir_under_a_file",
        section("rollout_logger", log_dir="{tmp}/not_yaml.txt/rollouts"),
        ["'log_dir'", "is a file"],
    ),
    ("no_ros_parameters", "planner:\n  backend: openai\n", ["section 'planner'", "ros__parameters"]),
    ("section_a_list", "planner: [1, 2]\n", ["section 'planner'", "ros__parameters"]),
    ("parameters_a_list", "planner:\n  ros__parameters: [backend, openai]\n", ["section 'planner'", "ros__parameters"]),
    ("unknown_node", section("plannr", backend="openai"), ["unknown node 'plannr'"]),
    ("unknown_parameter", section("planner", modle="x"), ["no parameter 'modle'"]),
    ("not_a_mapping", "- planner\n- executor\n", ["mapping of node names"]),
    ("not_yaml", NOT_YAML, ["not valid YAML"]),
    ("no_node", "", ["names no node"]),
]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "not_yaml.txt").write_text(NOT_YAML)
    (tmp_path / "bad_exec.yaml").write_text(BAD_EXECUTOR_CONFIG)
    return tmp_path


@pytest.mark.parametrize("name,text,words", BAD_PROFILES, ids=[p[0] for p in BAD_PROFILES])
def test_bad_profile_is_refused_in_one_line(name, text, words, files, capfd, ros_domain):
    from grounded_planner.cli.main import main

    profile = files / f"{name}.yaml"
    profile.write_text(text.replace("{tmp}", str(files)))
    code = main(["bringup", "--config", str(profile)])
    err = capfd.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("grounded-planner bringup: "), err
    assert "Traceback" not in err and "AttributeError" not in err
    for word in words:
        assert word.replace("{tmp}", str(files)) in lines[0], (word, lines[0])


def test_a_half_built_rollout_logger_does_not_hide_the_reason(ros_domain):
    # rclpy destroys every node of a context at shutdown, a half-built one too: its destroy_node used to raise
    # AttributeError ... '_lock' over the error that stopped the node's construction
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from grounded_planner.ros.rollout_logger_node import RolloutLoggerNode

    context = Context()
    rclpy.init(context=context, domain_id=ros_domain)
    try:
        with pytest.raises(ValueError, match="parameter 'frame_rate_hz' must be >= 0"):
            RolloutLoggerNode(context=context, parameter_overrides=[Parameter("frame_rate_hz", value=-1.0)])
    finally:
        rclpy.shutdown(context=context)  # destroys the half-built node: must not raise


def node_script(name):
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", f"grounded_planner.ros.{name}"]


@pytest.mark.parametrize(
    "node,args,words",
    [
        (
            "planner_node",
            ["-p", "timeout_s:=fast"],
            ["planner_node: planner: parameter 'timeout_s' must be a number, got 'fast'"],
        ),
        ("planner_node", ["-p", "max_retries:=1.5"], ["parameter 'max_retries' must be an integer, got 1.5"]),
        ("planner_node", ["-p", "model:={a: 1}"], ["planner_node: bad --ros-args", "-p model:={a: 1}"]),
        ("planner_node", ["-p", "extrinsics_file:={tmp}/no_such.yaml"], ["parameter 'extrinsics_file' names no file"]),
        ("executor_node", ["-p", "config_file:={tmp}/no_exec.yaml"], ["parameter 'config_file' names no file"]),
        ("rollout_logger_node", ["-p", "log_dir:={tmp}/not_yaml.txt/x"], ["parameter 'log_dir' cannot be a folder"]),
        ("camera_node", ["-p", "playback_file:={tmp}/no_such.bag"], ["parameter 'playback_file' names nothing"]),
    ],
    ids=[
        "string_for_float",
        "float_for_int",
        "malformed_override",
        "missing_extrinsics",
        "missing_executor_config",
        "log_dir_under_a_file",
        "missing_recording",
    ],
)
def test_standalone_node_refuses_bad_ros_args_in_one_line(node, args, words, files, ros_domain):
    args = [a.replace("{tmp}", str(files)) for a in args]
    proc = subprocess.run(
        node_script(node) + ["--ros-args", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    last = proc.stderr.strip().splitlines()[-1]
    for word in words:
        assert word in last, (word, out)


def test_standalone_executor_that_cannot_configure_exits_with_the_reason(files, ros_domain):
    # a config that loads but names a backend whose robot is not there: configure fails, the node must not keep
    # running unusable (it used to log "configure failed" and spin on)
    proc = subprocess.run(
        node_script("executor_node")
        + ["--ros-args", "-p", "backend:=lerobot", "-p", "config_file:=config/execution_so101.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    assert "executor_node: node 'executor' failed to configure: " in proc.stderr.strip().splitlines()[-1], out
