"""`grounded-planner execute`: the printed JSON, dry runs on target sets with in- and out-of-workspace targets,
input errors, and one real run on franky-sim through the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grounded_planner.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
FRANKA = ROOT / "config" / "execution_franka.yaml"
SO101 = ROOT / "config" / "execution_so101.yaml"


def write_case(tmp_path: Path, targets: list[dict]) -> tuple[Path, Path]:
    actions = []
    for t in targets:
        if t["type"] == "place":
            actions.append({"type": "place", "object": t["object"], "target": "plate", "point": [320.0, 240.0]})
        else:
            actions.append({"type": t["type"], "object": t["object"], "bbox": [100.0, 100.0, 140.0, 150.0]})
    plan = {"instruction": "test", "image_size": [640, 480], "actions": actions}
    full = [
        {"index": i, "yaw": None, "width": None, "normal": None, "method": "test", "confidence": 0.9, **t}
        for i, t in enumerate(targets)
    ]
    plan_path, targets_path = tmp_path / "plan.json", tmp_path / "targets.json"
    plan_path.write_text(json.dumps(plan))
    targets_path.write_text(json.dumps({"frame": "fr3_link0", "targets": full, "warnings": []}))
    return plan_path, targets_path


def run_cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    code = main(["execute", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_dry_run_reports_every_step_with_in_and_out_of_workspace_targets(tmp_path, capsys):
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05], "yaw": 0.4, "width": 0.06},
            {"type": "place", "object": "cup", "position": [0.5, 0.6, 0.0]},  # 0.6 m to the side: outside
            {"type": "grasp", "object": "box", "position": [0.45, -0.2, 0.03], "yaw": 1.2},
            {"type": "place", "object": "box", "position": [0.6, 0.0, -0.2]},  # below the table: outside
            {"type": "open", "object": "drawer", "position": [0.6, 0.2, 0.25], "normal": [-1.0, 0.0, 0.0]},
        ],
    )
    code, out, err = run_cli(
        capsys,
        "--plan",
        str(plan),
        "--targets",
        str(targets),
        "--backend",
        "franky",
        "--config",
        str(FRANKA),
        "--dry-run",
    )
    assert code == 1, err
    assert set(out) == {"success", "steps"} and out["success"] is False
    assert [set(s) for s in out["steps"]] == [{"index", "type", "outcome", "message"}] * 5
    assert [(s["index"], s["type"], s["outcome"]) for s in out["steps"]] == [
        (0, "grasp", "ok"),
        (1, "place", "outside_workspace"),
        (2, "grasp", "ok"),
        (3, "place", "outside_workspace"),
        (4, "open", "ok"),
    ]
    assert "y=0.600" in out["steps"][1]["message"]
    assert "z=-0.200" in out["steps"][3]["message"]


def test_dry_run_all_inside_succeeds(tmp_path, capsys):
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05]},
            {"type": "place", "object": "cup", "position": [0.55, -0.1, 0.0]},
        ],
    )
    code, out, _ = run_cli(
        capsys, "--plan", str(plan), "--targets", str(targets), "--backend", "moveit", "--dry-run", "--compact"
    )
    assert code == 0
    assert out["success"] is True
    assert all(s["outcome"] == "ok" for s in out["steps"])
    assert "pre_grasp (0.500, 0.100, 0.170)" in out["steps"][0]["message"]
    # moveit can only plan with a running robot: the dry run says what it did not check
    assert "reachability not checked offline by the moveit backend" in out["steps"][0]["message"]


def test_dry_run_on_the_franka_reports_a_box_corner_beyond_its_reach(tmp_path, capsys):
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.78, 0.0, 0.03]},  # far, but straight ahead: reachable
            {"type": "place", "object": "cup", "position": [0.78, 0.44, 0.0]},  # inside the box, beyond the arm
        ],
    )
    code, out, _ = run_cli(capsys, "--plan", str(plan), "--targets", str(targets), "--backend", "franky", "--dry-run")
    assert code == 1
    assert [s["outcome"] for s in out["steps"]] == ["ok", "unreachable"]
    assert "beyond the arm's reach of 0.855 m" in out["steps"][1]["message"]


def test_dry_run_on_the_so101_reports_unreachable_from_its_ik(tmp_path, capsys):
    pytest.importorskip("placo")
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cube", "position": [0.22, 0.05, 0.02], "yaw": 0.0},
            {"type": "place", "object": "cube", "position": [0.12, 0.0, 0.095]},  # in the box, but right in front of
            # the base and high: the arm cannot point its tip down there (IK misses by ~77 mm, far past its 2 mm tolerance)
        ],
    )
    code, out, err = run_cli(
        capsys, "--plan", str(plan), "--targets", str(targets), "--backend", "lerobot", "--dry-run"
    )
    assert code == 1, err
    assert [s["outcome"] for s in out["steps"]] == ["ok", "unreachable"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.update(targets=t["targets"][:1]), "has no target"),
        (lambda t: t["targets"][0].pop("position"), "invalid target"),
        (lambda t: t.update(targets={"0": t["targets"][0]}), "field 'targets' must be a JSON list, got dict"),
        (lambda t: t["targets"].append("place"), "field 'targets[2]' must be a JSON object, got str"),
    ],
)
def test_bad_targets_are_one_line_errors(tmp_path, capsys, mutate, message):
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05]},
            {"type": "place", "object": "cup", "position": [0.55, -0.1, 0.0]},
        ],
    )
    data = json.loads(targets.read_text())
    mutate(data)
    targets.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "--plan", str(plan), "--targets", str(targets), "--dry-run")
    assert code == 2 and out is None
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda t: t["targets"][0].update(width=-0.02),
            "targets {targets}: step 0 (grasp) width: -0.02 must be a finite",
        ),
        (lambda t: t.update(targets=t["targets"][:1]), "do not match: action 1 (place) has no target"),
        (lambda t: t.update(frame="camera_color_optical_frame"), "not the robot base frame"),
    ],
)
def test_a_bad_file_is_refused_before_the_robot_is_connected(tmp_path, capsys, mutate, message):
    """A real run (no --dry-run) on franky aimed at an address where no robot listens: a connect attempt would
    fail with 'cannot connect', so the error shows whether the file was checked first."""
    pytest.importorskip("franky")
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05], "yaw": 0.2, "width": 0.05},
            {"type": "place", "object": "cup", "position": [0.55, -0.1, 0.0]},
        ],
    )
    args = (
        "--plan",
        str(plan),
        "--targets",
        str(targets),
        "--backend",
        "franky",
        "--config",
        str(FRANKA),
        "-o",
        "hostname=127.0.0.2",
        "-o",
        "realtime=false",
    )
    code, out, err = run_cli(capsys, *args)  # the sound file: the backend does try to connect
    assert code == 1 and out is None and "franky: cannot connect to the robot at 127.0.0.2" in err, err
    data = json.loads(targets.read_text())
    mutate(data)
    targets.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out is None, err
    assert message.format(targets=targets) in err and "cannot connect" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_backend_option_is_a_one_line_error(tmp_path, capsys):
    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05]},
            {"type": "place", "object": "cup", "position": [0.5, -0.1, 0.0]},
        ],
    )
    code, _, err = run_cli(
        capsys,
        "--plan",
        str(plan),
        "--targets",
        str(targets),
        "--backend",
        "franky",
        "-o",
        "hostnme=127.0.0.2",
        "--dry-run",
    )
    assert code == 2 and "backends.franky: unknown key(s) hostnme" in err


def test_bad_config_is_a_one_line_error(tmp_path, capsys):
    plan, targets = write_case(tmp_path, [{"type": "grasp", "object": "cup", "position": [0.5, 0.1, 0.05]}])
    bad = tmp_path / "bad.yaml"
    bad.write_text("safety:\n  max_velocity_scale: 3\n")
    code, out, err = run_cli(capsys, "--plan", str(plan), "--targets", str(targets), "--config", str(bad), "--dry-run")
    assert code == 2 and "max_velocity_scale" in err


@pytest.mark.slow
def test_real_run_on_franky_sim_through_the_command(tmp_path):
    pytest.importorskip("franky")
    from helpers.franky_server import franky_sim_server

    plan, targets = write_case(
        tmp_path,
        [
            {"type": "grasp", "object": "cube", "position": [0.45, 0.0, 0.04], "yaw": 0.0},
            {"type": "place", "object": "cube", "position": [0.5, -0.1, 0.0]},
        ],
    )
    config = yaml.safe_load(FRANKA.read_text())
    config["safety"].update(max_velocity_scale=1.0, max_acceleration_scale=0.5)
    config["executor"].update(travel_speed_scale=1.0, fine_speed_scale=0.5)
    cfg_path = tmp_path / "franka.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    with franky_sim_server(cubes=[(0.45, 0.0, 0.02, 0.04)], state_path=str(tmp_path / "state.json")) as host:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "grounded_planner.cli.main",
                "execute",
                "--plan",
                str(plan),
                "--targets",
                str(targets),
                "--backend",
                "franky",
                "--config",
                str(cfg_path),
                "-o",
                f"hostname={host}",
                "-o",
                "realtime=false",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["success"] is True
    assert [s["outcome"] for s in out["steps"]] == ["ok", "ok"]


def test_real_run_on_the_sim_backend(tmp_path, capsys):
    """The MuJoCo workcell's ground-truth plan and targets, executed through the command on `--backend sim`."""
    import grounded_planner.sim  # noqa: F401  (chooses headless GL: must come before MuJoCo is imported)

    pytest.importorskip("mujoco")
    from grounded_planner.sim import SimWorkcell
    from grounded_planner.sim.export import gt_plan, gt_targets

    # the sim backend loads this scenario with seed 0 on connect (SimBackendConfig defaults)
    with SimWorkcell.from_scenario(ROOT / "config" / "scenarios" / "box_in_bowl.yaml", seed=0) as cell:
        plan = gt_plan(cell)
        targets = gt_targets(cell, plan)
    plan_path, targets_path = tmp_path / "plan.json", tmp_path / "targets.json"
    plan_path.write_text(plan.to_json())
    targets_path.write_text(json.dumps(targets.to_dict()))
    code, out, err = run_cli(capsys, "--plan", str(plan_path), "--targets", str(targets_path), "--backend", "sim")
    assert code == 0, err
    assert out["success"] is True
    assert [(s["type"], s["outcome"]) for s in out["steps"]] == [("grasp", "ok"), ("place", "ok")]


