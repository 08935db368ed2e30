"""Scenario files for the simulated workcell: YAML -> checked dataclasses, seeded randomisation of poses/colours.

Plain Python (no MuJoCo): the scene builder, the success predicates and the episode export read these.
Coordinates are in the robot base frame (x forward, y left, z up, metres); the table top is z = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
import re
from typing import Any

import numpy as np
import yaml

from grounded_planner.errors import InputError
from grounded_planner.plan.model import pairing_error


class ScenarioError(InputError):
    """A scenario file (or dict) that breaks the format; the message names the file, the field and what was expected."""


OBJECT_KINDS = ("box", "cylinder", "cup", "bowl", "plate", "cabinet")
# Kinds the top-down gripper can hold (the others are targets or fixtures).
GRASPABLE_KINDS = ("box", "cylinder", "cup")
# Containers and supports: a place target's region; ``beside``: on the table next to a reference, in a direction.
PREDICATE_TYPES = ("inside", "on", "drawer_open", "drawer_closed", "beside")
# Object states a kind can be in (the first is the default): a cup upright or upside down, a box solid and closed
# or open (an empty tray without a lid).
OBJECT_STATES: dict[str, tuple[str, ...]] = {"cup": ("upright", "upside_down"), "box": ("closed", "open")}
# Containers another object can start inside (``inside``), and the thickness of their floor.
CONTAINER_FLOOR_M = {"bowl": 0.006, "cup": 0.005}
# Perturbations a scenario can ask for (see PerturbationSpec); they measure closed- against open-loop execution.
PERTURBATION_TYPES = ("slip", "moved", "grasp_offset", "distractor")
# Arm models: gp5 is defined in scene.py (always available); fr3 is the Franka FR3 MJCF shipped by franky-sim.
ROBOTS = ("gp5", "fr3", "so101")

NAMED_COLORS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.12, 0.10),
    "green": (0.15, 0.65, 0.20),
    "blue": (0.12, 0.30, 0.85),
    "yellow": (0.95, 0.85, 0.15),
    "orange": (0.95, 0.50, 0.10),
    "purple": (0.55, 0.20, 0.70),
    "white": (0.93, 0.93, 0.93),
    "black": (0.08, 0.08, 0.08),
    "gray": (0.50, 0.50, 0.50),
    "brown": (0.55, 0.35, 0.18),
    "pink": (0.95, 0.55, 0.70),
    "cyan": (0.15, 0.75, 0.80),
    "wood": (0.72, 0.55, 0.36),
}


def _where(source: str, path: str) -> str:
    return f"{source}: {path}" if source else path


def parse_color(value: Any, where: str) -> tuple[float, float, float]:
    """A colour name from :data:`NAMED_COLORS` or [r, g, b] in 0..1 -> (r, g, b)."""
    if isinstance(value, str):
        if value not in NAMED_COLORS:
            raise ScenarioError(
                f"{where}: unknown colour {value!r} (expected one of {', '.join(NAMED_COLORS)} or [r, g, b])"
            )
        return NAMED_COLORS[value]
    try:
        rgb = tuple(float(v) for v in value)
    except TypeError as exc:
        raise ScenarioError(f"{where}: colour must be a name or [r, g, b] in 0..1, got {value!r}") from exc
    if len(rgb) != 3 or not all(0.0 <= c <= 1.0 for c in rgb):
        raise ScenarioError(f"{where}: colour must be [r, g, b] with components in 0..1, got {value!r}")
    return rgb  # type: ignore[return-value]


def _floats(value: Any, n: int, where: str, positive: bool = False) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: expected {n} number(s), got {value!r}") from exc
    if len(out) != n or not all(math.isfinite(v) for v in out):
        raise ScenarioError(f"{where}: expected {n} finite number(s), got {value!r}")
    if positive and not all(v > 0 for v in out):
        raise ScenarioError(f"{where}: expected positive number(s), got {value!r}")
    return out


@dataclass
class Randomize:
    """Seeded per-object variation applied by :meth:`Scenario.sample`."""

    xy_m: float = 0.0  # uniform jitter of x and y, +- metres
    yaw_deg: float = 0.0  # uniform jitter of the yaw, +- degrees
    colors: list[str] = field(default_factory=list)  # colour names to draw from (empty: keep the colour)

    def __post_init__(self) -> None:
        if self.xy_m < 0 or self.yaw_deg < 0:
            raise ScenarioError(f"randomize: xy_m and yaw_deg must be >= 0, got {self.xy_m}, {self.yaw_deg}")
        for c in self.colors:
            parse_color(c, "randomize.colors")


@dataclass
class ObjectSpec:
    """One object on the table.

    ``size_m`` depends on the kind: box (x, y, z) full extents; cylinder/cup/bowl/plate (radius, height);
    cabinet (depth x, width y, height z) — its drawer opens towards the cabinet's local -x.
    """

    id: str  # unique key used by the plan and the predicates
    kind: str  # one of OBJECT_KINDS
    name: str  # noun phrase the instruction and the exported plan use ("red box")
    size_m: tuple[float, ...]  # see the class docstring
    position_m: tuple[float, float]  # (x, y) of the object's centre on the table, base frame
    yaw_deg: float = 0.0  # rotation about z, degrees
    color: tuple[float, float, float] = NAMED_COLORS["gray"]  # RGB in 0..1
    mass_kg: float = 0.1  # free objects only
    drawer_travel_m: float = 0.18  # cabinet only: how far the drawer slides out
    drawer_open_m: float = 0.0  # cabinet only: how far the drawer is out at the start (0 = closed)
    randomize: Randomize = field(default_factory=Randomize)
    state: str = ""  # cup: upright | upside_down; box: closed | open (OBJECT_STATES); "" = the kind's default
    inside: str = ""  # id of a bowl/cup it starts in (resting on that container's floor), "" = on the table

    @property
    def resolved_state(self) -> str:
        """The object's state, the kind's default for "" (none for kinds without states)."""
        return self.state or OBJECT_STATES.get(self.kind, ("",))[0]

    @property
    def graspable(self) -> bool:
        return self.kind in GRASPABLE_KINDS

    @property
    def footprint_radius_m(self) -> float:
        """Radius of a circle that covers the object's footprint (for overlap checks)."""
        if self.kind in ("box", "cabinet"):
            return 0.5 * math.hypot(self.size_m[0], self.size_m[1])
        return self.size_m[0]

    @property
    def height_m(self) -> float:
        return self.size_m[2] if self.kind in ("box", "cabinet") else self.size_m[1]


