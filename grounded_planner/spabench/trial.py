"""The Spa-Bench trial record (one line of ``trials.jsonl`` / ``cards.jsonl``), its names, and a generated trial.

The record's keys, their order and their null handling are fixed by the Spa-Bench contract shared by the runner,
the operator session, the console and the rollout tools: :meth:`TrialRecord.to_dict` always writes every key, in
:data:`RECORD_KEYS` order, with ``None`` (JSON null) for what is unknown; :meth:`TrialRecord.from_dict` reads the
same, and a missing outcome or timing key reads as null (a card line has none of them).

Pairing (``pair_id``), one rule for every reader:
- ``ood`` seed *s* and ``direct`` seed *s* show the same scene: both carry ``pair_id = "<task>/scene/<s>"``;
- ``paraphrase`` seed *s* rewrites the instruction of ``ood`` seed *s* when *s* is even and of ``direct`` seed *s*
  when *s* is odd (:func:`paraphrase_original`), on that same scene, and carries the same ``pair_id``;
- ``relational_control`` seeds *2k* ("relation already holds", no action expected) and *2k+1* ("needs correction")
  share ``pair_id = "relational_placement/relational_control/<k>"``;
- every other trial: ``pair_id`` is null.

Directions (``left``/``right``/``front``/``behind``) are as seen FROM THE CAMERA, which faces the robot from across
the table: a person standing at the camera says "to the left" for the camera image's left. ``direction_xy`` is the
same direction as a unit vector in the robot base frame (x forward, y left of the robot, metres).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from grounded_planner.rollout.taxonomy import FAILURE_MODES as _TAXONOMY
from grounded_planner.spabench.errors import TrialRecordError

TASKS = (
    "object_state",
    "relative_size",
    "referential_description",
    "relational_placement",
    "ordinal_position",
    "counting",
)
CONDITIONS = ("id", "ood", "direct", "paraphrase", "cross_task_object", "no_intervention", "relational_control")
FAILURE_MODES = tuple(_TAXONOMY)  # no_action ... premature_release, refused, planner_error (null on success)
ROBOTS = ("so101", "gp5", "fr3")
DIRECTIONS = ("left", "right", "front", "behind")
OUTCOME_SOURCES = ("auto", "operator")

# Which conditions a task has (Table II): relative size has no no-intervention diagnostic in the paper; relational
# placement's action gating is the matched relational_control pair, and its no_intervention trials are that pair's
# "relation already holds" half on scenes of their own; relational_control exists for relational placement only;
# the cross-task-object diagnostic covers five tasks (Table IX): object state is left out, since its concepts (a
# state) exist only for the families it already uses.
TASK_CONDITIONS: dict[str, tuple[str, ...]] = {
    task: tuple(
        c
        for c in CONDITIONS
        if not (c == "relational_control" and task != "relational_placement")
        and not (c == "no_intervention" and task == "relative_size")
        and not (c == "cross_task_object" and task == "object_state")
    )
    for task in TASKS
}

# The record's keys in file order (contract); the card keys follow ``initial_positions`` in ``cards.jsonl``.
RECORD_KEYS = (
    "trial_id",
    "task",
    "condition",
    "seed",
    "robot",
    "planner",
    "instruction",
    "expects_action",
    "pair_id",
    "cell",
    "spec",
    "initial_positions",
    "final_positions",
    "grasp_attempted",
    "success",
    "failure_mode",
    "outcome_source",
    "rollout",
    "error",
    "started_at",
    "wall_s",
)
# The keys a card line carries (the record up to and including initial_positions) and the ones only cards have.
CARD_RECORD_KEYS = RECORD_KEYS[: RECORD_KEYS.index("initial_positions") + 1]
CARD_ONLY_KEYS = ("objects", "success_rule", "card_png", "card_html")
# The only keys allowed to differ between two runs of the same trials.
TIMING_KEYS = ("started_at", "wall_s")
SPEC_KEYS = (
    "target",
    "reference",
    "receptacle",
    "receptacle_radius_m",
    "direction",
    "direction_xy",
    "count",
    "distractors",
)
POSITION_DECIMALS = 6  # metres: micrometres, so that equal runs write equal bytes


def check_name(value: Any, allowed: tuple[str, ...], what: str, where: str = "") -> str:
    """``value`` if it is one of ``allowed``; else :class:`TrialRecordError` naming ``what`` and the choices."""
    if not isinstance(value, str) or value not in allowed:
        prefix = f"{where}: " if where else ""
        raise TrialRecordError(f"{prefix}unknown {what} {value!r} (expected one of {', '.join(allowed)})")
    return value


def trial_id(task: str, condition: str, seed: int) -> str:
    """The unique key of a trial in a run (and the resume key): ``"<task>/<condition>/<seed>"``."""
    return f"{task}/{condition}/{int(seed)}"


def parse_trial_id(value: str) -> tuple[str, str, int]:
    """``(task, condition, seed)`` of a trial id; :class:`TrialRecordError` when it is not one."""
    parts = str(value).split("/")
    if len(parts) != 3:
        raise TrialRecordError(f"trial_id {value!r}: expected '<task>/<condition>/<seed>'")
    task = check_name(parts[0], TASKS, "task", f"trial_id {value!r}")
    condition = check_name(parts[1], CONDITIONS, "condition", f"trial_id {value!r}")
    try:
        seed = int(parts[2])
    except ValueError:
        raise TrialRecordError(f"trial_id {value!r}: the seed {parts[2]!r} is not an integer") from None
    return task, condition, seed


def paraphrase_original(seed: int) -> str:
    """The condition whose instruction ``paraphrase`` seed ``seed`` rewrites: ``ood`` (even) or ``direct`` (odd)."""
    return "ood" if int(seed) % 2 == 0 else "direct"


def pair_id(task: str, condition: str, seed: int) -> str | None:
    """The ``pair_id`` of a trial (module docstring): matched trials share one, others have none."""
    if condition in ("ood", "direct", "paraphrase"):
        return f"{task}/scene/{int(seed)}"
    if condition == "relational_control":
        return f"{task}/relational_control/{int(seed) // 2}"
    return None


def direction_xy(
    direction: str, camera_xy: tuple[float, float] = (1.0, 0.0), look_at_xy: tuple[float, float] = (0.0, 0.0)
) -> tuple[float, float]:
    """The unit vector in the base frame's table plane of ``direction`` as seen from a camera at ``camera_xy``
    looking towards ``look_at_xy`` (both base frame, m): ``front`` points from the scene towards the camera,
    ``behind`` away from it, ``left``/``right`` are the camera image's left and right."""
    check_name(direction, DIRECTIONS, "direction")
    vx, vy = look_at_xy[0] - camera_xy[0], look_at_xy[1] - camera_xy[1]  # the camera's viewing direction
    norm = math.hypot(vx, vy)
    if norm < 1e-9:
        raise TrialRecordError("direction_xy: the camera looks straight down; left/right/front/behind are undefined")
    vx, vy = vx / norm, vy / norm
    # image right = viewing direction turned clockwise (seen from above): (vy, -vx); image left = (-vy, vx)
    vectors = {"behind": (vx, vy), "front": (-vx, -vy), "right": (vy, -vx), "left": (-vy, vx)}
    x, y = vectors[direction]
    return (round(x, POSITION_DECIMALS) + 0.0, round(y, POSITION_DECIMALS) + 0.0)