@pytest.mark.parametrize("answer, reason", [("n\n", "answered 'n'"), (None, "no answer within the timeout")])
def test_confirm_rejected_or_unanswered_moves_nothing(tmp_path, answer, reason):
    pytest.importorskip("mujoco")
    targets = [
        {"type": "grasp", "object": "red box", "position": [0.40, 0.15, 0.03]},
        {"type": "place", "object": "red box", "position": [0.45, -0.12, 0.02]},
    ]
    plan_path, targets_path = write_case(tmp_path, targets)
    data = json.loads(targets_path.read_text())
    targets_path.write_text(json.dumps({**data, "frame": "base_link"}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grounded_planner.cli.main",
            "execute",
            "--plan",
            str(plan_path),
            "--targets",
            str(targets_path),
            "--backend",
            "sim",
            "--confirm",
            "--confirm-timeout",
            "3",
            "--compact",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        out, err = proc.communicate(input=answer, timeout=120) if answer else (None, None)
        if answer is None:  # keep stdin open and silent: the prompt must give up by itself
            out, err = proc.stdout.read(), proc.stderr.read()
            proc.wait(timeout=120)
    finally:
        proc.kill()
    result = json.loads(out)
    assert proc.returncode == 1 and result["approved"] is False and result["steps"] == []
    assert reason in result["message"] and "nothing moved" in err and "step 0 grasp: ok" in err
