"""Scene generation for the six Spa-Bench tasks under every condition (seeded, within the robot's reach).

A trial is drawn from ``(task, condition, seed, robot)`` alone: the same arguments give the same scene, instruction
and oracle plan. The ``ood``, ``direct`` and ``paraphrase`` trials of one seed share one scene (drawn from one random
stream); the two halves ``2k`` and ``2k + 1`` of a ``relational_control`` pair share everything but where the moved
object stands. Objects come from ``config/spabench/inventory.yaml``, cells from ``config/spabench/matrix.yaml``; the
cell of an ``id`` / ``ood`` trial cycles through the matrix's observed / withheld cells with the seed.

Frames: the robot base frame (x forward, y left of the robot, z up, metres). The camera faces the robot from across
the table (on +x), so the camera's left is the base's -y: "the first block from the left" is the one with the
smallest y, and "to the left of" points along -y (:func:`grounded_planner.spabench.trial.direction_xy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from grounded_planner.sim.scenario import (
    CONTAINER_FLOOR_M,
    CameraSpec,
    ObjectSpec,
    PlanStepSpec,
    PredicateSpec,
    Scenario,
    parse_color,
)
from grounded_planner.sim.predicates import RELATION_RADIUS_M
from grounded_planner.sim.robots import ROBOT_SPECS
from grounded_planner.sim.scene import camera_axes
from grounded_planner.spabench.config import (
    Instance,
    Inventory,
    Matrices,
    TASK_CONCEPTS,
    check_inventory_for,
    load_inventory,
    load_matrices,
)
from grounded_planner.spabench.errors import GenerationError
from grounded_planner.spabench.trial import (
    CONDITIONS,
    ROBOTS,
    TASK_CONDITIONS,
    TASKS,
    MatrixCell,
    Trial,
    TrialObject,
    TrialSpec,
    check_name,
    direction_xy,
    pair_id,
    paraphrase_original,
)

MAX_DRAWS = 2000  # layouts tried per scene before giving up with a GenerationError naming the task and seed
SCENE_ATTEMPTS = 4  # scenes (object sets) drawn per trial before giving up


@dataclass(frozen=True)
class Workspace:
    """Where a robot's scenes go: object centres (grasp points) and place points inside an annulus sector of the
    table in front of the base, clear of the arm's waiting pose; objects at the robot's scale."""

    scale: float  # object sizes = inventory size_m x scale (the SO-101's scenes are smaller)
    r_min_m: float  # nearest a centre may be to the base (horizontal), m
    r_max_m: float  # farthest, m
    x_min_m: float  # smallest x (in front of the base), m
    y_max_m: float  # |y| at most, m (the executor's safety envelope)
    camera_position_m: tuple[float, float, float]
    camera_look_at_m: tuple[float, float, float]
    gap_m: float  # free space between two footprints (room for the open jaws), m
    relation_offset_m: float  # the oracle puts a relational target this far from the reference's centre, m
    keep_out_xy_m: tuple[float, float] | None = None  # the waiting gripper's footprint: no centre within ...
    keep_out_r_m: float = 0.0  # ... this radius of it (it hides what lies under it from the camera)
    mass_scale: float = 1.0
    max_height_m: float | None = None  # objects no taller than this (the top-down reach's ceiling minus the approach)
    path_r_min_m: float | None = None  # straight moves between objects and the bowl keep this far from the base, m
    home_path_r_min_m: float | None = None  # the first move, from the waiting pose (lower), keeps this far, m
    fillers: bool = True  # add objects of other families and extra rivals (False: only what the task needs)
    max_pan_deg: float | None = None  # an object and the bowl at most this far apart seen from the base, degrees
    bowl_gap_m: float = 0.0  # more free space around the bowl (a bulky hand brushing the rim pushes it away), m
    arm_over_bowl_m: float | None = None  # the arm's links reach low: no object behind the bowl (seen from the base)
    # unless the line from the base to it passes this far outside the bowl's rim, m


# Reach measured with the simulator's IK (top-down tool, any yaw, at the table and 65 mm above it) and the executor's
# safety envelopes (config/execution*.yaml): test_spabench_scenes checks every generated grasp and place point.
# the SO-101's top-down tool reaches 0.14-0.24 m out up to 60 mm above the table but only 0.16-0.22 m at 80 mm
# and nothing at 100 mm: objects at most 30 mm tall (the executor approaches 45 mm above an object's top), and no
# straight move may cut closer than 0.16 m past the base (nearer, the held tool's yaw runs the wrist roll into
# its limit on the way), nor turn the base more than 60 degrees while carrying; its forearm reaches low, so nothing
# stands behind the bowl where the arm would sweep over the rim; its moving jaw swings away from the fixed one to let
# go (23 mm past a 22 mm block's face at the executor's 45 mm opening, 48 mm fully open): the oracle puts a relational
# target 56 mm from its reference's centre (at 42 mm, released with its jaws along the relation, it pushed the
# reference 26 mm away)
SO101_WORKSPACE = Workspace(
    scale=0.55,
    r_min_m=0.16,
    r_max_m=0.225,
    x_min_m=0.13,
    y_max_m=0.145,
    camera_position_m=(0.62, 0.0, 0.45),
    camera_look_at_m=(0.17, 0.0, 0.0),
    gap_m=0.03,
    relation_offset_m=0.056,
    keep_out_xy_m=(0.17, 0.0),
    keep_out_r_m=0.035,
    mass_scale=0.3,
    max_height_m=0.03,
    path_r_min_m=0.16,
    home_path_r_min_m=0.145,
    fillers=False,
    max_pan_deg=60.0,
    arm_over_bowl_m=0.015,
    bowl_gap_m=0.01,
)
# the Franka-sized arms (the gp5 and the FR3) share the executor's default safety envelope (ExecutorConfig(), sized
# for a Franka: RobotSpec.executor_config '' for both) and so one workspace: a reach change reaches both
FRANKA_WORKSPACE = Workspace(
    scale=1.0,
    r_min_m=0.32,
    r_max_m=0.60,
    x_min_m=0.30,
    y_max_m=0.26,
    camera_position_m=(0.95, 0.0, 0.75),
    camera_look_at_m=(0.42, 0.0, 0.0),
    gap_m=0.045,
    relation_offset_m=0.062,
)
# one workspace per executor envelope (RobotSpec.executor_config), each robot's the one of its envelope
_ENVELOPE_WORKSPACES = {"": FRANKA_WORKSPACE, "execution_so101.yaml": SO101_WORKSPACE}
WORKSPACES: dict[str, Workspace] = {name: _ENVELOPE_WORKSPACES[ROBOT_SPECS[name].executor_config] for name in ROBOTS}
_MASS = {"box": 0.08, "cylinder": 0.08, "cup": 0.06, "bowl": 0.15}

# -- instruction templates: index 0 is the original wording, the others its paraphrases ------------------------
STATE_WORDS = {"upright": "upright", "upside_down": "upside-down", "open": "open", "closed": "closed"}
STATE_PREDICATES = {
    "upright": "standing upright",
    "upside_down": "turned upside down",
    "open": "open",
    "closed": "closed",
}
RELATION_WORDS = {"left": "to the left of", "right": "to the right of", "front": "in front of", "behind": "behind"}
ORDINAL_WORDS = {"first": "first", "second": "second", "third": "third", "fourth": "fourth"}
COUNT_WORDS = {"one": 1, "two": 2, "three": 3}
NUMBER_WORDS = {0: "zero", 1: "one", 2: "two", 3: "three"}
TEMPLATES: dict[str, tuple[str, ...]] = {
    "object_state": (
        "place the {state} {noun} in the bowl",
        "put the {noun} that is {state_pred} into the bowl",
        "pick up the {state} {noun} and drop it in the bowl",
    ),
    "relative_size": (
        "place the {extreme} {noun} in the bowl",
        "put the {noun} that is the {extreme2} into the bowl",
        "of the {noun}s, place the {extreme} one in the bowl",
    ),
    "referential_description": (
        "place the {noun} {relation} the {reference} in the bowl",
        "put the {noun} that is {relation2} the {reference} into the bowl",
        "find the {noun} {relation} the {reference} and place it in the bowl",
    ),
    "relational_placement": (
        "place the {target} {relation} the {reference}",
        "move the {target} so that it ends up {relation} the {reference}",
        "put the {target} down {relation} the {reference}",
    ),
    "ordinal_position": (
        "place the {ordinal} {noun} from the {side} in the bowl",
        "counting from the {side}, put the {ordinal} {noun} into the bowl",
        "pick the {noun} that is {ordinal} from the {side} and place it in the bowl",
    ),
    "counting": (
        "leave exactly {number} {nouns} in the bowl",
        "make sure the bowl ends up holding exactly {number} {nouns}",
        "put {nouns} into the bowl until there are exactly {number} in it",
    ),
}
DIRECT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "in_bowl": (
        "place the {target} in the bowl",
        "put the {target} into the bowl",
        "pick up the {target} and drop it in the bowl",
    ),
    "relational_placement": (
        "pick up the {target} and set it down next to the {reference}, on its {side} side as seen from here",
        "put the {target} next to the {reference}, on the {side} side as seen from here",
    ),
    "counting": ("place the {targets} in the bowl", "put the {targets} into the bowl"),
}
SIDE_WORDS = {"left": "left", "right": "right", "front": "near", "behind": "far"}


@lru_cache(maxsize=4)
def _config(inventory_path: str | None = None, matrix_path: str | None = None) -> tuple[Inventory, Matrices]:
    inventory = load_inventory(inventory_path)
    check_inventory_for(inventory)
    return inventory, load_matrices(matrix_path, inventory)


@dataclass
class _Placed:
    """An object of a scene being drawn."""

    inst: Instance
    size_m: tuple[float, ...]
    kind: str
    xy: tuple[float, float] = (0.0, 0.0)
    yaw_deg: float = 0.0
    state: str = ""
    inside: str = ""
    display_name: str = ""  # the inventory's "<colour> <noun>"

    @property
    def id(self) -> str:
        return self.inst.id

    @property
    def name(self) -> str:
        return self.display_name or self.inst.id.replace("_", " ")

    @property
    def radius_m(self) -> float:
        """Radius of a circle around the footprint."""
        return 0.5 * math.hypot(self.size_m[0], self.size_m[1]) if self.kind == "box" else self.size_m[0]

    @property
    def height_m(self) -> float:
        return self.size_m[2] if self.kind == "box" else self.size_m[1]


@dataclass
class _Scene:
    """What a task builder returns: the objects and every wording of the trial's ask."""

    objects: list[_Placed]
    spec: TrialSpec
    instructions: tuple[str, ...]  # the spatial instruction and its paraphrases
    direct: tuple[str, ...]  # the plain instruction naming the target, and its paraphrases
    plan: list[PlanStepSpec]
    success: list[PredicateSpec]
    expects_action: bool = True
    success_rule: str = ""
    variant: str = ""
    cell: MatrixCell | None = None


