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
    out = subprocess.run([sys.executable, "-m", "grounded_planner.cli.main"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "usage: grounded-planner" in out.stdout


def test_python_m_gives_the_console_scripts_one_line_error():
    """`python -m grounded_planner.cli.main` (main.py run as __main__) handles bad input as the console script does:
    the command's CliError is caught: the same one line and exit 2 (it was caught as an unknown error: exit 1)."""
    outs = [subprocess.run([*launcher, "approve", "--timeout", "-1"], capture_output=True, text=True, timeout=60)
            for launcher in ([str(Path(sys.executable).with_name("grounded-planner"))],
                             [sys.executable, "-m", "grounded_planner.cli.main"])]
    for out in outs:
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == "grounded-planner approve: --timeout must be > 0 seconds, got -1.0"


def _modules_loaded_by(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after `grounded-planner ARGV` (argparse exits for --help)."""
    code = ("import sys\nfrom grounded_planner.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nsys.stderr.write('\\n'.join(sys.modules))")
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
    others = sorted(m for m in loaded if m.split(".")[:2] == ["grounded_planner", "cli"]
                    and m not in ("grounded_planner.cli", "grounded_planner.cli.main", "grounded_planner.cli.rollouts"))
    assert others == [], f"`grounded-planner rollouts --help` imported {others}"
    assert not {"grounded_planner.sim", "grounded_planner.v2gp", "grounded_planner.bench"} & loaded


def test_command_table_matches_what_the_modules_register():
    from grounded_planner.cli.main import COMMANDS, build_parser

    full = build_parser()  # every command module imported
    listing = build_parser([])  # the help lines of the table only
    actions = [a for a in full._actions if a.dest == "command"][0], [a for a in listing._actions if a.dest == "command"][0]
    assert list(actions[0].choices) == list(COMMANDS) == list(actions[1].choices)
    for full_help, table_help in zip(*(a._choices_actions for a in actions)):
        assert (full_help.dest, full_help.help) == (table_help.dest, table_help.help)
    assert all(callable(parser.get_default("func")) for parser in actions[0].choices.values())
