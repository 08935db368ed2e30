"""Spa-Bench's two config files: the object inventory and the concept–argument matrices, read and cross-checked.

Every error is one :class:`~grounded_planner.spabench.errors.ConfigError` line naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grounded_planner.sim.scenario import NAMED_COLORS, OBJECT_KINDS, OBJECT_STATES
from grounded_planner.spabench.errors import ConfigError
from grounded_planner.spabench.trial import DIRECTIONS, TASKS

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config" / "spabench"
SIZE_LABELS = ("small", "medium", "large")
_SIZE_LEN = {"box": 3, "cylinder": 2, "cup": 2, "bowl": 2, "plate": 2}

# The concepts a task's templates know (a matrix may use a subset).
TASK_CONCEPTS: dict[str, tuple[str, ...]] = {
    "object_state": tuple(s for states in OBJECT_STATES.values() for s in states),
    "relative_size": ("smallest", "largest"),
    "referential_description": ("closest_to", "furthest_from"),
    "relational_placement": DIRECTIONS,
    "ordinal_position": ("first", "second", "third", "fourth"),
    "counting": ("one", "two", "three"),
}
ORDINAL_ARGUMENTS = ("from_left_3", "from_right_3", "from_left_4", "from_right_4")
# The families each task needs in the inventory (besides the bowl): what its scenes are built from.
TASK_FAMILIES: dict[str, tuple[str, ...]] = {
    "object_state": ("cup", "box"),
    "relative_size": ("block", "cylinder"),
    "referential_description": ("block",),
    "relational_placement": ("block",),
    "ordinal_position": ("block",),
    "counting": ("block",),
}
RECEPTACLE_FAMILY = "bowl"


@dataclass(frozen=True)
class Family:
    """A morphological family: the simulator kind that models it and the states its instances take."""

    name: str
    kind: str  # a simulator object kind (grounded_planner.sim.scenario.OBJECT_KINDS)
    noun: str  # what instructions call one ("can" for a cylinder)
    states: tuple[str, ...] = ()  # the first is the default
    receptacle: bool = False


@dataclass(frozen=True)
class Instance:
    """One physical object of the inventory."""

    id: str
    family: str
    colour: str  # a simulator colour name
    size: str  # small | medium | large
    size_m: tuple[float, ...]  # the simulator's size of its kind at the Franka scale, m
    size_m_so101: tuple[float, ...] | None = None  # its size in SO-101 scenes (None: size_m scaled)


@dataclass
class Inventory:
    families: dict[str, Family]
    instances: dict[str, Instance]
    source: str = ""

    def of_family(self, family: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.family == family]

    def noun(self, instance_id: str) -> str:
        return self.families[self.instances[instance_id].family].noun

    def name(self, instance_id: str) -> str:
        """The plain noun phrase naming an instance: "<colour> <noun>"."""
        inst = self.instances[instance_id]
        return f"{inst.colour} {self.families[inst.family].noun}"


@dataclass
class TaskMatrix:
    """One task's concept–argument matrix (Fig. 13)."""

    task: str
    concepts: tuple[str, ...]
    arguments: tuple[str, ...]
    observed: tuple[tuple[str, str], ...]
    withheld: tuple[tuple[str, str], ...]
    cross_task: tuple[str, ...] = ()  # families the cross_task_object condition uses

    def cells(self, condition: str) -> tuple[tuple[str, str], ...]:
        """``id`` -> observed cells, ``ood`` -> withheld cells."""
        return self.observed if condition == "id" else self.withheld


@dataclass
class Matrices:
    tasks: dict[str, TaskMatrix] = field(default_factory=dict)
    source: str = ""


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of names, got {value!r}")
    return tuple(value)