@dataclass
class PredicateSpec:
    """A success condition: ``inside``/``on`` (object, target), ``drawer_open``/``drawer_closed`` (object,
    distance_m) or ``beside`` (object, target, direction_xy, distance_m: the object's centre within distance_m of
    the target's centre in the table plane and within +-45 degrees of direction_xy, Spa-Bench's relational
    placement)."""

    type: str  # one of PREDICATE_TYPES
    object: str  # object id (the cabinet for drawer predicates)
    target: str = ""  # target object id (inside/on/beside)
    distance_m: float = 0.10  # drawer_open: at least this far out; drawer_closed: at most this far; beside: at most
    direction_xy: tuple[float, float] | None = None  # beside: the direction from the target, unit vector, base frame


@dataclass
class PlanStepSpec:
    """One GT action: grasp/open/close name ``object``; place names ``target`` (ids of scenario objects).

    A place's ``offset_m`` (x, y in the base frame, m) moves its point from the target's place point: inside a
    container's footprint it stays on the container's floor (several objects side by side in one bowl), outside it
    lands on the table (beside the target).
    """

    type: str
    object: str = ""
    target: str = ""
    offset_m: tuple[float, float] = (0.0, 0.0)


@dataclass
class PerturbationSpec:
    """Something that goes wrong in a run, drawn per seed (probability ``p``).

    - ``slip``: the held ``object`` slips out of the gripper ``after_s`` (sim seconds) into the first carry move;
    - ``moved``: someone moves ``object`` by ``distance_m`` (a range, random direction) when the arm first heads
      for it, after the plan was made from the first frame;
    - ``grasp_offset``: the first grasp box the model gives for ``object`` is off by ``offset_m`` on the table
      (random direction);
    - ``distractor``: a look-alike of ``object`` (same kind and size, colour shifted by ``color_shift`` per channel)
      stands within ``distance_m`` of it.
    """

    type: str  # one of PERTURBATION_TYPES
    object: str  # the scenario object it concerns
    p: float = 1.0  # probability that it happens in a run (drawn from the seed)
    after_s: float = 0.15  # slip: sim seconds into the carry move
    distance_m: tuple[float, float] = (0.06, 0.10)  # moved: how far; distractor: how far from the object (range, m)
    offset_m: float = 0.04  # grasp_offset: how far off the box is on the table, m
    color_shift: float = 0.06  # distractor: added to each RGB channel (0..1), clipped
    # drawn by Scenario.sample (None before): whether it happens, and its direction in the table plane
    active: bool | None = None
    angle_rad: float = 0.0
    amount_m: float = 0.0


@dataclass
class CameraSpec:
    """The simulated D435 colour camera (depth is rendered aligned to it)."""

    position_m: tuple[float, float, float] = (0.95, 0.0, 0.75)  # optical centre, base frame
    look_at_m: tuple[float, float, float] = (0.45, 0.0, 0.0)  # point on the optical axis
    width: int = 640  # pixels
    height: int = 480  # pixels
    fy_px: float = 615.0  # focal length in pixels (fx = fy: square pixels); ~D435 colour at 640x480
    depth_noise: bool = False  # add D435-like depth noise (sigma grows with z^2) and 1 mm quantisation
    depth_hole_fraction: float = 0.0  # fraction of valid depth pixels dropped to 0 (speckle holes)
    depth_min_m: float = 0.1  # closer than this reads 0 (invalid), like the real sensor
    depth_max_m: float = 4.0  # farther than this reads 0

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ScenarioError(f"camera: width/height must be positive, got {self.width}x{self.height}")
        if self.fy_px <= 0:
            raise ScenarioError(f"camera.fy_px must be > 0, got {self.fy_px}")
        if not 0.0 <= self.depth_hole_fraction < 1.0:
            raise ScenarioError(f"camera.depth_hole_fraction must be in [0, 1), got {self.depth_hole_fraction}")
        if not 0 <= self.depth_min_m < self.depth_max_m:
            raise ScenarioError(
                f"camera: need 0 <= depth_min_m < depth_max_m, got {self.depth_min_m}, {self.depth_max_m}"
            )
        if np.allclose(self.position_m, self.look_at_m):
            raise ScenarioError("camera: position_m and look_at_m must differ")


@dataclass
class Scenario:
    """A workcell scene, its instruction, its GT plan and its success predicates."""

    name: str
    instruction: str
    instruction_type: str  # explicit | implicit (bench episode field)
    objects: list[ObjectSpec]
    plan: list[PlanStepSpec]
    success: list[PredicateSpec]
    unordered: list[list[int]] = field(default_factory=list)  # bench: blocks of step indices in any order
    camera: CameraSpec = field(default_factory=CameraSpec)
    robot: str = "gp5"  # arm model, one of ROBOTS
    source: str = ""  # file the scenario came from (for messages)
    perturbations: list[PerturbationSpec] = field(default_factory=list)  # what goes wrong (drawn per seed)

    def object(self, object_id: str) -> ObjectSpec:
        for obj in self.objects:
            if obj.id == object_id:
                return obj
        raise ScenarioError(
            f"{_where(self.source, 'objects')}: no object with id {object_id!r} "
            f"(have {', '.join(o.id for o in self.objects)})"
        )

    def perturbation(self, type_: str, object_id: str | None = None) -> PerturbationSpec | None:
        """The active perturbation of ``type_`` (for ``object_id``), if this sampled run has one."""
        for p in self.perturbations:
            if p.type == type_ and p.active and (object_id is None or p.object == object_id):
                return p
        return None

    def sample(self, seed: int | None) -> "Scenario":
        """A copy with each object's pose/colour drawn from its ``randomize`` ranges (``None``: nominal) and the
        perturbations drawn (whether each happens, its direction and size; ``None``: each with p > 0 happens).

        Redraws up to 200 times until no two footprints overlap; raises :class:`ScenarioError` otherwise.
        """
        if seed is None:
            if not self.perturbations or all(p.active is not None for p in self.perturbations):
                return self
            drawn = [
                PerturbationSpec(
                    **{
                        **p.__dict__,
                        "active": p.p > 0,
                        "amount_m": p.offset_m if p.type == "grasp_offset" else p.distance_m[0],
                    }
                )
                for p in self.perturbations
            ]
            return Scenario(
                **{**self.__dict__, "perturbations": drawn, "objects": self.objects + _distractors(self.objects, drawn)}
            )
        rng = np.random.default_rng(seed)
        # perturbations from a stream of their own: adding one leaves the layouts of the seeds unchanged
        prng = np.random.default_rng([seed, 7919])
        drawn = []
        for p in self.perturbations:
            amount = p.offset_m if p.type == "grasp_offset" else float(prng.uniform(*p.distance_m))
            drawn.append(
                PerturbationSpec(
                    **{
                        **p.__dict__,
                        "active": bool(prng.random() < p.p),
                        "angle_rad": float(prng.uniform(-math.pi, math.pi)),
                        "amount_m": amount,
                    }
                )
            )
        for _ in range(200):
            objects = []
            for obj in self.objects:
                r = obj.randomize
                dx, dy = rng.uniform(-r.xy_m, r.xy_m, size=2) if r.xy_m > 0 else (0.0, 0.0)
                dyaw = float(rng.uniform(-r.yaw_deg, r.yaw_deg)) if r.yaw_deg > 0 else 0.0
                color = NAMED_COLORS[r.colors[int(rng.integers(len(r.colors)))]] if r.colors else obj.color
                objects.append(
                    ObjectSpec(
                        **{
                            **obj.__dict__,
                            "position_m": (obj.position_m[0] + float(dx), obj.position_m[1] + float(dy)),
                            "yaw_deg": obj.yaw_deg + dyaw,
                            "color": color,
                        }
                    )
                )
            objects += _distractors(objects, drawn)
            if not _overlaps(objects):
                return Scenario(**{**self.__dict__, "objects": objects, "perturbations": drawn})
            for p in drawn:  # a distractor that overlaps tries another direction in the next draw
                p.angle_rad = float(prng.uniform(-math.pi, math.pi))
        raise ScenarioError(
            f"{_where(self.source, 'randomize')}: no non-overlapping layout in 200 draws "
            f"with seed {seed}; reduce xy_m or space the objects out"
        )


def _distractors(objects: list[ObjectSpec], perturbations: list[PerturbationSpec]) -> list[ObjectSpec]:
    """Look-alikes asked for by active ``distractor`` perturbations, next to their originals."""
    out = []
    by_id = {o.id: o for o in objects}
    for p in perturbations:
        if p.type != "distractor" or not p.active:
            continue
        obj = by_id[p.object]
        gap = 2 * obj.footprint_radius_m + p.amount_m
        color = tuple(float(np.clip(c + p.color_shift, 0.0, 1.0)) for c in obj.color)
        out.append(
            ObjectSpec(
                **{
                    **obj.__dict__,
                    "id": f"{obj.id}_lookalike",
                    "name": f"{obj.name} look-alike",
                    "position_m": (
                        obj.position_m[0] + gap * math.cos(p.angle_rad),
                        obj.position_m[1] + gap * math.sin(p.angle_rad),
                    ),
                    "color": color,
                    "randomize": Randomize(),
                }
            )
        )
    return out


def _overlaps(objects: list[ObjectSpec]) -> bool:
    for i, a in enumerate(objects):
        for b in objects[i + 1 :]:
            if a.inside == b.id or b.inside == a.id:  # in its container on purpose
                continue
            # keep a 5 mm gap
            if math.dist(a.position_m, b.position_m) < a.footprint_radius_m + b.footprint_radius_m + 0.005:
                return True
    return False


# -- loading ---------------------------------------------------------------------------------------
_SIZE_LEN = {"box": 3, "cabinet": 3, "cylinder": 2, "cup": 2, "bowl": 2, "plate": 2}
_DEFAULT_MASS = {"box": 0.08, "cylinder": 0.08, "cup": 0.06, "bowl": 0.15, "plate": 0.15, "cabinet": 0.0}


def _require(data: dict, key: str, where: str) -> Any:
    if key not in data:
        raise ScenarioError(f"{where}: missing required field {key!r}")
    return data[key]


def _object_from_dict(data: Any, where: str) -> ObjectSpec:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: an object must be a mapping, got {type(data).__name__}")
    kind = str(_require(data, "kind", where))
    if kind not in OBJECT_KINDS:
        raise ScenarioError(f"{where}.kind: unknown kind {kind!r} (expected one of {', '.join(OBJECT_KINDS)})")
    object_id = str(_require(data, "id", where))
    rand = data.get("randomize") or {}
    if not isinstance(rand, dict):
        raise ScenarioError(f"{where}.randomize: expected a mapping (xy_m, yaw_deg, colors), got {rand!r}")
    unknown = set(rand) - {"xy_m", "yaw_deg", "colors"}
    if unknown:
        raise ScenarioError(f"{where}.randomize: unknown field(s) {sorted(unknown)} (expected xy_m, yaw_deg, colors)")
    try:
        randomize = Randomize(
            xy_m=float(rand.get("xy_m", 0.0)),
            yaw_deg=float(rand.get("yaw_deg", 0.0)),
            colors=[str(c) for c in rand.get("colors", [])],
        )
    except ScenarioError as exc:
        raise ScenarioError(f"{where}.{exc}") from exc
    mass = float(data.get("mass_kg", _DEFAULT_MASS[kind]))
    if kind != "cabinet" and mass <= 0:
        raise ScenarioError(f"{where}.mass_kg: must be > 0, got {mass}")
    travel = float(data.get("drawer_travel_m", 0.18))
    if (
        kind == "cabinet"
        and not 0.02 <= travel <= 0.9 * _floats(_require(data, "size_m", where), 3, f"{where}.size_m")[0]
    ):
        raise ScenarioError(
            f"{where}.drawer_travel_m: must be between 0.02 m and 90% of the cabinet depth, got {travel}"
        )
    drawer_open = float(data.get("drawer_open_m", 0.0))
    if not 0.0 <= drawer_open <= travel:
        raise ScenarioError(
            f"{where}.drawer_open_m: must be between 0 and drawer_travel_m ({travel}), got {drawer_open}"
        )
    state = str(data.get("state") or "")
    if state and state not in OBJECT_STATES.get(kind, ()):
        allowed = OBJECT_STATES.get(kind)
        raise ScenarioError(
            f"{where}.state: a {kind} has no state {state!r} "
            f"({'expected one of ' + ', '.join(allowed) if allowed else 'it has no states'})"
        )
    return ObjectSpec(
        id=object_id,
        kind=kind,
        name=str(data.get("name") or object_id.replace("_", " ")),
        size_m=_floats(_require(data, "size_m", where), _SIZE_LEN[kind], f"{where}.size_m", positive=True),
        position_m=_floats(_require(data, "position_m", where), 2, f"{where}.position_m"),  # type: ignore[arg-type]
        yaw_deg=float(data.get("yaw_deg", 0.0)),
        color=parse_color(data.get("color", "gray"), f"{where}.color"),
        mass_kg=mass,
        drawer_travel_m=travel,
        drawer_open_m=drawer_open,
        randomize=randomize,
        state=state,
        inside=str(data.get("inside") or ""),
    )


def scenario_from_dict(data: Any, source: str = "") -> Scenario:
    """Build and check a :class:`Scenario` from parsed YAML; ``source`` names the file in messages."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source or 'scenario'}: expected a mapping at the top level, got {type(data).__name__}")

    def w(path: str) -> str:
        return _where(source, path)

    objects_raw = _require(data, "objects", w("scenario"))
    if not isinstance(objects_raw, list) or not objects_raw:
        raise ScenarioError(f"{w('objects')}: expected a non-empty list of objects")
    objects = [_object_from_dict(o, w(f"objects[{i}]")) for i, o in enumerate(objects_raw)]
    ids = [o.id for o in objects]
    if len(set(ids)) != len(ids):
        raise ScenarioError(f"{w('objects')}: object ids must be unique, got {ids}")
    by_id = {o.id: o for o in objects}
    for i, o in enumerate(objects):
        if o.inside and (o.inside not in by_id or by_id[o.inside].kind not in CONTAINER_FLOOR_M or o.inside == o.id):
            raise ScenarioError(
                f"{w(f'objects[{i}].inside')}: {o.inside!r} is not a container of the scenario "
                f"(expected the id of a {' or '.join(CONTAINER_FLOOR_M)})"
            )

    def ref(obj_id: Any, where: str, kinds: tuple[str, ...] | None = None) -> str:
        if str(obj_id) not in by_id:
            raise ScenarioError(f"{where}: no object with id {obj_id!r} (have {', '.join(ids)})")
        if kinds is not None and by_id[str(obj_id)].kind not in kinds:
            raise ScenarioError(
                f"{where}: object {obj_id!r} is a {by_id[str(obj_id)].kind}, expected one of {', '.join(kinds)}"
            )
        return str(obj_id)

    plan = []
    for i, step in enumerate(_require(data, "plan", w("scenario")) or []):
        where = w(f"plan[{i}]")
        if not isinstance(step, dict) or step.get("type") not in ("grasp", "place", "open", "close"):
            raise ScenarioError(f"{where}: expected {{type: grasp|place|open|close, ...}}, got {step!r}")
        if step["type"] == "place":
            offset = _floats(step.get("offset_m", [0.0, 0.0]), 2, f"{where}.offset_m")
            plan.append(
                PlanStepSpec("place", target=ref(_require(step, "target", where), f"{where}.target"), offset_m=offset)
            )  # type: ignore[arg-type]
        elif step["type"] == "grasp":
            plan.append(
                PlanStepSpec("grasp", object=ref(_require(step, "object", where), f"{where}.object", GRASPABLE_KINDS))
            )
        else:
            plan.append(
                PlanStepSpec(step["type"], object=ref(_require(step, "object", where), f"{where}.object", ("cabinet",)))
            )
    broken = pairing_error([step.type for step in plan])  # the plan model's rule: export never writes a bad plan
    if broken is not None:
        raise ScenarioError(f"{w(f'plan[{broken[0]}]')}: {broken[2]}")

    success = []
    for i, pred in enumerate(data.get("success") or []):
        where = w(f"success[{i}]")
        if not isinstance(pred, dict) or pred.get("type") not in PREDICATE_TYPES:
            raise ScenarioError(f"{where}: expected {{type: {'|'.join(PREDICATE_TYPES)}, ...}}, got {pred!r}")
        if pred["type"] in ("inside", "on"):
            success.append(
                PredicateSpec(
                    pred["type"],
                    ref(_require(pred, "object", where), f"{where}.object"),
                    ref(_require(pred, "target", where), f"{where}.target"),
                )
            )
        elif pred["type"] == "beside":
            direction = _floats(_require(pred, "direction_xy", where), 2, f"{where}.direction_xy")
            if abs(math.hypot(*direction) - 1.0) > 1e-3:
                raise ScenarioError(f"{where}.direction_xy: expected a unit vector, got {list(direction)}")
            success.append(
                PredicateSpec(
                    "beside",
                    ref(_require(pred, "object", where), f"{where}.object"),
                    ref(_require(pred, "target", where), f"{where}.target"),
                    distance_m=_floats(pred.get("distance_m", 0.0762), 1, f"{where}.distance_m", positive=True)[0],
                    direction_xy=direction,
                )
            )  # type: ignore[arg-type]
        else:
            success.append(
                PredicateSpec(
                    pred["type"],
                    ref(_require(pred, "object", where), f"{where}.object", ("cabinet",)),
                    distance_m=float(pred.get("distance_m", 0.10)),
                )
            )
    if not success and plan:
        # a scenario with nothing to do (an empty plan: the goal already holds) may have no predicate
        raise ScenarioError(f"{w('success')}: at least one success predicate is required")

    unordered = data.get("unordered") or []
    if not isinstance(unordered, list) or not all(
        isinstance(b, list) and all(isinstance(k, int) for k in b) for b in unordered
    ):
        raise ScenarioError(f"{w('unordered')}: expected a list of lists of step indices, got {unordered!r}")
    itype = str(data.get("instruction_type", "explicit"))
    if itype not in ("explicit", "implicit"):
        raise ScenarioError(f"{w('instruction_type')}: expected explicit or implicit, got {itype!r}")
    cam_raw = data.get("camera") or {}
    if not isinstance(cam_raw, dict):
        raise ScenarioError(f"{w('camera')}: expected a mapping, got {cam_raw!r}")
    unknown = set(cam_raw) - set(CameraSpec.__dataclass_fields__)
    if unknown:
        raise ScenarioError(
            f"{w('camera')}: unknown field(s) {sorted(unknown)} (expected {', '.join(CameraSpec.__dataclass_fields__)})"
        )
    cam_kwargs = dict(cam_raw)
    for key in ("position_m", "look_at_m"):
        if key in cam_kwargs:
            cam_kwargs[key] = _floats(cam_kwargs[key], 3, w(f"camera.{key}"))
    try:
        camera = CameraSpec(**cam_kwargs)
    except (TypeError, ScenarioError) as exc:
        raise ScenarioError(f"{w('camera')}: {exc}") from exc
    perturbations = []
    for i, item in enumerate(data.get("perturbations") or []):
        perturbations.append(_perturbation_from_dict(item, w(f"perturbations[{i}]"), ref))
    robot = str(data.get("robot", "gp5"))
    if robot not in ROBOTS:
        raise ScenarioError(f"{w('robot')}: unknown arm {robot!r} (expected one of {', '.join(ROBOTS)})")
    return Scenario(
        name=str(data.get("name") or Path(source).stem or "scenario"),
        instruction=str(_require(data, "instruction", w("scenario"))),
        instruction_type=itype,
        objects=objects,
        plan=plan,
        success=success,
        unordered=[list(b) for b in unordered],
        camera=camera,
        robot=robot,
        source=source,
        perturbations=perturbations,
    )


def _perturbation_from_dict(item: Any, where: str, ref) -> PerturbationSpec:
    if not isinstance(item, dict) or item.get("type") not in PERTURBATION_TYPES:
        raise ScenarioError(
            f"{where}: expected {{type: {'|'.join(PERTURBATION_TYPES)}, object: ID, ...}}, got {item!r}"
        )
    fields = {"type", "object", "p", "after_s", "distance_m", "offset_m", "color_shift"}
    unknown = set(item) - fields
    if unknown:
        raise ScenarioError(
            f"{where}: unknown field(s) {sorted(unknown)} (expected some of {', '.join(sorted(fields))})"
        )
    kinds = GRASPABLE_KINDS
    spec = PerturbationSpec(type=item["type"], object=ref(_require(item, "object", where), f"{where}.object", kinds))
    if "p" in item:
        spec.p = _floats(item["p"], 1, f"{where}.p")[0]
        if not 0.0 <= spec.p <= 1.0:
            raise ScenarioError(f"{where}.p: a probability in [0, 1] is expected, got {item['p']!r}")
    for key in ("after_s", "offset_m", "color_shift"):
        if key in item:
            setattr(spec, key, _floats(item[key], 1, f"{where}.{key}", positive=True)[0])
    if "distance_m" in item:
        raw = item["distance_m"]
        lo_hi = _floats(raw if isinstance(raw, (list, tuple)) else [raw, raw], 2, f"{where}.distance_m", positive=True)
        if lo_hi[0] > lo_hi[1]:
            raise ScenarioError(f"{where}.distance_m: expected [min, max] with min <= max, got {raw!r}")
        spec.distance_m = lo_hi  # type: ignore[assignment]
    return spec


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false are booleans, so ``type: on`` stays the string "on"."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario YAML file; raises :class:`ScenarioError` naming the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        data = yaml.load(path.read_text(), Loader=_Yaml12Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    return scenario_from_dict(data, source=str(path))


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """A scenario as the mapping :func:`scenario_from_dict` reads (YAML-ready; a ``sample`` result included, its
    perturbations left out)."""

    def obj(o: ObjectSpec) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": o.id,
            "kind": o.kind,
            "name": o.name,
            "size_m": list(o.size_m),
            "position_m": list(o.position_m),
            "yaw_deg": o.yaw_deg,
            "color": list(o.color),
            "mass_kg": o.mass_kg,
        }
        if o.kind == "cabinet":
            out.update(drawer_travel_m=o.drawer_travel_m, drawer_open_m=o.drawer_open_m)
        if o.state:
            out["state"] = o.state
        if o.inside:
            out["inside"] = o.inside
        r = o.randomize
        if r.xy_m or r.yaw_deg or r.colors:
            out["randomize"] = {"xy_m": r.xy_m, "yaw_deg": r.yaw_deg, "colors": list(r.colors)}
        return out

    def step(p: PlanStepSpec) -> dict[str, Any]:
        if p.type == "place":
            return {"type": "place", "target": p.target, **({"offset_m": list(p.offset_m)} if any(p.offset_m) else {})}
        return {"type": p.type, "object": p.object}

    def pred(p: PredicateSpec) -> dict[str, Any]:
        if p.type in ("drawer_open", "drawer_closed"):
            return {"type": p.type, "object": p.object, "distance_m": p.distance_m}
        if p.type == "beside":
            return {
                "type": p.type,
                "object": p.object,
                "target": p.target,
                "distance_m": p.distance_m,
                "direction_xy": list(p.direction_xy or ()),
            }
        return {"type": p.type, "object": p.object, "target": p.target}

    cam = scenario.camera
    return {
        "name": scenario.name,
        "instruction": scenario.instruction,
        "instruction_type": scenario.instruction_type,
        "robot": scenario.robot,
        "camera": {
            **{k: getattr(cam, k) for k in CameraSpec.__dataclass_fields__},
            "position_m": list(cam.position_m),
            "look_at_m": list(cam.look_at_m),
        },
        "objects": [obj(o) for o in scenario.objects],
        "plan": [step(p) for p in scenario.plan],
        "success": [pred(p) for p in scenario.success],
        "unordered": [list(b) for b in scenario.unordered],
    }
