"""No traceback from the `grounded-planner` command for bad input (issue 18.5): many bad files and values through
the real entry point — each ends in one line naming the input and a non-zero exit — and a closed output pipe
(`... | head`) ends quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grounded_planner.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EPISODES = ROOT / "data" / "sample_bench" / "episodes.jsonl"
PREDICTIONS = ROOT / "data" / "sample_bench" / "predictions.jsonl"
FRANKA = ROOT / "config" / "execution_franka.yaml"
EXE = Path(sys.executable).with_name("grounded-planner")

PLAN = {
    "instruction": "t",
    "image_size": [640, 480],
    "actions": [
        {"type": "grasp", "object": "cup", "bbox": [100, 100, 140, 150]},
        {"type": "place", "object": "cup", "target": "plate", "point": [320, 240]},
    ],
}


def target(**fields):
    return {
        "index": 0,
        "type": "grasp",
        "object": "cup",
        "position": [0.5, 0.1, 0.05],
        "yaw": 0.4,
        "width": 0.06,
        "normal": None,
        "method": "t",
        "confidence": 0.9,
        **fields,
    }


PLACE = {**target(), "index": 1, "type": "place", "yaw": None, "width": None}


def write(folder: Path, name: str, content) -> str:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def bench_cases(tmp: Path) -> list[tuple[list[str], str]]:
    first = PREDICTIONS.read_text().splitlines()[0]
    score = ["bench", "score", "--episodes", str(EPISODES), "--predictions"]
    return [
        (
            score + [write(tmp, "bytes.jsonl", b'{"id": "ep-01", "plan": null, "error": "\xff"}\n')],
            "bytes.jsonl:1: not UTF-8",
        ),
        (
            ["bench", "score", "--episodes", write(tmp, "eps.jsonl", b"\xfe\n"), "--predictions", str(PREDICTIONS)],
            "eps.jsonl:1",
        ),
        (score + [write(tmp, "notjson.jsonl", "{")], "notjson.jsonl:1"),
        (score + [write(tmp, "list.jsonl", "[1, 2]")], "list.jsonl:1"),
        (score + [str(tmp / "missing.jsonl")], "missing.jsonl"),
        (score + [str(tmp)], str(tmp)),
        (["bench", "score", "--episodes", str(tmp), "--predictions", str(PREDICTIONS)], str(tmp)),
        (score + [write(tmp, "empty_id.jsonl", '{"plan": null}')], "empty_id.jsonl:1"),
        (
            [
                "bench",
                "score",
                "--episodes",
                write(tmp, "eps_big.jsonl", EPISODES.read_text().splitlines()[0].replace("205", "9" * 400)),
                "--predictions",
                str(PREDICTIONS),
            ],
            "eps_big.jsonl:1",
        ),
    ] + [
        (score + [write(tmp, f"odd{i}.jsonl", first.replace("206", odd))], "")
        for i, odd in enumerate(["9" * 400, "NaN", "1e999", '"x"', "[1]", "{}", "null"])
    ]


def execute_cases(tmp: Path) -> list[tuple[list[str], str]]:
    plan = write(tmp, "plan.json", PLAN)

    def ex(name, targets, plan_path=plan):
        return [
            "execute",
            "--plan",
            plan_path,
            "--targets",
            write(tmp, name, targets),
            "--backend",
            "franky",
            "--config",
            str(FRANKA),
            "--dry-run",
        ]

    return [
        (ex("t_object.json", {"frame": "fr3_link0", "targets": {"a": 1}, "warnings": []}), "t_object.json"),
        (ex("t_string.json", {"frame": "fr3_link0", "targets": ["cup", PLACE], "warnings": []}), "t_string.json"),
        (ex("t_list.json", [target(), PLACE]), "t_list.json"),
        (ex("t_position.json", {"frame": "fr3_link0", "targets": [target(position="x"), PLACE]}), "t_position.json"),
        (ex("t_index.json", {"frame": "fr3_link0", "targets": [target(index="a"), PLACE]}), "t_index.json"),
        (ex("t_yaw.json", {"frame": "fr3_link0", "targets": [target(yaw=[1]), PLACE]}), "t_yaw.json"),
        (
            ex(
                "t_nan_yaw.json",
                '{"frame": "fr3_link0", "targets": ['
                + json.dumps(target(yaw=float("nan")))
                + ", "
                + json.dumps(PLACE)
                + "]}",
            ),
            "t_nan_yaw.json",
        ),
        (ex("t_width.json", {"frame": "fr3_link0", "targets": [target(width=-1), PLACE]}), "t_width.json"),
        (ex("t_bytes.json", b"\xff\xfe{}"), "t_bytes.json"),
        (ex("t_notjson.json", "{"), "t_notjson.json"),
        (
            ex(
                "t_ok.json",
                {"frame": "fr3_link0", "targets": [target(), PLACE]},
                write(tmp, "plan_bytes.json", b"\xff"),
            ),
            "plan_bytes.json",
        ),
        (
            ex(
                "t_ok2.json",
                {"frame": "fr3_link0", "targets": [target(), PLACE]},
                write(tmp, "plan_odd.json", {"actions": 5}),
            ),
            "plan_odd.json",
        ),
        (["execute", "--plan", plan, "--targets", str(tmp / "nope.json"), "--dry-run"], "nope.json"),
        (
            [
                "execute",
                "--plan",
                plan,
                "--targets",
                write(tmp, "t_ok3.json", {"frame": "f", "targets": []}),
                "--config",
                write(tmp, "bad.yaml", "executor: [1, 2"),
                "--dry-run",
            ],
            "bad.yaml",
        ),
        (
            [
                "execute",
                "--plan",
                plan,
                "--targets",
                str(tmp / "t_ok3.json"),
                "--config",
                str(tmp / "nope.yaml"),
                "--dry-run",
            ],
            "nope.yaml",
        ),
    ]


def other_cases(tmp: Path) -> list[tuple[list[str], str]]:
    rollout = tmp / "rollout_bad"
    rollout.mkdir()
    (rollout / "rollout.json").write_bytes(b"\xff{")
    rollout2 = tmp / "rollout_notjson"
    rollout2.mkdir()
    (rollout2 / "rollout.json").write_text("[1, 2")
    return [
        (["rollouts", "summary", str(rollout)], "rollout_bad"),
        (["rollouts", "summary", str(rollout2)], "rollout_notjson"),
        (["rollouts", "recover", str(tmp / "nothing_here")], "nothing_here"),
        (
            [
                "draw",
                "--plan",
                write(tmp, "draw_plan.json", b"\xff"),
                "--image",
                str(tmp / "no.png"),
                "--out",
                str(tmp / "o.png"),
            ],
            "",
        ),
        (["parse", "--width", "-5", "--height", "480"], ""),
        (["bringup", "--config", write(tmp, "profile.yaml", b"\xff\xfe")], "profile.yaml"),
        (["bringup", "--config", write(tmp, "profile2.yaml", "a: [1")], "profile2.yaml"),
        (["v2gp", "segment", "--gripper", write(tmp, "gripper.csv", b"frame,gripper\n1,\xff\n")], "gripper.csv"),
        (["v2gp", "segment", "--gripper", write(tmp, "gripper2.csv", "frame,gripper\n1,1e999\n")], "gripper2.csv"),
    ]


def test_bad_inputs_end_in_one_line_naming_the_input(tmp_path, capsys):
    cases = bench_cases(tmp_path) + execute_cases(tmp_path) + other_cases(tmp_path)
    assert len(cases) >= 30
    failures = []
    for argv, names in cases:
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors: exit 2 with a usage line
            code = exc.code
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
        problem = None
        if "Traceback" in err:
            problem = "traceback"
        elif code == 0 and names:
            problem = "accepted"
        elif code != 0 and names and names not in err:
            problem = f"does not name {names}"
        elif code != 0 and len([line for line in lines if "error" in line or "grounded-planner" in line]) != 1:
            problem = "not one line"
        if problem:
            failures.append((problem, argv[:2], code, err[-300:]))
    assert not failures, failures


def test_bench_score_warns_about_duplicate_prediction_ids_and_says_which(tmp_path, capsys):
    first = PREDICTIONS.read_text().splitlines()[0]
    dup = write(tmp_path, "dup.jsonl", "\n".join([first, PREDICTIONS.read_text().splitlines()[1], first]))
    assert main(["bench", "score", "--episodes", str(EPISODES), "--predictions", dup]) == 0
    err = capsys.readouterr().err
    assert "prediction id 'ep-01' appears 2 times" in err and "dup.jsonl:1" in err and "dup.jsonl:3" in err


def test_bench_score_scores_a_400_digit_number_as_a_miss_not_a_crash(tmp_path, capsys):
    first = PREDICTIONS.read_text().splitlines()[0]
    huge = write(tmp_path, "huge.jsonl", first.replace("206", "9" * 400))
    assert main(["bench", "score", "--episodes", str(EPISODES), "--predictions", huge, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["overall"]["episodes"] >= 1


def test_distortion_that_cannot_be_inverted_is_refused_in_one_line(tmp_path, capsys):
    out = subprocess.run(
        [sys.executable, "-m", "grounded_planner.geometry.synthetic", "--seed", "21", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    camera = yaml.safe_load((tmp_path / "camera.yaml").read_text())
    camera["distortion_coefficients"] = {"rows": 1, "cols": 5, "data": [1e308, 0.0, 0.0, 0.0, 0.0]}
    camera["distortion_model"] = "plumb_bob"
    (tmp_path / "wild.yaml").write_text(yaml.safe_dump(camera))
    code = main(
        [
            "backproject",
            "--plan",
            str(tmp_path / "plan.json"),
            "--depth",
            str(tmp_path / "depth.png"),
            "--camera-info",
            str(tmp_path / "wild.yaml"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "undistortion does not converge" in err and "1e+308" in err and err.count("\n") == 1


def test_the_console_script_prints_one_line_for_bad_input(tmp_path):
    bad = write(tmp_path, "bytes.jsonl", b"\xff\xfe\n")
    out = subprocess.run(
        [str(EXE), "bench", "score", "--episodes", str(EPISODES), "--predictions", bad],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "bytes.jsonl" in out.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["bench", "score", "--episodes", str(EPISODES), "--predictions", str(PREDICTIONS)],
        ["bench", "score", "--episodes", str(EPISODES), "--predictions", str(PREDICTIONS), "--json"],
    ],
)
def test_a_closed_output_pipe_ends_quietly(argv):
    # `grounded-planner ... | head -0`: the reader is gone before the first write
    proc = subprocess.Popen([str(EXE), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err.decode() and "BrokenPipe" not in err.decode(), err.decode()
    assert proc.returncode in (0, 141)


def test_piped_into_head_for_real(tmp_path):
    out = subprocess.run(
        f"'{EXE}' bench score --episodes '{EPISODES}' --predictions '{PREDICTIONS}' | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip() and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr
