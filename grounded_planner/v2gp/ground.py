"""V2GP stage 3: grasp box in the episode's first frame and place point (where the object ends up).

Grounders:

* ``oracle`` — simulated data with known per-frame boxes (``meta/v2gp_objects.jsonl``): the identified
  object is matched to a known one by name; its first-frame box is the grasp (or handle) box and the centre
  of its box at the segment's end is the place point. It also checks identity (the named object is the
  one that moved) and motion (a picked object that did not move was an empty grasp).
* ``vlm`` — asks the VLM (``Planner.ask`` with the vlm layer's grounding prompt) for the object's box in
  the first frame and a point on it in the segment's last frame.
* ``sam3`` — SAM 3 through transformers from a local checkpoint folder (``sam3_model``): the best
  instance of the text cue (description, then category); needs torchvision for its image processor.

The place point is measured in the segment's end frame and used as is in the first frame: this assumes a
static third-person camera (the DROID exterior cameras, a fixed workcell camera). Wrist cameras need a
homography per frame, which is not done.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.v2gp.dataset import DemoEpisode, ObjectTrack
from grounded_planner.v2gp.errors import MissingDependencyError, V2GPError, require
from grounded_planner.v2gp.identify import ObjectIdentity, moved_object, name_similarity
from grounded_planner.v2gp.segment import Segment
from grounded_planner.vlm import prompts
from grounded_planner.vlm.image import resized_size
from grounded_planner.vlm.parse import ParseError, parse_location
from grounded_planner.vlm.backends.transformers import pick_device
from PIL import Image


@dataclass
class Grounding:
    """Where a segment acts, in pixels of the episode's first frame."""

    bbox_px: list[float] | None = None  # x1, y1, x2, y2 of the object (or handle) in the first frame
    point_px: list[float] | None = None  # x, y where a picked object ends up (None for open/close)
    target: str = ""  # name of what it was put on, when known
    moved_px: float | None = None  # how far the object moved during the segment (None: unknown)
    identity: str = "unknown"  # consistent | mismatch | unknown (the named object is the one that moved)
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Grounding":
        return cls(**data)


def _rows(episode: DemoEpisode, segment: Segment) -> tuple[int, int]:
    rows = {int(f): r for r, f in enumerate(episode.frame_indices)}
    return rows.get(segment.start, 0), rows.get(segment.end, episode.length - 1)


def _center(box) -> list[float]:
    return [float((box[0] + box[2]) / 2.0), float((box[1] + box[3]) / 2.0)]


def _contains(box, point) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


class OracleGrounder:
    """Known boxes of simulated data (see the module docstring)."""

    name = "oracle"

    def ground(self, episode: DemoEpisode, segment: Segment, identity: ObjectIdentity) -> Grounding:
        if not episode.objects:
            return Grounding(source=self.name, notes=["no known objects in this episode (meta/v2gp_objects.jsonl)"])
        a, b = _rows(episode, segment)
        moved, moved_dist = moved_object(episode.objects, segment, episode.frame_indices)
        track = self._match(episode.objects, identity)
        out = Grounding(source=self.name)
        if track is None:
            out.notes.append(f"no known object matches {identity.object!r}")
            out.identity = "mismatch" if moved is not None and moved_dist >= 1.0 else "unknown"
            return out
        out.bbox_px = [float(v) for v in track.boxes_px[0]]
        out.moved_px = float(np.linalg.norm(np.subtract(_center(track.boxes_px[b]), _center(track.boxes_px[a]))))
        if moved is not None and moved_dist >= 1.0:
            out.identity = "consistent" if moved.name == track.name else "mismatch"
            if out.identity == "mismatch":
                out.notes.append(f"{identity.object!r} matched {track.name!r} but {moved.name!r} moved")
        if identity.interaction == "pick_place":
            out.point_px = _center(track.boxes_px[b])
            fixtures = [t for t in episode.objects if t.kind == "fixture" and _contains(t.boxes_px[b], out.point_px)]
            out.target = fixtures[0].name if fixtures else identity.target
        return out

    @staticmethod
    def _match(objects: list[ObjectTrack], identity: ObjectIdentity) -> ObjectTrack | None:
        if not identity.object:
            return None
        scored = [
            (name_similarity(identity.object, t.name) + 0.25 * (identity.category.lower() == t.category.lower()), t)
            for t in objects
            if t.kind != "fixture"
        ]
        scored = [s for s in scored if s[0] > 0.3]
        return max(scored, key=lambda s: s[0])[1] if scored else None