@dataclass(frozen=True)
class MatrixCell:
    """A concept–argument matrix cell (the paper's Fig. 13): e.g. concept ``upside_down``, argument ``white_cup``."""

    concept: str
    argument: str

    def to_dict(self) -> dict[str, str]:
        return {"concept": self.concept, "argument": self.argument}

    @classmethod
    def from_dict(cls, data: Any, where: str = "cell") -> "MatrixCell | None":
        if data is None:
            return None
        if (
            not isinstance(data, Mapping)
            or set(data) != {"concept", "argument"}
            or not all(isinstance(data[k], str) for k in ("concept", "argument"))
        ):
            raise TrialRecordError(f"{where}: expected {{'concept': str, 'argument': str}} or null, got {data!r}")
        return cls(data["concept"], data["argument"])


@dataclass(frozen=True)
class TrialSpec:
    """What the instruction asks for, in object ids (the Table I predicates read only this and the positions).

    ``direction_xy`` is ``direction`` as a unit vector in the base frame (see the module docstring).
    """

    target: str | None = None  # the object to move (null: none, e.g. counting or no valid referent)
    reference: str | None = None  # the object a relation or a direction is taken from
    receptacle: str | None = None  # the bowl
    receptacle_radius_m: float | None = None  # the bowl's rim radius, m
    direction: str | None = None  # left | right | front | behind, as seen from the camera
    direction_xy: tuple[float, float] | None = None  # unit vector (x, y), base frame
    count: int | None = None  # counting: how many objects must be in the bowl at the end
    distractors: tuple[str, ...] = ()  # same-category objects that are not the target

    def __post_init__(self) -> None:
        if self.direction is not None:
            check_name(self.direction, DIRECTIONS, "direction", "spec.direction")
        if (self.direction is None) != (self.direction_xy is None):
            raise TrialRecordError("spec: direction and direction_xy are both set or both null")
        if self.direction_xy is not None and abs(math.hypot(*self.direction_xy) - 1.0) > 1e-3:
            raise TrialRecordError(f"spec.direction_xy: expected a unit vector, got {list(self.direction_xy)}")
        if self.count is not None and (
            isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0
        ):
            raise TrialRecordError(f"spec.count: expected an integer >= 0 or null, got {self.count!r}")
        if self.receptacle_radius_m is not None and not self.receptacle_radius_m > 0:
            raise TrialRecordError(f"spec.receptacle_radius_m: expected > 0 or null, got {self.receptacle_radius_m!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "reference": self.reference,
            "receptacle": self.receptacle,
            "receptacle_radius_m": None
            if self.receptacle_radius_m is None
            else round(float(self.receptacle_radius_m), POSITION_DECIMALS),
            "direction": self.direction,
            "direction_xy": None
            if self.direction_xy is None
            else [round(float(v), POSITION_DECIMALS) for v in self.direction_xy],
            "count": self.count,
            "distractors": list(self.distractors),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "spec") -> "TrialSpec":
        if not isinstance(data, Mapping):
            raise TrialRecordError(f"{where}: expected a mapping with {', '.join(SPEC_KEYS)}, got {data!r}")
        unknown = set(data) - set(SPEC_KEYS)
        if unknown:
            raise TrialRecordError(f"{where}: unknown key(s) {sorted(unknown)} (expected {', '.join(SPEC_KEYS)})")
        for key in ("target", "reference", "receptacle", "direction"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise TrialRecordError(f"{where}.{key}: expected a string or null, got {data[key]!r}")
        radius = data.get("receptacle_radius_m")
        if radius is not None and (isinstance(radius, bool) or not isinstance(radius, (int, float))):
            raise TrialRecordError(f"{where}.receptacle_radius_m: expected a number or null, got {radius!r}")
        vec = data.get("direction_xy")
        if vec is not None and (
            not isinstance(vec, (list, tuple))
            or len(vec) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vec)
        ):
            raise TrialRecordError(f"{where}.direction_xy: expected [x, y] or null, got {vec!r}")
        distractors = data.get("distractors") or []
        if not isinstance(distractors, list) or not all(isinstance(d, str) for d in distractors):
            raise TrialRecordError(f"{where}.distractors: expected a list of object ids, got {distractors!r}")
        try:
            return cls(
                target=data.get("target"),
                reference=data.get("reference"),
                receptacle=data.get("receptacle"),
                receptacle_radius_m=None if radius is None else float(radius),
                direction=data.get("direction"),
                direction_xy=None if vec is None else (float(vec[0]), float(vec[1])),
                count=data.get("count"),
                distractors=tuple(distractors),
            )
        except TrialRecordError as exc:
            raise TrialRecordError(f"{where}: {exc}") from None