class _Drawer:
    """Positions inside a workspace, drawn from one random stream."""

    def __init__(self, ws: Workspace, rng: np.random.Generator):
        self.ws, self.rng = ws, rng

    def reachable(self, xy) -> bool:
        ws = self.ws
        r = math.hypot(xy[0], xy[1])
        if not (ws.r_min_m <= r <= ws.r_max_m and xy[0] >= ws.x_min_m and abs(xy[1]) <= ws.y_max_m):
            return False
        return ws.keep_out_xy_m is None or math.dist(xy, ws.keep_out_xy_m) >= ws.keep_out_r_m

    def point(self) -> tuple[float, float]:
        ws = self.ws
        for _ in range(1000):
            xy = (float(self.rng.uniform(ws.x_min_m, ws.r_max_m)), float(self.rng.uniform(-ws.y_max_m, ws.y_max_m)))
            if self.reachable(xy):
                return xy
        raise GenerationError("the workspace has no reachable point")  # a bad WORKSPACES entry, not bad luck

    def free(self, xy, radius: float, placed: list[_Placed], extra_gap: float = 0.0, bowl: bool = False) -> bool:
        """Whether a footprint of ``radius`` at ``xy`` keeps the gap to every placed one (the open jaws' room)."""
        return all(
            math.dist(xy, p.xy)
            >= radius
            + p.radius_m
            + extra_gap
            + self.ws.gap_m
            + (self.ws.bowl_gap_m if p.kind == "bowl" or bowl else 0.0)
            for p in placed
            if not p.inside
        )

    def place_all(self, objects: list[_Placed], placed: list[_Placed] | None = None) -> bool:
        """Give each object a free reachable position (and a yaw); False when one found none in a few tries."""
        placed = list(placed or [])
        for obj in objects:
            for _ in range(60):
                xy = self.point()
                if self.free(xy, obj.radius_m, placed, bowl=obj.kind == "bowl"):
                    obj.xy = xy
                    obj.yaw_deg = float(self.rng.uniform(-30, 30)) if obj.kind == "box" else 0.0
                    placed.append(obj)
                    break
            else:
                return False
        return True


