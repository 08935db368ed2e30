"""The `grounded-planner` console script is installed and answers --help/--version."""

import subprocess
import sys
from pathlib import Path

import grounded_planner


def test_console_script_prints_version():
    exe = Path(sys.executable).with_name("grounded-planner")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert grounded_planner.__version__ in out.stdout


def test_no_command_prints_help_and_fails():
    out = subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "usage: grounded-planner" in out.stdout


def test_python_m_gives_the_console_scripts_one_line_error():
    """`python -m grounded_planner.cli.main` (main.py run as __main__) handles bad input as the console script does:
    the command's CliError is caught: the same one line and exit 2 (it was caught as an unknown error: exit 1)."""
    outs = [
        subprocess.run([*launcher, "approve", "--timeout", "-1"], capture_output=True, text=True, timeout=60)
        for launcher in (
            [str(Path(sys.executable).with_name("grounded-planner"))],
            [sys.executable, "-m", "grounded_planner.cli.main"],
        )
    ]
    for out in outs:
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == "grounded-planner approve: --timeout must be > 0 seconds, got -1.0"


def _modules_loaded_by(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after `grounded-planner ARGV` (argparse exits for --help)."""
    code = (
        "import sys\nfrom grounded_planner.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
        "    pass\nsys.stderr.write('\\n'.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    return set(out.stderr.splitlines())


def test_help_lists_every_command_without_importing_them():
    loaded = _modules_loaded_by(["--help"])
    commands = sorted(m for m in loaded if m.startswith("grounded_planner.cli.") and m != "grounded_planner.cli.main")
    assert commands == [], f"`grounded-planner --help` imported command modules: {commands}"
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("numpy", "PIL", "yaml", "torch", "mujoco", "rclpy", "ray"))
    assert heavy == [], f"`grounded-planner --help` imported {heavy}"


def test_a_command_loads_its_own_module_only():
    loaded = _modules_loaded_by(["rollouts", "--help"])
    assert "grounded_planner.cli.rollouts" in loaded
    others = sorted(
        m
        for m in loaded
        if m.split(".")[:2] == ["grounded_planner", "cli"]
        and m not in ("grounded_planner.cli", "grounded_planner.cli.main", "grounded_planner.cli.rollouts")
    )
    assert others == [], f"`grounded-planner rollouts --help` imported {others}"
    assert not {"grounded_planner.sim", "grounded_planner.v2gp", "grounded_planner.bench"} & loaded


def test_command_table_matches_what_the_modules_register():
    from grounded_planner.cli.main import COMMANDS, build_parser

    full = build_parser()  # every command module imported
    listing = build_parser([])  # the help lines of the table only
    actions = (
        [a for a in full._actions if a.dest == "command"][0],
        [a for a in listing._actions if a.dest == "command"][0],
    )
    assert list(actions[0].choices) == list(COMMANDS) == list(actions[1].choices)
    for full_help, table_help in zip(*(a._choices_actions for a in actions)):
        assert (full_help.dest, full_help.help) == (table_help.dest, table_help.help)
    assert all(callable(parser.get_default("func")) for parser in actions[0].choices.values())


def _run_raising(monkeypatch, capsys, exc: BaseException) -> tuple[int, str]:
    """main() running a command whose handler raises ``exc``: (exit code, stderr)."""
    import argparse

    from grounded_planner.cli import main as cli_main

    def build(commands=None):
        parser = argparse.ArgumentParser(prog="grounded-planner")
        parser.add_argument("-v", "--verbose", action="store_true")
        sub = parser.add_subparsers(dest="command")

        def handler(args):
            raise exc

        sub.add_parser("plan").set_defaults(func=handler)
        return parser

    monkeypatch.setattr(cli_main, "build_parser", build)
    code = cli_main.main(["plan"])
    return code, capsys.readouterr().err


def test_exit_codes_follow_the_error_classes(monkeypatch, capsys):
    """Bad input (InputError and its subclasses) exits 2, a run-time failure of ours exits 1, both in one line
    without a traceback; a ValueError that is not ours is no longer taken for bad input (it is a bug)."""
    from grounded_planner.errors import InputError, RunFailure
    from grounded_planner.plan import PlanError

    code, err = _run_raising(monkeypatch, capsys, PlanError("a grasp needs a bbox", index=0, rule="bbox_required"))
    assert (code, err) == (2, "grounded-planner plan: error: action 0: a grasp needs a bbox [rule: bbox_required]\n")
    code, err = _run_raising(monkeypatch, capsys, InputError("--fps must be > 0"))
    assert code == 2 and "--fps must be > 0" in err
    code, err = _run_raising(monkeypatch, capsys, RunFailure("camera stopped publishing"))
    assert (code, err) == (1, "grounded-planner plan: error: camera stopped publishing\n")
    code, err = _run_raising(monkeypatch, capsys, ValueError("operands could not be broadcast together"))
    assert code == 1 and "unexpected ValueError" in err and "a bug worth reporting" in err


def test_a_bug_saves_its_traceback_to_the_file_the_message_names(monkeypatch, capsys):
    def broken():
        return 1 / 0

    try:
        broken()
    except ZeroDivisionError as exc:
        raised = exc
    code, err = _run_raising(monkeypatch, capsys, raised)
    assert code == 1
    assert "unexpected ZeroDivisionError: division by zero" in err and "Traceback" not in err
    path = Path(err.split("its traceback is in ")[1].split(")")[0])
    try:
        saved = path.read_text()
        assert "Traceback (most recent call last)" in saved and "in broken" in saved and "ZeroDivisionError" in saved
    finally:
        path.unlink()


def test_a_missing_optional_package_says_what_to_install(monkeypatch, capsys):
    """A bare ModuleNotFoundError of an optional package names its pip package and setup.py extra (it was shown as
    'unexpected ModuleNotFoundError ... a bug worth reporting')."""
    code, err = _run_raising(monkeypatch, capsys, ModuleNotFoundError("No module named 'mujoco'", name="mujoco"))
    assert code == 1
    assert "the Python package 'mujoco' is not installed" in err and "pip install mujoco" in err
    assert "'.[sim]'" in err and "bug" not in err