Positions = dict[str, tuple[float, float, float]]


def positions_to_dict(positions: Mapping[str, Any] | None) -> dict[str, list[float]] | None:
    """``{id: [x, y, z]}`` rounded to :data:`POSITION_DECIMALS` (None stays None)."""
    if positions is None:
        return None
    return {str(k): [round(float(v), POSITION_DECIMALS) + 0.0 for v in xyz] for k, xyz in positions.items()}


def positions_from_dict(data: Any, where: str) -> Positions | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise TrialRecordError(f"{where}: expected {{object_id: [x, y, z]}} or null, got {type(data).__name__}")
    out: Positions = {}
    for key, xyz in data.items():
        if (
            not isinstance(xyz, (list, tuple))
            or len(xyz) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in xyz)
        ):
            raise TrialRecordError(f"{where}.{key}: expected [x, y, z] in metres, got {xyz!r}")
        out[str(key)] = (float(xyz[0]), float(xyz[1]), float(xyz[2]))
    return out


@dataclass
class TrialRecord:
    """One trial of a run: what was asked (up to ``initial_positions``) and what happened (the outcome fields).

    Outcome fields are null until known: ``final_positions`` may stay null on a real arm, ``success`` is null until
    labelled, ``failure_mode`` is null on success. Only ``started_at`` and ``wall_s`` may differ between two runs.
    """

    task: str
    condition: str
    seed: int
    robot: str
    planner: str  # "gt", "blind", "openai", ... ("" on a card, which no planner has run yet)
    instruction: str
    expects_action: bool  # false for no_intervention and the "relation already holds" half of relational_control
    spec: TrialSpec
    initial_positions: Positions  # object id -> (x, y, z), base frame, m
    pair_id: str | None = None
    cell: MatrixCell | None = None
    final_positions: Positions | None = None
    grasp_attempted: bool | None = None
    success: bool | None = None
    failure_mode: str | None = None
    outcome_source: str | None = None  # "auto" (simulator) | "operator" (confirmed by a person)
    rollout: str | None = None  # the rollout folder, relative to the run folder
    error: str | None = None  # the message of a refused / planner_error trial
    started_at: str | None = None  # ISO 8601 UTC
    wall_s: float | None = None

    def __post_init__(self) -> None:
        check_name(self.task, TASKS, "task")
        check_name(self.condition, CONDITIONS, "condition")
        check_name(self.robot, ROBOTS, "robot")
        if self.failure_mode is not None:
            check_name(self.failure_mode, FAILURE_MODES, "failure_mode")
        if self.outcome_source is not None:
            check_name(self.outcome_source, OUTCOME_SOURCES, "outcome_source")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TrialRecordError(f"seed: expected an integer, got {self.seed!r}")
        if self.success is True and self.failure_mode is not None:
            raise TrialRecordError(
                f"{self.trial_id}: a successful trial has no failure_mode (got {self.failure_mode!r})"
            )

    @property
    def trial_id(self) -> str:
        return trial_id(self.task, self.condition, self.seed)

    def to_dict(self) -> dict[str, Any]:
        """The record as the contract's JSON object: every key of :data:`RECORD_KEYS`, in that order."""
        return {
            "trial_id": self.trial_id,
            "task": self.task,
            "condition": self.condition,
            "seed": self.seed,
            "robot": self.robot,
            "planner": self.planner,
            "instruction": self.instruction,
            "expects_action": self.expects_action,
            "pair_id": self.pair_id,
            "cell": None if self.cell is None else self.cell.to_dict(),
            "spec": self.spec.to_dict(),
            "initial_positions": positions_to_dict(self.initial_positions),
            "final_positions": positions_to_dict(self.final_positions),
            "grasp_attempted": self.grasp_attempted,
            "success": self.success,
            "failure_mode": self.failure_mode,
            "outcome_source": self.outcome_source,
            "rollout": self.rollout,
            "error": self.error,
            "started_at": self.started_at,
            "wall_s": None if self.wall_s is None else round(float(self.wall_s), 3),
        }

    def card_dict(self) -> dict[str, Any]:
        """The record's part a ``cards.jsonl`` line starts with (up to and including ``initial_positions``)."""
        full = self.to_dict()
        return {key: full[key] for key in CARD_RECORD_KEYS}

    @classmethod
    def from_dict(cls, data: Any, where: str = "trial") -> "TrialRecord":
        """Read a ``trials.jsonl`` or ``cards.jsonl`` line (card-only keys are ignored; absent outcome and timing
        keys read as null). Raises :class:`TrialRecordError` naming ``where`` and the field."""
        if not isinstance(data, Mapping):
            raise TrialRecordError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = set(data) - set(RECORD_KEYS) - set(CARD_ONLY_KEYS)
        if unknown:
            raise TrialRecordError(f"{where}: unknown key(s) {sorted(unknown)}")
        for key in CARD_RECORD_KEYS:
            if key not in data:
                raise TrialRecordError(f"{where}: missing required key {key!r}")
        tid = data["trial_id"]
        where = f"{where} ({tid})" if isinstance(tid, str) else where

        def typed(key: str, types: tuple[type, ...], nullable: bool = True) -> Any:
            value = data.get(key)
            if value is None and nullable:
                return None
            if isinstance(value, bool) and bool not in types or not isinstance(value, types):
                names = " or ".join(t.__name__ for t in types) + (" or null" if nullable else "")
                raise TrialRecordError(f"{where}.{key}: expected {names}, got {value!r}")
            return value

        try:
            record = cls(
                task=typed("task", (str,), False),
                condition=typed("condition", (str,), False),
                seed=typed("seed", (int,), False),
                robot=typed("robot", (str,), False),
                planner=typed("planner", (str,), False),
                instruction=typed("instruction", (str,), False),
                expects_action=typed("expects_action", (bool,), False),
                spec=TrialSpec.from_dict(data["spec"], f"{where}.spec"),
                initial_positions=positions_from_dict(data["initial_positions"], f"{where}.initial_positions") or {},
                pair_id=typed("pair_id", (str,)),
                cell=MatrixCell.from_dict(data.get("cell"), f"{where}.cell"),
                final_positions=positions_from_dict(data.get("final_positions"), f"{where}.final_positions"),
                grasp_attempted=typed("grasp_attempted", (bool,)),
                success=typed("success", (bool,)),
                failure_mode=typed("failure_mode", (str,)),
                outcome_source=typed("outcome_source", (str,)),
                rollout=typed("rollout", (str,)),
                error=typed("error", (str,)),
                started_at=typed("started_at", (str,)),
                wall_s=typed("wall_s", (int, float)),
            )
        except TrialRecordError as exc:
            if str(exc).startswith(where):
                raise
            raise TrialRecordError(f"{where}: {exc}") from None
        if record.trial_id != tid:
            raise TrialRecordError(
                f"{where}.trial_id: {tid!r} does not match task/condition/seed ({record.trial_id!r})"
            )
        return record


