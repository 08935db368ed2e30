"""Ground truth from the simulator: exact grounded plans (boxes from the renderer's segmentation) and bench episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from grounded_planner.fileio import write_jsonl_atomic
from grounded_planner.plan.model import GroundedAction, GroundedPlan
from grounded_planner.sim.scenario import ScenarioError
from grounded_planner.sim.scene import HANDLE_HALF_THICKNESS_M
import math
from grounded_planner.geometry.targets import Target, TargetSet
from grounded_planner.geometry.transforms import fold_half_turn
from grounded_planner.sim.workcell import BASE_FRAME, SimWorkcell
from PIL import Image

# An object covering fewer pixels than this is too occluded or too small to carry a ground-truth box.
MIN_VISIBLE_PX = 40


def mask_bbox(mask: np.ndarray) -> tuple[float, float, float, float] | None:
    """Tight box [x1, y1, x2, y2] in pixels around a (H, W) bool mask (pixel edges: x2 = last column + 1)."""
    ys, xs = np.nonzero(mask)
    if xs.size == 0:
        return None
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)


def place_point_base(workcell, target_id: str, offset_m=(0.0, 0.0)) -> np.ndarray:
    """The 3D point (base frame, m) a place on ``target_id`` aims at: the inner bottom centre of a container,
    the top centre of a plate, box or cabinet; moved by ``offset_m`` (x, y) in the table plane, on the same surface
    while the point stays over the target's footprint (a spot of a bowl's floor), else on the table beside it."""
    spec = workcell.scenario.object(target_id)
    lo, hi = workcell.body_aabb(f"obj:{target_id}")
    centre = 0.5 * (lo + hi)
    x, y = centre[0] + float(offset_m[0]), centre[1] + float(offset_m[1])
    if math.hypot(*offset_m) > spec.footprint_radius_m:
        return np.array([x, y, 0.0])  # the table top
    if spec.kind in ("bowl", "cup"):
        return np.array([x, y, lo[2] + 0.006])
    return np.array([x, y, hi[2]])


def gt_plan(workcell, segmentation: np.ndarray | None = None) -> GroundedPlan:
    """The scenario's plan grounded in the current camera view.

    Grasp/open/close boxes are the visible pixels of the object (a drawer's own parts for open/close); a place
    carries the target's box as its region and, as its point, the projection of :func:`place_point_base`.
    Raises :class:`ScenarioError` when an object of the plan is not visible enough to be boxed.
    """
    scenario = workcell.scenario
    masks = workcell.object_masks(segmentation)
    cam = scenario.camera

    def box_of(key: str, what: str) -> tuple[float, float, float, float]:
        mask = masks.get(key)
        count = int(mask.sum()) if mask is not None else 0
        if count < MIN_VISIBLE_PX:
            raise ScenarioError(
                f"{scenario.source or scenario.name}: {what} {key!r} shows only {count} pixels "
                f"from the camera (need {MIN_VISIBLE_PX}); move the object or the camera"
            )
        return mask_bbox(mask)  # type: ignore[return-value]

    actions = []
    for i, step in enumerate(scenario.plan):
        if step.type == "grasp":
            actions.append(
                GroundedAction(
                    "grasp", object=scenario.object(step.object).name, bbox=box_of(step.object, f"plan[{i}] object")
                )
            )
        elif step.type == "place":
            # plan coordinates are continuous (the image spans [0, W]): camera pixel centres sit at +0.5
            u, v = workcell.project(place_point_base(workcell, step.target, step.offset_m)[None])[0] + 0.5
            target = scenario.object(step.target)
            if math.hypot(*step.offset_m) > target.footprint_radius_m:
                # on the table beside the target: a point with no region of its own
                if not (0 <= u <= cam.width and 0 <= v <= cam.height):
                    raise ScenarioError(
                        f"{scenario.source or scenario.name}: plan[{i}]: the place point beside "
                        f"{step.target!r} lies outside the image (projects to {u:.0f}, {v:.0f})"
                    )
                actions.append(
                    GroundedAction("place", target=f"the table beside the {target.name}", point=(float(u), float(v)))
                )
                continue
            bbox = box_of(step.target, f"plan[{i}] target")
            if not (bbox[0] <= u <= bbox[2] and bbox[1] <= v <= bbox[3]):
                raise ScenarioError(
                    f"{scenario.source or scenario.name}: plan[{i}]: the place point of "
                    f"{step.target!r} is hidden from the camera (projects to {u:.0f}, {v:.0f})"
                )
            actions.append(GroundedAction("place", target=target.name, bbox=bbox, point=(float(u), float(v))))
        else:
            actions.append(
                GroundedAction(
                    step.type,
                    object=scenario.object(step.object).name,
                    bbox=box_of(f"{step.object}:drawer", f"plan[{i}] drawer of"),
                )
            )
    # an empty plan is the scenario's answer that nothing is to be done (its goal already holds, or the instruction
    # names nothing the scene has); a plan says why it is empty
    reason = "" if actions else "nothing to do: the goal already holds or nothing in the scene fits the instruction"
    return GroundedPlan(
        instruction=scenario.instruction,
        image_size=(cam.width, cam.height),
        actions=actions,
        model="sim-ground-truth",
        reason=reason,
    ).validate()


def gt_targets(workcell, plan: GroundedPlan | None = None):
    """Exact 3D targets of the scenario's plan from the simulator state, as a geometry-layer ``TargetSet``
    in the base frame (what ``compute_targets`` estimates from depth; conventions as in ``geometry.targets``).

    grasp: centre of the object's top face, ``yaw`` the closing direction (the footprint's minor axis, angle
    from base x), ``width`` the extent along it; place: :func:`place_point_base`; open/close: the top of the
    drawer handle with ``normal`` the direction the drawer slides out (pull along +normal).
    """

    scenario = workcell.scenario
    plan = plan or gt_plan(workcell)
    up = np.array([0.0, 0.0, 1.0])
    targets = []
    for i, (step, action) in enumerate(zip(scenario.plan, plan.actions)):
        name = action.object or action.target
        if step.type == "grasp":
            spec = scenario.object(step.object)
            lo, hi = workcell.body_aabb(f"obj:{step.object}")
            _, rot = workcell.object_pose(step.object)
            yaw = math.atan2(rot[1, 0], rot[0, 0])  # the object's local x axis
            if spec.kind == "box":
                width = min(spec.size_m[0], spec.size_m[1])
                if spec.size_m[1] < spec.size_m[0]:
                    yaw += math.pi / 2  # close along the shorter side
            else:  # round: any direction, the diameter
                width = 2 * spec.size_m[0]
            yaw = fold_half_turn(yaw)  # a Target's yaw convention, as geometry's
            position = np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, hi[2]])
            targets.append(Target(i, "grasp", name, position, yaw, float(width), up.copy(), "sim_ground_truth", 1.0))
        elif step.type == "place":
            targets.append(
                Target(
                    i,
                    "place",
                    name,
                    place_point_base(workcell, step.target, step.offset_m),
                    None,
                    None,
                    up.copy(),
                    "sim_ground_truth",
                    1.0,
                )
            )
        else:
            _, rot = workcell.object_pose(step.object)
            # the top of the handle bar: what a camera looking down sees, as for a grasp's top face
            handle_top = workcell.grasp_point(step.object) + [0.0, 0.0, HANDLE_HALF_THICKNESS_M]
            targets.append(
                Target(i, step.type, name, handle_top, None, None, -rot[:, 0].copy(), "sim_ground_truth", 1.0)
            )
    return TargetSet(BASE_FRAME, targets, [])


def episode_record(workcell, episode_id: str, image_rel: str, plan: GroundedPlan) -> dict:
    """A bench episode (see ``grounded_planner.bench.episodes``) for a GT plan; places carry their target box."""
    actions = []
    for a in plan.actions:
        d: dict = {"type": a.type}
        if a.type == "place":
            d["target"] = a.target
        else:
            d["object"] = a.object
        if a.bbox is not None:  # a place on the table beside a target has a point only
            d["bbox"] = [round(float(v), 2) for v in a.bbox]
        actions.append(d)
    s = workcell.scenario
    return {
        "id": episode_id,
        "image": image_rel,
        "instruction": s.instruction,
        "instruction_type": s.instruction_type,
        "actions": actions,
        "unordered": [list(b) for b in s.unordered],
        # not part of the bench format (readers ignore it): where the frame came from and the plan with points
        "sim": {"scenario": s.name, "seed": workcell.seed, "plan": plan.to_dict()},
    }


def export_episodes(
    scenario_paths: Iterable[str | Path], out_dir: str | Path, seeds: Iterable[int] = (0,), write_depth: bool = True
) -> list[dict]:
    """Render the first frame of every scenario x seed and write ``out_dir/episodes.jsonl`` with
    ``images/<id>.png`` (and ``depth/<id>.png``, uint16 mm, plus the true ``calibration/<id>/`` files), and
    ``gt_predictions.jsonl``: the exact plans in the predictions format.

    Returns the episode records in the order written.
    """

    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    records = []
    seeds = list(seeds)
    for path in scenario_paths:
        for seed in seeds:
            with SimWorkcell.from_scenario(path, seed=seed) as workcell:
                episode_id = f"{workcell.scenario.name}-s{seed:03d}"
                rgb, depth_m = workcell.render()
                plan = gt_plan(workcell)
                Image.fromarray(rgb).save(out / "images" / f"{episode_id}.png")
                record = episode_record(workcell, episode_id, f"images/{episode_id}.png", plan)
                if write_depth:
                    (out / "depth").mkdir(exist_ok=True)
                    Image.fromarray(np.round(depth_m * 1000).astype(np.uint16)).save(
                        out / "depth" / f"{episode_id}.png"
                    )
                    ext, info = workcell.write_calibration(out / "calibration" / episode_id)
                    record["sim"].update(
                        {
                            "depth": f"depth/{episode_id}.png",
                            "extrinsics": ext.relative_to(out).as_posix(),
                            "camera_info": info.relative_to(out).as_posix(),
                        }
                    )
                records.append(record)
    _write_jsonl(out / "episodes.jsonl", records)
    # the exact plans as a predictions file: `bench score` on it must give TSR 100 (a check of the whole chain)
    _write_jsonl(
        out / "gt_predictions.jsonl", [{"id": r["id"], "plan": r["sim"]["plan"], "error": ""} for r in records]
    )
    return records


def _write_jsonl(path: Path, records: list[dict]) -> None:
    write_jsonl_atomic(path, records)
