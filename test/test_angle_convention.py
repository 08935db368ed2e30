"""One angle-wrapping convention (grounded_planner.geometry.transforms): a heading in (-pi, pi], a parallel
gripper's yaw folded into (-pi/2, pi/2]; the simulator's IK, its gripper turns and its ground-truth targets use
these two functions instead of copies with other edge conventions."""

import math
import pathlib
import re

import pytest

from grounded_planner.geometry.transforms import fold_half_turn, wrap_pi

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "angle, expected",
    [
        (math.pi, math.pi),
        (-math.pi, math.pi),
        (3 * math.pi, math.pi),
        (0.25, 0.25),
        (-0.25, -0.25),
        (2 * math.pi + 0.25, 0.25),
    ],
)
def test_wrap_pi_gives_the_half_open_interval_minus_pi_excluded(angle, expected):
    assert wrap_pi(angle) == pytest.approx(expected)


@pytest.mark.parametrize(
    "yaw, expected",
    [(math.pi / 2, math.pi / 2), (-math.pi / 2, math.pi / 2), (math.pi, 0.0), (0.3 + math.pi, 0.3), (-0.3, -0.3)],
)
def test_fold_half_turn_gives_minus_half_pi_excluded(yaw, expected):
    assert fold_half_turn(yaw) == pytest.approx(expected, abs=1e-12)


def test_no_module_writes_its_own_wrapping():
    """An inline `% (2 * math.pi)` or `% math.pi` next to a shift by pi is a copy of one of the two functions."""
    copies = []
    for path in sorted((REPO / "grounded_planner").rglob("*.py")):
        if path.name == "transforms.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"%\s*\(?\s*(2\s*\*\s*)?(math|np)\.pi", line):
                copies.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not copies, "wrap angles with geometry.transforms.wrap_pi / fold_half_turn:\n" + "\n".join(copies)