@dataclass(frozen=True)
class TrialObject:
    """One object of a generated scene as a card lists it (``cards.jsonl``'s ``objects``)."""

    id: str
    family: str  # morphological family of the inventory ("cup", "block", "bowl", ...)
    name: str  # the noun phrase an instruction uses ("white cup")
    colour: str
    size_m: tuple[float, ...]  # the simulator's size of its kind (box: x, y, z; round: radius, height)
    state: str | None  # "upright" / "upside_down", "open" / "closed", or null
    position_m: tuple[float, float, float]  # its centre (the middle of its bounding box), base frame, m
    yaw_deg: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "name": self.name,
            "colour": self.colour,
            "size_m": [round(float(v), POSITION_DECIMALS) for v in self.size_m],
            "state": self.state,
            "position_m": [round(float(v), POSITION_DECIMALS) + 0.0 for v in self.position_m],
            "yaw_deg": round(float(self.yaw_deg), 3),
        }


@dataclass
class Trial:
    """A generated trial (:func:`grounded_planner.spabench.generate_trial`): a simulator scenario and what it asks.

    ``scenario`` is a ``grounded_planner.sim.scenario.Scenario`` the simulator loads as it is (``SimWorkcell(
    trial.scenario)``); its ``plan`` is the oracle's plan and its ``instruction`` is ``instruction``.
    """

    task: str
    condition: str
    seed: int
    robot: str
    instruction: str
    spec: TrialSpec
    expects_action: bool
    scenario: Any
    objects: list[TrialObject] = field(default_factory=list)
    pair_id: str | None = None
    cell: MatrixCell | None = None
    success_rule: str = ""  # one line: what counts as success (cards, reports)
    variant: str = ""  # which staging of the condition ("goal_holds", "no_referent", "needs_correction", ...)

    @property
    def trial_id(self) -> str:
        return trial_id(self.task, self.condition, self.seed)

    @property
    def initial_positions(self) -> Positions:
        """Object id -> (x, y, z) of its centre (bounding-box middle) as generated, base frame, m; the runner
        measures the same point in the simulator (:func:`grounded_planner.spabench.predicates.object_positions`)."""
        return {o.id: tuple(o.position_m) for o in self.objects}  # type: ignore[misc]

    def record(self, planner: str = "") -> TrialRecord:
        """The trial's record with its outcome fields null (the runner fills them in)."""
        return TrialRecord(
            task=self.task,
            condition=self.condition,
            seed=self.seed,
            robot=self.robot,
            planner=planner,
            instruction=self.instruction,
            expects_action=self.expects_action,
            spec=self.spec,
            initial_positions=self.initial_positions,
            pair_id=self.pair_id,
            cell=self.cell,
        )
