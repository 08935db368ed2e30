"""A broken YAML file is reported on one line naming file:line:column, wherever the project reads one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from grounded_planner.yamlfile import read_yaml

BROKEN = {
    # text, (line, column) of the problem, words of the problem
    "unclosed_list": ("planner:\n  ros__parameters: {backend: [openai\n", (3, 1), "expected ',' or ']'"),
    "bad_indent": (
        "executor:\n  ros__parameters:\n    dry_run: true\n   base_frame: x\n",
        (4, 4),
        "expected <block end>",
    ),
    "tab": ("camera:\n\tros__parameters: {}\n", (2, 1), "found character '\\t'"),
}


class _Refused(ValueError):
    pass


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_read_yaml_names_file_line_and_column_on_one_line(tmp_path, name):
    text, (line, column), words = BROKEN[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(_Refused) as info:
        read_yaml(path, "profile", _Refused)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}:{column}: profile is not valid YAML: "), message
    assert words in message, message


def test_bringup_with_a_broken_config_prints_one_line(tmp_path):
    path = tmp_path / "real.yaml"
    path.write_text(BROKEN["unclosed_list"][0])
    done = subprocess.run(
        [sys.executable, "-m", "grounded_planner.cli.main", "bringup", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert f"{path}:3:1:" in lines[0] and "not valid YAML" in lines[0], lines[0]
