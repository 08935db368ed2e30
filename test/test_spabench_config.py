"""config/spabench/: the shipped inventory and matrices load and agree; bad files fail with one line naming the file
and the field (a cell both observed and withheld, an inventory lacking a family a task needs, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grounded_planner.spabench.config import (
    CONFIG_DIR,
    TASK_FAMILIES,
    check_inventory_for,
    load_inventory,
    load_matrices,
)
from grounded_planner.spabench.errors import ConfigError
from grounded_planner.spabench.trial import TASKS


def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _shipped(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def test_shipped_files_load_and_cover_every_task():
    inventory = load_inventory()
    check_inventory_for(inventory)
    matrices = load_matrices(inventory=inventory)
    assert set(matrices.tasks) == set(TASKS)
    for task, matrix in matrices.tasks.items():
        assert matrix.observed and matrix.withheld, task
        assert not set(matrix.observed) & set(matrix.withheld), task
    # the paper's object-state example: upside-down white cup withheld, the concept seen with another cup
    state = matrices.tasks["object_state"]
    assert ("upside_down", "white_cup") in state.withheld
    assert any(c == "upside_down" for c, _ in state.observed)
    # the middle of three is absent from the ordinal matrix (Fig. 13)
    ordinal = matrices.tasks["ordinal_position"]
    assert ("second", "from_left_3") not in ordinal.observed + ordinal.withheld


def test_a_cell_both_observed_and_withheld(tmp_path):
    data = _shipped("matrix.yaml")
    data["counting"]["withheld"].append(list(data["counting"]["observed"][0]))
    path = _write(tmp_path, "matrix.yaml", data)
    with pytest.raises(ConfigError) as err:
        load_matrices(path)
    message = str(err.value)
    assert str(path) in message and "counting" in message and "both observed and withheld" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda d: d["relational_placement"]["concepts"].append("above"),
            "relational_placement.concepts: unknown concept 'above'",
        ),
        (
            lambda d: d["object_state"]["observed"].append(["open", "white_cup"]),
            "object_state.observed[7]: a cup (white_cup) cannot be open",
        ),
        (
            lambda d: d["ordinal_position"]["observed"].append(["fourth", "from_left_3"]),
            "no fourth object in a row of 3",
        ),
        (lambda d: d["counting"]["arguments"].append("spoon"), "counting.arguments: 'spoon' is not a family"),
        (lambda d: d.pop("counting"), "counting: missing"),
        (lambda d: d["counting"].update(withheld=[]), "counting.withheld: at least one cell"),
    ],
)
def test_bad_matrices_are_named(tmp_path, change, expected):
    data = _shipped("matrix.yaml")
    change(data)
    path = _write(tmp_path, "matrix.yaml", data)
    with pytest.raises(ConfigError, match=None) as err:
        load_matrices(path)
    assert expected in str(err.value) and str(path) in str(err.value)


def test_an_inventory_lacking_a_family_a_task_needs(tmp_path):
    data = _shipped("inventory.yaml")
    del data["families"]["cup"]
    data["instances"] = [i for i in data["instances"] if i["family"] != "cup"]
    path = _write(tmp_path, "inventory.yaml", data)
    inventory = load_inventory(path)  # a valid file on its own ...
    with pytest.raises(ConfigError) as err:  # ... that cannot stage object_state
        check_inventory_for(inventory)
    assert str(path) in str(err.value) and "object_state needs the family 'cup'" in str(err.value)
    assert "cup" in TASK_FAMILIES["object_state"]


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["instances"][0].update(colour="mauve"), "instances[0] (red_block).colour: unknown colour 'mauve'"),
        (
            lambda d: d["instances"][0].update(size_m=[0.04, 0.04]),
            "instances[0] (red_block).size_m: expected 3 positive",
        ),
        (lambda d: d["instances"][0].update(family="spoon"), "family: unknown family 'spoon'"),
        (
            lambda d: d["families"]["cup"].update(states=["upright", "open"]),
            "families.cup.states: a cup cannot be open",
        ),
        (lambda d: d["instances"].append(dict(d["instances"][0])), "duplicate id 'red_block'"),
        (lambda d: d["instances"][1].update(colour="red"), "share the name 'red block'"),
    ],
)
def test_bad_inventories_are_named(tmp_path, change, expected):
    data = _shipped("inventory.yaml")
    change(data)
    path = _write(tmp_path, "inventory.yaml", data)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    assert expected in str(err.value) and str(path) in str(err.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_inventory(tmp_path / "nope.yaml")
    bad = tmp_path / "matrix.yaml"
    bad.write_text("counting: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_matrices(bad)