class _Builder:
    """Draws one trial's scene for a task; a method per task (``_object_state`` ...)."""

    def __init__(self, task: str, condition: str, seed: int, robot: str, inventory: Inventory, matrices: Matrices):
        self.task, self.condition, self.seed, self.robot = task, condition, seed, robot
        self.inv, self.matrix = inventory, matrices.tasks[task]
        self.ws = WORKSPACES[robot]
        cam_xy, look_xy = self.ws.camera_position_m[:2], self.ws.camera_look_at_m[:2]
        self.dirs = {d: direction_xy(d, cam_xy, look_xy) for d in RELATION_WORDS}
        # image right in the base frame: ordinal positions count along it
        self.right_xy = np.array(self.dirs["right"])

    # -- helpers ---------------------------------------------------------------------------------------------
    def obj(self, instance_id: str, state: str = "") -> _Placed:
        inst = self.inv.instances[instance_id]
        family = self.inv.families[inst.family]
        size = list(
            inst.size_m_so101
            if self.robot == "so101" and inst.size_m_so101
            else [round(v * self.ws.scale, 4) for v in inst.size_m]
        )
        if self.ws.max_height_m is not None and not family.receptacle:
            height_index = 2 if family.kind == "box" else 1
            size[height_index] = min(size[height_index], self.ws.max_height_m)
        return _Placed(
            inst,
            tuple(size),
            family.kind,
            state=state or (family.states[0] if family.states else ""),
            display_name=self.inv.name(instance_id),
        )

    def bowl(self) -> _Placed:
        bowls = self.inv.of_family(next(f.name for f in self.inv.families.values() if f.receptacle))
        return self.obj(bowls[0].id)

    def name(self, p: _Placed) -> str:
        return self.inv.name(p.id)

    def noun(self, family: str) -> str:
        return self.inv.families[family].noun

    def cell_for(self, rng: np.random.Generator, condition: str) -> tuple[str, str]:
        """The matrix cell of an id / ood trial (cycling with the seed), or an observed one for the diagnostics."""
        if condition in ("ood", "direct", "paraphrase"):
            cells = self.matrix.withheld
        else:
            cells = self.matrix.observed
        return (
            cells[self.seed % len(cells)]
            if condition in ("id", "ood", "direct", "paraphrase")
            else cells[int(rng.integers(len(cells)))]
        )

    def others(self, rng, family: str, exclude: set[str], n: int, sizes: tuple[str, ...] | None = None) -> list[str]:
        pool = [i.id for i in self.inv.of_family(family) if i.id not in exclude and (sizes is None or i.size in sizes)]
        if len(pool) < n:
            raise GenerationError(
                f"{self.task}/{self.condition}/{self.seed}: the inventory has only {len(pool)} "
                f"more {family} instance(s), the scene needs {n}"
            )
        return [str(v) for v in rng.choice(pool, size=n, replace=False)]

    def fillers(self, rng, families: set[str]) -> list[_Placed]:
        """One object of another family (nothing in a workspace without room for fillers)."""
        pool = [
            i.id
            for i in self.inv.instances.values()
            if i.family not in families and not self.inv.families[i.family].receptacle
        ]
        return [self.obj(str(rng.choice(pool)))] if self.ws.fillers else []

    def in_bowl_plan(self, target: _Placed, bowl: _Placed) -> tuple[list[PlanStepSpec], list[PredicateSpec]]:
        return (
            [PlanStepSpec("grasp", object=target.id), PlanStepSpec("place", target=bowl.id)],
            [PredicateSpec("inside", target.id, bowl.id)],
        )

    def paths_ok(
        self, objects: list[_Placed], extra: list[tuple[tuple[float, float], tuple[float, float]]] = ()
    ) -> bool:
        """Whether the straight moves a trial can ask for (home to each object, each object to the bowl, and
        ``extra`` segments) keep ``path_r_min_m`` from the base."""
        limit = self.ws.path_r_min_m
        if limit is None:
            return True
        movable = [o for o in objects if o.kind != "bowl" and not o.inside]
        bowls = [o for o in objects if o.kind == "bowl"]
        home = self.ws.keep_out_xy_m or (0.0, 0.0)
        home_limit = self.ws.home_path_r_min_m or limit
        segments = [(o.xy, b.xy) for o in movable for b in bowls] + list(extra)
        pan_ok = self.ws.max_pan_deg is None or all(
            abs(math.degrees(math.atan2(a[1], a[0]) - math.atan2(b[1], b[0]))) <= self.ws.max_pan_deg
            for a, b in segments
        )
        shadow = self.ws.arm_over_bowl_m
        clear_of_bowl = shadow is None or all(
            math.hypot(*o.xy) <= math.hypot(*b.xy)
            or _segment_distance_to_origin(np.subtract((0.0, 0.0), b.xy), np.subtract(o.xy, b.xy))
            >= b.radius_m + shadow
            for o in movable
            for b in bowls
        )
        return (
            pan_ok
            and clear_of_bowl
            and all(_segment_distance_to_origin(home, o.xy) >= home_limit for o in movable)
            and all(_segment_distance_to_origin(a, b) >= limit for a, b in segments)
        )

    def in_view(self, objects: list[_Placed]) -> bool:
        """Whether the camera sees the top of every object on the table clear of the others: no object stands in
        front of a shorter one within its image box (a taller can in front of a cup filled the cup's box, and the
        can's top was taken for the cup's)."""
        cam = self.ws
        standing = [o for o in objects if not o.inside]
        boxes = [_image_box(o, cam.camera_position_m, cam.camera_look_at_m, CameraSpec().fy_px) for o in standing]
        for a, box_a in enumerate(boxes):
            for b, box_b in enumerate(boxes):
                if box_a[4] < box_b[4] and standing[a].height_m > standing[b].height_m + 0.005:
                    if box_a[0] < box_b[2] and box_b[0] < box_a[2] and box_a[1] < box_b[3] and box_b[1] < box_a[3]:
                        return False
        return True

    def layout(self, rng, objects: list[_Placed], check=None) -> None:
        """Draw positions for ``objects`` until ``check(objects)`` holds and every move the trial may ask for stays
        within reach; GenerationError after MAX_DRAWS."""
        drawer = _Drawer(self.ws, rng)
        for _ in range(MAX_DRAWS):
            fixed = [o for o in objects if o.inside]
            if (
                drawer.place_all([o for o in objects if not o.inside], [])
                and self.paths_ok(objects)
                and self.in_view(objects)
                and (check is None or check(objects))
            ):
                for o in fixed:  # in its container: at its spot, relative to the container's drawn position
                    host = next(h for h in objects if h.id == o.inside)
                    o.xy = (host.xy[0] + o.xy[0], host.xy[1] + o.xy[1])
                return
        raise GenerationError(
            f"{self.task}/{self.condition}/{self.seed}: no layout of {len(objects)} objects within "
            f"the {self.robot}'s reach in {MAX_DRAWS} draws"
        )

    def in_bowl_rule(self, what: str) -> str:
        return f"the {what} ends with its centre inside the bowl's rim"

    # -- tasks -------------------------------------------------------------------------------------------------
    def object_state(self, rng, condition: str) -> _Scene:
        bowl = self.bowl()
        if condition == "no_intervention":
            concept, _ = self.cell_for(rng, condition)
            family = next(f for f in self.inv.families.values() if concept in f.states)
            other = next(s for s in family.states if s != concept)
            ids = self.others(rng, family.name, set(), 2)
            members = [self.obj(i, other) for i in ids]  # none is in the requested state: no valid referent
            objects = [bowl, *members, *self.fillers(rng, {family.name})]
            self.layout(rng, objects)
            words = dict(state=STATE_WORDS[concept], state_pred=STATE_PREDICATES[concept], noun=family.noun)
            return _Scene(
                objects,
                TrialSpec(receptacle=bowl.id, receptacle_radius_m=bowl.size_m[0], distractors=tuple(ids)),
                tuple(t.format(**words) for t in TEMPLATES["object_state"]),
                (),
                [],
                [],
                expects_action=False,
                variant="no_referent",
                success_rule=f"no {family.noun} is {STATE_WORDS[concept]}: nothing moves more than 2 cm "
                f"and nothing is grasped",
            )
        concept, argument = self.cell_or_cross(rng, condition)
        family = self.inv.families[self.inv.instances[argument].family]
        other = next(s for s in family.states if s != concept)
        target = self.obj(argument, concept)
        n_rivals = min(1 + int(rng.integers(2)) if self.ws.fillers else 1, len(self.inv.of_family(family.name)) - 1)
        rivals = [self.obj(i, other) for i in self.others(rng, family.name, {argument}, n_rivals)]
        objects = [bowl, target, *rivals, *self.fillers(rng, {family.name})]
        self.layout(rng, objects)
        plan, success = self.in_bowl_plan(target, bowl)
        words = dict(state=STATE_WORDS[concept], state_pred=STATE_PREDICATES[concept], noun=family.noun)
        return _Scene(
            objects,
            TrialSpec(
                target=target.id,
                receptacle=bowl.id,
                receptacle_radius_m=bowl.size_m[0],
                distractors=tuple(r.id for r in rivals),
            ),
            tuple(t.format(**words) for t in TEMPLATES["object_state"]),
            tuple(t.format(target=self.name(target)) for t in DIRECT_TEMPLATES["in_bowl"]),
            plan,
            success,
            success_rule=self.in_bowl_rule(f"{STATE_WORDS[concept]} {family.noun} ({self.name(target)})"),
            cell=MatrixCell(concept, argument),
        )

    def cell_or_cross(self, rng, condition: str) -> tuple[str, str]:
        concept, argument = self.cell_for(rng, condition)
        if condition != "cross_task_object":
            return concept, argument
        if not self.matrix.cross_task:
            raise GenerationError(
                f"{self.task}/{condition}/{self.seed}: matrix.yaml lists no cross_task families for {self.task}"
            )
        family = str(rng.choice(self.matrix.cross_task))
        if self.task in ("relative_size", "counting"):
            return concept, family
        if self.task == "ordinal_position":
            return concept, argument
        return concept, str(rng.choice([i.id for i in self.inv.of_family(family)]))

    def relative_size(self, rng, condition: str) -> _Scene:
        bowl = self.bowl()
        concept, family = self.cell_or_cross(rng, condition)
        by_size = {s: [i.id for i in self.inv.of_family(family) if i.size == s] for s in ("small", "medium", "large")}
        members = [self.obj(str(rng.choice(by_size[s]))) for s in ("small", "medium", "large")]
        target = members[0] if concept == "smallest" else members[2]
        objects = [bowl, *members, *self.fillers(rng, {family})]
        self.layout(rng, objects)
        plan, success = self.in_bowl_plan(target, bowl)
        extreme2 = "smallest" if concept == "smallest" else "biggest"
        words = dict(extreme=concept, extreme2=extreme2, noun=self.noun(family))
        return _Scene(
            objects,
            TrialSpec(
                target=target.id,
                receptacle=bowl.id,
                receptacle_radius_m=bowl.size_m[0],
                distractors=tuple(m.id for m in members if m is not target),
            ),
            tuple(t.format(**words) for t in TEMPLATES["relative_size"]),
            tuple(t.format(target=self.name(target)) for t in DIRECT_TEMPLATES["in_bowl"]),
            plan,
            success,
            success_rule=self.in_bowl_rule(f"{concept} {self.noun(family)} ({self.name(target)})"),
            cell=MatrixCell(concept, family),
        )

    def referential_description(self, rng, condition: str) -> _Scene:
        bowl = self.bowl()
        concept, reference_id = self.cell_for(rng, condition)
        family = "cup" if condition == "cross_task_object" and "cup" in self.matrix.cross_task else "block"
        if condition == "cross_task_object" and family == "block":
            family = str(rng.choice(self.matrix.cross_task))
        reference = self.obj(reference_id)
        relation = {"closest_to": "closest to", "furthest_from": "furthest from"}[concept]
        relation2 = {"closest_to": "nearest to", "furthest_from": "farthest away from"}[concept]
        if condition == "no_intervention":
            # no candidate: the instruction names a family the scene does not have
            absent = "cup" if reference.inst.family != "cup" else "can"
            absent_family = next(f for f in self.inv.families.values() if f.noun == absent or f.name == absent)
            present = self.others(rng, "block", {reference_id}, 2)
            objects = [bowl, reference, *[self.obj(i) for i in present]]
            self.layout(rng, objects)
            words = dict(
                noun=absent_family.noun, relation=relation, relation2=relation2, reference=self.name(reference)
            )
            return _Scene(
                objects,
                TrialSpec(reference=reference.id, receptacle=bowl.id, receptacle_radius_m=bowl.size_m[0]),
                tuple(t.format(**words) for t in TEMPLATES["referential_description"]),
                (),
                [],
                [],
                expects_action=False,
                variant="no_candidate",
                success_rule=f"there is no {absent_family.noun}: nothing moves more than 2 cm and nothing is grasped",
            )
        candidates = [
            self.obj(i)
            for i in self.others(rng, family, {reference_id}, 2 + (int(rng.integers(2)) if self.ws.fillers else 0))
        ]
        objects = [bowl, reference, *candidates]
        margin = 0.25 * RELATION_RADIUS_M * self.ws.scale  # the answer beats the runner-up by this much (m)

        def unambiguous(objs) -> bool:
            d = sorted(math.dist(c.xy, reference.xy) for c in candidates)
            return d[1] - d[0] >= margin if concept == "closest_to" else d[-1] - d[-2] >= margin

        self.layout(rng, objects, unambiguous)
        dists = [math.dist(c.xy, reference.xy) for c in candidates]
        target = candidates[int(np.argmin(dists) if concept == "closest_to" else np.argmax(dists))]
        plan, success = self.in_bowl_plan(target, bowl)
        words = dict(noun=self.noun(family), relation=relation, relation2=relation2, reference=self.name(reference))
        return _Scene(
            objects,
            TrialSpec(
                target=target.id,
                reference=reference.id,
                receptacle=bowl.id,
                receptacle_radius_m=bowl.size_m[0],
                distractors=tuple(c.id for c in candidates if c is not target),
            ),
            tuple(t.format(**words) for t in TEMPLATES["referential_description"]),
            tuple(t.format(target=self.name(target)) for t in DIRECT_TEMPLATES["in_bowl"]),
            plan,
            success,
            success_rule=self.in_bowl_rule(
                f"{self.noun(family)} {relation} the {self.name(reference)} ({self.name(target)})"
            ),
            cell=MatrixCell(concept, reference_id),
        )

    def relational_placement(self, rng, condition: str) -> _Scene:
        holds = condition == "no_intervention" or (condition == "relational_control" and self.seed % 2 == 0)
        concept, target_id = self.cell_or_cross(rng, condition)
        target = self.obj(target_id)
        # medium blocks as references and fillers: the target lands beside the reference without touching it and
        # well inside the 76.2 mm radius
        reference = self.obj(self.others(rng, "block", {target_id}, 1, sizes=("medium",))[0])
        fillers = [
            self.obj(i)
            for i in self.others(
                rng,
                "block",
                {target_id, reference.id},
                1 + int(rng.integers(2)) if self.ws.fillers else 1,
                sizes=("medium",),
            )
        ]
        unit = np.array(self.dirs[concept])
        offset = min(
            max(self.ws.relation_offset_m, target.radius_m + reference.radius_m + 0.006), RELATION_RADIUS_M - 0.01
        )
        drawer = _Drawer(self.ws, rng)

        def target_xy(half_rng: np.random.Generator, holds: bool) -> tuple[float, float] | None:
            half = _Drawer(self.ws, half_rng)
            for _ in range(60):
                if holds:  # already beside the reference, well inside the sector and the radius
                    angle = math.radians(float(half_rng.uniform(-20, 20)))
                    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
                    xy = tuple(np.array(reference.xy) + offset * float(half_rng.uniform(0.95, 1.1)) * (rot @ unit))
                    ok = (
                        half.reachable(xy)
                        and half.free(xy, target.radius_m, fillers)
                        and math.dist(xy, reference.xy) >= target.radius_m + reference.radius_m + 0.003
                    )
                else:  # somewhere the relation clearly does not hold
                    xy = half.point()
                    d = np.array(xy) - np.array(reference.xy)
                    near = (
                        np.linalg.norm(d) <= RELATION_RADIUS_M + 0.02
                        and math.degrees(math.acos(np.clip(d @ unit / max(np.linalg.norm(d), 1e-9), -1, 1))) <= 60
                    )
                    ok = (
                        not near
                        and half.free(xy, target.radius_m, [reference, *fillers])
                        and math.dist(xy, goal) >= target.radius_m * 2 + self.ws.gap_m
                        and self.paths_ok([], [(xy, goal)])
                    )
                if ok:
                    return float(xy[0]), float(xy[1])
            return None

        # the two halves of a control pair share the reference, the fillers and the goal (the pair's stream) and
        # differ only in where the target stands (a stream per half); a layout is kept only when both halves fit
        pair = self.seed - self.seed % 2
        halves = (
            [(np.random.default_rng([pair + h, 11]), h == 0) for h in (0, 1)]
            if condition == "relational_control"
            else [(rng, holds)]
        )
        mine = self.seed % 2 if condition == "relational_control" else 0
        for _ in range(MAX_DRAWS):
            if not drawer.place_all([reference, *fillers]):
                continue
            goal = tuple(np.array(reference.xy) + offset * unit)
            if not (drawer.reachable(goal) and drawer.free(goal, target.radius_m, fillers)) or not self.paths_ok(
                [reference, *fillers]
            ):
                continue
            found = [target_xy(half_rng, h_holds) for half_rng, h_holds in halves]
            if all(
                xy is not None and self.in_view([_Placed(**{**vars(target), "xy": xy}), reference, *fillers])
                for xy in found
            ):
                target.xy = found[mine]  # type: ignore[assignment]
                target.yaw_deg = float(halves[mine][0].uniform(-30, 30)) if target.kind == "box" else 0.0
                break
        else:
            raise GenerationError(
                f"{self.task}/{condition}/{self.seed}: no layout within the {self.robot}'s reach in {MAX_DRAWS} draws"
            )
        spec = TrialSpec(
            target=target.id,
            reference=reference.id,
            direction=concept,
            direction_xy=self.dirs[concept],
            distractors=tuple(f.id for f in fillers),
        )
        words = dict(target=self.name(target), reference=self.name(reference), relation=RELATION_WORDS[concept])
        rule = (
            f"the {self.name(target)} ends with its centre within 76.2 mm of the {self.name(reference)}'s centre, "
            f"inside the +-45 deg sector {RELATION_WORDS[concept]} it (as seen from the camera)"
        )
        objects = [target, reference, *fillers]
        if holds:
            return _Scene(
                objects,
                spec,
                tuple(t.format(**words) for t in TEMPLATES["relational_placement"]),
                (),
                [],
                [],
                expects_action=False,
                variant="relation_holds",
                cell=MatrixCell(concept, target_id),
                success_rule="the relation already holds: nothing moves more than 2 cm and nothing is grasped",
            )
        plan = [
            PlanStepSpec("grasp", object=target.id),
            PlanStepSpec("place", target=reference.id, offset_m=(float(offset * unit[0]), float(offset * unit[1]))),
        ]
        success = [
            PredicateSpec(
                "beside", target.id, reference.id, distance_m=RELATION_RADIUS_M, direction_xy=self.dirs[concept]
            )
        ]
        return _Scene(
            objects,
            spec,
            tuple(t.format(**words) for t in TEMPLATES["relational_placement"]),
            tuple(
                t.format(target=self.name(target), reference=self.name(reference), side=SIDE_WORDS[concept])
                for t in DIRECT_TEMPLATES["relational_placement"]
            ),
            plan,
            success,
            success_rule=rule,
            cell=MatrixCell(concept, target_id),
            variant="needs_correction" if condition == "relational_control" else "",
        )

    def ordinal_position(self, rng, condition: str) -> _Scene:
        bowl = self.bowl()
        if condition == "no_intervention":
            n = 3  # Table IX's invalid ordinal: the fourth of a row of three
            concept, side = "fourth", str(rng.choice(["left", "right"]))
            argument = f"from_{side}_{n}"
        else:
            concept, argument = self.cell_or_cross(rng, condition)
            _, side, n_text = argument.split("_")
            n = int(n_text)
        family = str(rng.choice(self.matrix.cross_task)) if condition == "cross_task_object" else "block"
        members = (
            [self.obj(i) for i in self.others(rng, family, set(), n, sizes=("medium",))]
            if len([i for i in self.inv.of_family(family) if i.size == "medium"]) >= n
            else [self.obj(i) for i in self.others(rng, family, set(), n)]
        )
        objects = [bowl, *members]
        min_sep = 0.5 * RELATION_RADIUS_M * self.ws.scale  # neighbours differ this much along the image's x (m)

        def ordered(objs) -> bool:
            along = sorted(float(np.dot(m.xy, self.right_xy)) for m in members)
            return all(b - a >= min_sep for a, b in zip(along, along[1:]))

        self.layout(rng, objects, ordered)
        row = sorted(members, key=lambda m: float(np.dot(m.xy, self.right_xy)))
        if side == "right":
            row = row[::-1]
        words = dict(ordinal=ORDINAL_WORDS[concept], side=side, noun=self.noun(family))
        instructions = tuple(t.format(**words) for t in TEMPLATES["ordinal_position"])
        k = TASK_CONCEPTS["ordinal_position"].index(concept)
        if k >= n:
            return _Scene(
                objects,
                TrialSpec(
                    receptacle=bowl.id, receptacle_radius_m=bowl.size_m[0], distractors=tuple(m.id for m in members)
                ),
                instructions,
                (),
                [],
                [],
                expects_action=False,
                variant="invalid_ordinal",
                success_rule=f"there is no {concept} {self.noun(family)} of {n}: nothing moves more than "
                f"2 cm and nothing is grasped",
            )
        target = row[k]
        plan, success = self.in_bowl_plan(target, bowl)
        return _Scene(
            objects,
            TrialSpec(
                target=target.id,
                receptacle=bowl.id,
                receptacle_radius_m=bowl.size_m[0],
                distractors=tuple(m.id for m in members if m is not target),
            ),
            instructions,
            tuple(t.format(target=self.name(target)) for t in DIRECT_TEMPLATES["in_bowl"]),
            plan,
            success,
            success_rule=self.in_bowl_rule(f"{concept} {self.noun(family)} from the {side} ({self.name(target)})"),
            cell=MatrixCell(concept, argument),
        )

    def counting(self, rng, condition: str) -> _Scene:
        bowl = self.bowl()
        concept, family = self.cell_or_cross(rng, condition)
        count = COUNT_WORDS[concept]
        if condition == "no_intervention":
            count = int(rng.integers(1, 3))
            concept = NUMBER_WORDS[count]
            already = count
        else:
            already = int(rng.integers(0, count)) if count > 1 else 0
        n_loose = (count - already) + 1 + (int(rng.integers(2)) if self.ws.fillers else 0)
        ids = self.others(rng, family, set(), already + n_loose)
        members = [self.obj(i) for i in ids]
        floor_r = bowl.size_m[0] - bowl.size_m[1] * math.tan(math.radians(30))
        spots = _bowl_spots(count, floor_r, float(rng.uniform(0, 2 * math.pi)))
        for m, spot in zip(members[:already], spots):
            m.inside, m.xy = bowl.id, spot
        loose = members[already:]
        objects = [bowl, *members]
        drawer = _Drawer(self.ws, rng)
        self.layout(
            rng, objects, lambda objs: all(drawer.reachable((bowl.xy[0] + dx, bowl.xy[1] + dy)) for dx, dy in spots)
        )
        noun = self.noun(family)
        words = dict(number=NUMBER_WORDS[count], nouns=noun + ("s" if count != 1 else ""))
        instructions = tuple(t.format(**words) for t in TEMPLATES["counting"])
        spec = TrialSpec(
            receptacle=bowl.id,
            receptacle_radius_m=bowl.size_m[0],
            count=count,
            distractors=tuple(m.id for m in members),
        )
        rule = f"exactly {count} {words['nouns']} end inside the bowl's rim"
        if already == count:
            return _Scene(
                objects,
                spec,
                instructions,
                (),
                [],
                [],
                expects_action=False,
                variant="goal_holds",
                success_rule=f"the bowl already holds {count}: nothing moves more than 2 cm and nothing is grasped",
            )
        movers = loose[: count - already]
        plan: list[PlanStepSpec] = []
        for m, spot in zip(movers, spots[already:]):
            plan += [
                PlanStepSpec("grasp", object=m.id),
                PlanStepSpec("place", target=bowl.id, offset_m=tuple(float(v) for v in np.array(spot))),
            ]  # type: ignore[arg-type]
        success = [PredicateSpec("inside", m.id, bowl.id) for m in members[:already] + movers]
        names = [self.name(m) for m in movers]
        targets = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and the " + names[-1]
        return _Scene(
            objects,
            spec,
            instructions,
            tuple(t.format(targets=targets) for t in DIRECT_TEMPLATES["counting"]),
            plan,
            success,
            success_rule=rule,
            cell=MatrixCell(concept, family),
        )