def _sizes(value: Any, n: int, where: str) -> tuple[float, ...]:
    if (
        not isinstance(value, list)
        or len(value) != n
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise ConfigError(f"{where}: expected {n} positive numbers (metres), got {value!r}")
    return tuple(float(v) for v in value)


def load_inventory(path: str | Path | None = None) -> Inventory:
    """Read ``config/spabench/inventory.yaml`` (or ``path``) and check it; :class:`ConfigError` on bad input."""
    path = Path(path) if path is not None else CONFIG_DIR / "inventory.yaml"
    data = _read_yaml(path)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("families"), dict)
        or not isinstance(data.get("instances"), list)
    ):
        raise ConfigError(f"{path}: expected a mapping with 'families' (a mapping) and 'instances' (a list)")
    families: dict[str, Family] = {}
    for name, raw in data["families"].items():
        where = f"{path}: families.{name}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping (kind, states, noun, receptacle), got {raw!r}")
        unknown = set(raw) - {"kind", "states", "noun", "receptacle"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} (expected kind, states, noun, receptacle)")
        kind = raw.get("kind")
        if kind not in OBJECT_KINDS or kind == "cabinet":
            raise ConfigError(
                f"{where}.kind: expected one of {', '.join(k for k in OBJECT_KINDS if k != 'cabinet')}, got {kind!r}"
            )
        states = _str_list(raw.get("states", []), f"{where}.states")
        bad = [s for s in states if s not in OBJECT_STATES.get(kind, ())]
        if bad:
            raise ConfigError(
                f"{where}.states: a {kind} cannot be {', '.join(bad)} "
                f"(the simulator's {kind} states: {', '.join(OBJECT_STATES.get(kind, ())) or 'none'})"
            )
        families[str(name)] = Family(
            str(name), kind, str(raw.get("noun") or name), states, bool(raw.get("receptacle", False))
        )
    instances: dict[str, Instance] = {}
    for i, raw in enumerate(data["instances"]):
        where = f"{path}: instances[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping, got {raw!r}")
        for key in ("id", "family", "colour", "size", "size_m"):
            if key not in raw:
                raise ConfigError(f"{where}: missing field {key!r}")
        unknown = set(raw) - {"id", "family", "colour", "size", "size_m", "size_m_so101"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
        iid = str(raw["id"])
        where = f"{path}: instances[{i}] ({iid})"
        if iid in instances:
            raise ConfigError(f"{where}.id: duplicate id {iid!r}")
        if raw["family"] not in families:
            raise ConfigError(f"{where}.family: unknown family {raw['family']!r} (have {', '.join(families)})")
        if raw["colour"] not in NAMED_COLORS:
            raise ConfigError(
                f"{where}.colour: unknown colour {raw['colour']!r} (expected one of {', '.join(NAMED_COLORS)})"
            )
        if raw["size"] not in SIZE_LABELS:
            raise ConfigError(f"{where}.size: expected one of {', '.join(SIZE_LABELS)}, got {raw['size']!r}")
        n = _SIZE_LEN[families[raw["family"]].kind]
        so101 = raw.get("size_m_so101")
        instances[iid] = Instance(
            iid,
            str(raw["family"]),
            str(raw["colour"]),
            str(raw["size"]),
            _sizes(raw["size_m"], n, f"{where}.size_m"),
            None if so101 is None else _sizes(so101, n, f"{where}.size_m_so101"),
        )
    inventory = Inventory(families, instances, str(path))
    names = [inventory.name(i) for i in instances]
    twins = sorted({n for n in names if names.count(n) > 1})
    if twins:
        raise ConfigError(
            f"{path}: instances: two instances share the name {twins[0]!r} (colour + noun must "
            f"name one object, or a direct instruction is ambiguous)"
        )
    return inventory


def check_inventory_for(inventory: Inventory, tasks=TASKS) -> None:
    """:class:`ConfigError` when the inventory lacks a family (or enough instances) a task needs."""
    where = inventory.source or "inventory"
    receptacles = [f for f in inventory.families.values() if f.receptacle]
    if not receptacles or not inventory.of_family(receptacles[0].name):
        raise ConfigError(f"{where}: families: no receptacle family with an instance (every task needs the bowl)")
    for task in tasks:
        for family in TASK_FAMILIES[task]:
            if family not in inventory.families:
                raise ConfigError(f"{where}: families: task {task} needs the family {family!r}, which is missing")
            if len(inventory.of_family(family)) < 2:
                raise ConfigError(
                    f"{where}: instances: task {task} needs at least two instances of family "
                    f"{family!r}, found {len(inventory.of_family(family))}"
                )


def load_matrices(path: str | Path | None = None, inventory: Inventory | None = None) -> Matrices:
    """Read ``config/spabench/matrix.yaml`` (or ``path``) and check every cell against the task's concepts and the
    inventory; :class:`ConfigError` names the file and field (e.g. a cell both observed and withheld)."""
    path = Path(path) if path is not None else CONFIG_DIR / "matrix.yaml"
    inventory = inventory or load_inventory()
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of task -> matrix")
    unknown = set(data) - set(TASKS)
    if unknown:
        raise ConfigError(f"{path}: unknown task(s) {sorted(unknown)} (expected {', '.join(TASKS)})")
    out = Matrices(source=str(path))
    for task in TASKS:
        where = f"{path}: {task}"
        raw = data.get(task)
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: missing (every task needs a matrix)")
        unknown = set(raw) - {"concepts", "arguments", "observed", "withheld", "cross_task"}
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
        concepts = _str_list(raw.get("concepts"), f"{where}.concepts")
        arguments = _str_list(raw.get("arguments"), f"{where}.arguments")
        for c in concepts:
            if c not in TASK_CONCEPTS[task]:
                raise ConfigError(
                    f"{where}.concepts: unknown concept {c!r} for {task} (expected some of "
                    f"{', '.join(TASK_CONCEPTS[task])})"
                )
        for a in arguments:
            _check_argument(task, a, inventory, f"{where}.arguments")
        cells: dict[str, tuple[tuple[str, str], ...]] = {}
        for kind in ("observed", "withheld"):
            items = raw.get(kind) or []
            if not isinstance(items, list):
                raise ConfigError(f"{where}.{kind}: expected a list of [concept, argument]")
            checked = []
            for j, cell in enumerate(items):
                if not (isinstance(cell, list) and len(cell) == 2 and all(isinstance(v, str) for v in cell)):
                    raise ConfigError(f"{where}.{kind}[{j}]: expected [concept, argument], got {cell!r}")
                if cell[0] not in concepts:
                    raise ConfigError(f"{where}.{kind}[{j}]: concept {cell[0]!r} is not in concepts")
                if cell[1] not in arguments:
                    raise ConfigError(f"{where}.{kind}[{j}]: argument {cell[1]!r} is not in arguments")
                _check_cell(task, cell[0], cell[1], inventory, f"{where}.{kind}[{j}]")
                checked.append((cell[0], cell[1]))
            cells[kind] = tuple(checked)
        both = sorted(set(cells["observed"]) & set(cells["withheld"]))
        if both:
            raise ConfigError(f"{where}: cell [{both[0][0]}, {both[0][1]}] is both observed and withheld")
        for kind in ("observed", "withheld"):
            if not cells[kind]:
                raise ConfigError(
                    f"{where}.{kind}: at least one cell is needed (the {'id' if kind == 'observed' else 'ood'}"
                    f" condition draws from it)"
                )
        cross = _str_list(raw.get("cross_task") or [], f"{where}.cross_task")
        for fam in cross:
            if fam not in inventory.families:
                raise ConfigError(f"{where}.cross_task: unknown family {fam!r} (have {', '.join(inventory.families)})")
        out.tasks[task] = TaskMatrix(task, concepts, arguments, cells["observed"], cells["withheld"], cross)
    return out


def _check_argument(task: str, argument: str, inventory: Inventory, where: str) -> None:
    if task in ("object_state", "referential_description", "relational_placement"):
        if argument not in inventory.instances:
            raise ConfigError(f"{where}: {argument!r} is not an instance of the inventory ({inventory.source})")
    elif task in ("relative_size", "counting"):
        if argument not in inventory.families:
            raise ConfigError(f"{where}: {argument!r} is not a family of the inventory ({inventory.source})")
        if task == "relative_size" and len({i.size for i in inventory.of_family(argument)}) < 3:
            raise ConfigError(
                f"{where}: relative size needs small, medium and large {argument} instances in the "
                f"inventory ({inventory.source})"
            )
    elif argument not in ORDINAL_ARGUMENTS:
        raise ConfigError(f"{where}: unknown ordinal argument {argument!r} (expected {', '.join(ORDINAL_ARGUMENTS)})")


def _check_cell(task: str, concept: str, argument: str, inventory: Inventory, where: str) -> None:
    if task == "object_state":
        family = inventory.families[inventory.instances[argument].family]
        if concept not in family.states:
            raise ConfigError(
                f"{where}: a {family.name} ({argument}) cannot be {concept} "
                f"(its states: {', '.join(family.states) or 'none'})"
            )
    if task == "ordinal_position":
        ordinal = TASK_CONCEPTS[task].index(concept) + 1
        if ordinal > int(argument.rsplit("_", 1)[1]):
            raise ConfigError(f"{where}: there is no {concept} object in a row of {argument.rsplit('_', 1)[1]}")