class _TextCueGrounder:
    """Box in the first frame from text cues (the grounded description, then the category, as V2GP prompts
    its grounder), and the place point where the object lies in the segment's last frame."""

    name = ""

    def _box(self, image: np.ndarray, cue: str) -> tuple[list[float] | None, str]:
        """(x1, y1, x2, y2) in pixels of ``image`` or None, and what the model said (for the notes)."""
        raise NotImplementedError

    def _point(self, image: np.ndarray, cue: str) -> tuple[list[float] | None, str]:
        raise NotImplementedError

    def ground(self, episode: DemoEpisode, segment: Segment, identity: ObjectIdentity) -> Grounding:
        out = Grounding(source=self.name)
        if not identity.object:
            out.notes.append("stage 2 named no object")
            return out
        first = episode.frame(0)
        cues = [identity.object] + (
            [identity.category]
            if identity.category and identity.category.lower() not in identity.object.lower()
            else []
        )
        box, answer, cue = None, "", identity.object
        for cue in cues:
            box, answer = self._box(first, cue)
            if box is not None:
                break
            out.notes.append(f"no box for {cue!r}: {answer[:120]!r}")
        if box is None:
            return out
        out.bbox_px = [float(v) for v in box]
        if identity.interaction == "pick_place":
            _, b = _rows(episode, segment)
            point, answer = self._point(episode.frame(b), cue)
            if point is None:
                out.notes.append(f"no point for {cue!r}: {answer[:120]!r}")
            else:
                out.point_px = [float(v) for v in point]
                out.moved_px = float(np.linalg.norm(np.subtract(out.point_px, _center(out.bbox_px))))
            out.target = identity.target
        return out


class VLMGrounder(_TextCueGrounder):
    """Ask the VLM (the vlm layer's grounding prompt) for the box and the point."""

    name = "vlm"

    def __init__(self, planner):
        self.planner = planner

    def _ask(self, image: np.ndarray, kind: str, description: str):
        """The answer read by the vlm layer's own rule (``parse_location``: the family's keys and coordinate
        convention, the size the model saw), so a grounding answer means the same here as in the planner."""
        family = self.planner.config.family
        h, w = image.shape[:2]
        sent = resized_size(w, h, self.planner.config.max_image_side)
        answer = self.planner.ask(image, prompts.grounding_prompt(family, kind, description, *sent))
        seen = self.planner.backend.seen_size(sent) if self.planner.backend is not None else sent
        try:
            coords, _ = parse_location(answer, (w, h), kind, family, model_image_size=seen)
        except ParseError:
            return None, answer
        return [float(v) for v in coords], answer

    def _box(self, image, cue):
        return self._ask(image, "box", cue)

    def _point(self, image, cue):
        return self._ask(image, "point", cue)


class Sam3Grounder(_TextCueGrounder):
    """SAM 3 through transformers (``Sam3Model`` + ``Sam3Processor`` of a local checkpoint folder): the
    highest-scoring instance of the text cue; the place point is the centre of its box in the last frame.
    Its image processor needs torchvision."""

    name = "sam3"

    def __init__(self, model_path: str, threshold: float = 0.3, device: str = "auto"):
        if not model_path:
            raise InputError(
                "the sam3 grounder needs sam3_model: a local folder of a SAM 3 checkpoint "
                "(e.g. facebook/sam3 downloaded with huggingface-cli)"
            )
        self.torch = require("torch", "ml", "the sam3 grounder")
        transformers = require("transformers", "ml", "the sam3 grounder")
        if not hasattr(transformers, "Sam3Model"):
            raise MissingDependencyError(
                f"the sam3 grounder needs a transformers with SAM 3 (have {transformers.__version__})"
            )

        self.device = pick_device(device)
        self.threshold = float(threshold)
        try:
            self.processor = transformers.Sam3Processor.from_pretrained(model_path)
            self.model = transformers.Sam3Model.from_pretrained(model_path).to(self.device).eval()
        except ImportError as exc:
            raise MissingDependencyError(
                f"SAM 3's processor needs torchvision (pip install torchvision matching torch): {exc}"
            ) from exc
        except (OSError, ValueError) as exc:
            raise V2GPError(f"cannot load SAM 3 from {model_path}: {exc}") from exc
        self._lock = threading.Lock()  # episodes run in threads; one forward at a time

    def detect(self, image: np.ndarray, cue: str) -> tuple[list[float], float] | None:
        """Best instance of ``cue``: (x1, y1, x2, y2) in pixels of ``image`` and its score, or None."""

        torch = self.torch
        with self._lock, torch.inference_mode():
            inputs = self.processor(images=Image.fromarray(image), text=cue, return_tensors="pt").to(self.device)
            outputs = self.model(**inputs)
            found = self.processor.post_process_instance_segmentation(
                outputs,
                threshold=self.threshold,
                mask_threshold=0.5,
                target_sizes=[(int(image.shape[0]), int(image.shape[1]))],
            )[0]
        scores = found["scores"]
        if len(scores) == 0:
            return None
        best = int(torch.as_tensor(scores).argmax())
        return [float(v) for v in found["boxes"][best].tolist()], float(scores[best])

    def _box(self, image, cue):
        hit = self.detect(image, cue)
        return (None, f"no instance above score {self.threshold}") if hit is None else (hit[0], f"score {hit[1]:.2f}")

    def _point(self, image, cue):
        box, note = self._box(image, cue)
        return (None, note) if box is None else (_center(box), note)


def make_grounder(name: str, planner=None, sam3_model: str = "", sam3_threshold: float = 0.3):
    """The stage-3 grounder ``name`` (``vlm`` needs a planner, ``sam3`` a checkpoint folder)."""
    if name == "oracle":
        return OracleGrounder()
    if name == "vlm":
        if planner is None:
            raise InputError("the vlm grounder needs a VLM: give --vlm BASE_URL (or vlm_base_url in the config)")
        return VLMGrounder(planner)
    if name == "sam3":
        return Sam3Grounder(sam3_model, sam3_threshold)
    raise InputError(f"unknown grounder {name!r} (expected oracle, vlm or sam3)")