def _image_box(obj: "_Placed", position_m, look_at_m, fy_px: float) -> tuple[float, float, float, float, float]:
    """Where an object standing on the table shows in a pinhole camera at ``position_m`` looking at ``look_at_m``:
    (u0, v0, u1, v1) in pixels from the optical axis around its bounding cylinder's corners, and its distance (m)."""
    x_opt, y_opt, z_opt = camera_axes(position_m, look_at_m)
    r, h = obj.radius_m, obj.height_m
    corners = np.array(
        [(obj.xy[0] + dx, obj.xy[1] + dy, z) for dx in (-r, r) for dy in (-r, r) for z in (0.0, h)]
    ) - np.asarray(position_m, float)
    depth = corners @ z_opt
    u, v = fy_px * (corners @ x_opt) / depth, fy_px * (corners @ y_opt) / depth
    centre = np.array([obj.xy[0], obj.xy[1], h / 2]) - np.asarray(position_m, float)
    return float(u.min()), float(v.min()), float(u.max()), float(v.max()), float(np.linalg.norm(centre))


def _segment_distance_to_origin(a, b) -> float:
    """Distance (m) from the base's axis to the segment a-b in the table plane."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = b - a
    t = 0.0 if float(d @ d) == 0 else float(np.clip(-(a @ d) / (d @ d), 0.0, 1.0))
    return float(np.linalg.norm(a + t * d))


def _bowl_spots(count: int, floor_radius_m: float, phase: float) -> list[tuple[float, float]]:
    """Offsets (x, y) from a bowl's centre where ``count`` objects sit side by side on its floor."""
    if count <= 1:
        return [(0.0, 0.0)]
    rho = 0.46 * floor_radius_m
    return [
        (rho * math.cos(phase + 2 * math.pi * k / count), rho * math.sin(phase + 2 * math.pi * k / count))
        for k in range(count)
    ]


_STREAMS = {
    "id": 1,
    "ood": 2,
    "direct": 2,
    "paraphrase": 2,
    "cross_task_object": 3,
    "no_intervention": 4,
    "relational_control": 5,
}


def generate_trial(task: str, condition: str, seed: int, robot: str = "so101") -> Trial:
    """One trial of ``task`` under ``condition`` drawn from ``seed`` for ``robot`` (``so101`` | ``gp5`` | ``fr3``).

    The same arguments give the same trial. Raises :class:`~grounded_planner.spabench.errors.SpaBenchError` for
    unknown names or a condition the task does not have (``TASK_CONDITIONS``), and
    :class:`~grounded_planner.spabench.errors.GenerationError` naming the task and seed when no scene fits the
    robot's reach in a bounded number of draws.
    """
    check_name(task, TASKS, "task")
    check_name(condition, CONDITIONS, "condition")
    check_name(robot, ROBOTS, "robot")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise GenerationError(f"{task}/{condition}/{seed}: the seed must be an integer >= 0")
    seed = int(seed)
    if condition not in TASK_CONDITIONS[task]:
        raise GenerationError(
            f"task {task!r} has no condition {condition!r} (it has {', '.join(TASK_CONDITIONS[task])})"
        )
    inventory, matrices = _config()
    builder = _Builder(task, condition, seed, robot, inventory, matrices)
    # one stream per (task, scene group, seed): ood, direct and paraphrase of a seed draw the same scene, and the two
    # halves of a relational-control pair the same objects
    scene_seed = seed // 2 if condition == "relational_control" else seed
    rng = np.random.default_rng([TASKS.index(task), _STREAMS[condition], scene_seed])
    # a crowded draw (which objects, how many already in the bowl) may leave no layout: draw the scene again from the
    # same stream, a bounded number of times (deterministic: the same trial every time)
    for attempt in range(SCENE_ATTEMPTS):
        try:
            scene: _Scene = getattr(builder, task)(rng, condition)
            break
        except GenerationError as exc:
            if attempt == SCENE_ATTEMPTS - 1:
                tid = f"{task}/{condition}/{seed}"
                raise (exc if str(exc).startswith(tid) else GenerationError(f"{tid}: {exc}")) from None
    instruction = _pick_instruction(scene, condition, seed, rng)
    ws = WORKSPACES[robot]
    scenario = _scenario(task, condition, seed, robot, scene, instruction, ws)
    objects = [
        TrialObject(
            id=o.id,
            family=o.inst.family,
            name=inventory.name(o.id),
            colour=o.inst.colour,
            size_m=o.size_m,
            state=o.state or None,
            position_m=(o.xy[0], o.xy[1], _bottom_z(o, scene.objects) + o.height_m / 2),
            yaw_deg=o.yaw_deg,
        )
        for o in scene.objects
    ]
    return Trial(
        task=task,
        condition=condition,
        seed=seed,
        robot=robot,
        instruction=instruction,
        spec=scene.spec,
        expects_action=scene.expects_action,
        scenario=scenario,
        objects=objects,
        pair_id=pair_id(task, condition, seed),
        cell=scene.cell
        if condition in ("id", "ood", "direct", "paraphrase", "cross_task_object", "relational_control")
        else None,
        success_rule=scene.success_rule,
        variant=scene.variant,
    )


def _pick_instruction(scene: _Scene, condition: str, seed: int, rng: np.random.Generator) -> str:
    if condition == "direct":
        return scene.direct[0]
    if condition == "paraphrase":
        wordings = scene.instructions if paraphrase_original(seed) == "ood" else scene.direct
        return wordings[1 + int(rng.integers(len(wordings) - 1))]
    return scene.instructions[0]


def _bottom_z(obj: _Placed, objects: list[_Placed]) -> float:
    if not obj.inside:
        return 0.0
    host = next(o for o in objects if o.id == obj.inside)
    return CONTAINER_FLOOR_M[host.kind]


def _scenario(
    task: str, condition: str, seed: int, robot: str, scene: _Scene, instruction: str, ws: Workspace
) -> Scenario:
    objects = [
        ObjectSpec(
            id=o.id,
            kind=o.kind,
            name=o.name,
            size_m=o.size_m,
            position_m=o.xy,
            yaw_deg=o.yaw_deg,
            color=parse_color(o.inst.colour, f"inventory colour of {o.id}"),
            # a bowl heavy enough that a jaw brushing its rim does not tip it (as box_in_bowl_so101's)
            mass_kg=0.3 if o.kind == "bowl" else round(_MASS[o.kind] * ws.mass_scale, 4),
            state=o.state if o.kind in ("cup", "box") and o.state else "",
            inside=o.inside,
        )
        for o in scene.objects
    ]
    camera = CameraSpec(position_m=ws.camera_position_m, look_at_m=ws.camera_look_at_m)
    return Scenario(
        name=f"spabench_{task}_{condition}_{seed}",
        instruction=instruction,
        instruction_type="explicit",
        objects=objects,
        plan=scene.plan,
        success=scene.success,
        camera=camera,
        robot=robot,
        source=f"spabench {task}/{condition}/{seed} ({robot})",
    )


__all__ = ["MAX_DRAWS", "WORKSPACES", "Workspace", "generate_trial"]
