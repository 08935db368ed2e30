"""V2GP stage 2: name the manipulated object of each segment (grounded description + category) from keyframes."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.v2gp.dataset import DemoEpisode, ObjectTrack
from grounded_planner.v2gp.segment import Segment
from grounded_planner.vlm.parse import strip_thinking

INTERACTIONS = ("pick_place", "open", "close")


@dataclass
class ObjectIdentity:
    """What a segment manipulates, as the identifier saw it."""

    object: str  # visually grounded description, e.g. "red block on the left"
    category: str  # semantic category, e.g. "block"
    interaction: str  # pick_place | open | close
    target: str = ""  # where a picked object ends up ("" if unknown or articulated)
    source: str = ""  # "vlm" or "oracle"
    raw_response: str = ""  # the VLM's answer, kept for audits

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ObjectIdentity":
        return cls(
            **{k: data.get(k, "") for k in ("object", "category", "interaction", "target", "source", "raw_response")}
        )


class IdentifyError(InputError):
    """The identifier's answer cannot be read (names the segment and the answer)."""


def keyframe_indices(segment: Segment, n: int, length: int) -> list[int]:
    """``n`` row indices spread from the segment's start to its end (inclusive), inside the episode."""
    start, end = max(0, segment.start), min(length - 1, segment.end)
    return sorted({int(round(start + (end - start) * k / (n - 1))) for k in range(n)})


def keyframe_strip(episode: DemoEpisode, segment: Segment, n: int) -> np.ndarray:
    """The segment's keyframes side by side, left to right in time, separated by 4 px white bars.

    Returns
    -------
    ndarray, shape (H, n * W + 4 * (n - 1), 3), uint8
    """
    frames = [episode.frame(i) for i in keyframe_indices(segment, n, episode.length)]
    h = frames[0].shape[0]
    bar = np.full((h, 4, 3), 255, dtype=np.uint8)
    parts: list[np.ndarray] = []
    for k, frame in enumerate(frames):
        if k:
            parts.append(bar)
        parts.append(frame)
    return np.concatenate(parts, axis=1)


def identify_prompt(instruction: str, n_frames: int) -> str:
    """The stage-2 question: which object does the gripper manipulate in these keyframes."""
    return (
        f"The image shows {n_frames} keyframes of one robot manipulation step side by side, left to right in "
        "time: the first just before the gripper closes, the last just after it opens again. "
        f'The whole demonstration\'s task was: "{instruction}".\n'
        "Which object does the robot gripper manipulate in this step? Describe it so that it can be found in "
        "the first keyframe (colour, shape, position), give its category, say whether it is picked and placed "
        "or an articulated part that is opened or closed, and where it ends up.\n"
        'Answer with JSON only: {"object": "<description>", "category": "<one word>", '
        '"interaction": "pick_place" | "open" | "close", "target": "<where it is put, or empty>"}'
    )


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in free text (prose, code fences around it), or None."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch == "{":
            try:
                value, _ = decoder.raw_decode(text[i:])
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def parse_identity(text: str) -> ObjectIdentity:
    """Read the identifier's JSON answer (reasoning blocks and code fences allowed)."""

    body, _ = strip_thinking(text)
    data = first_json_object(body)
    if data is None:
        raise IdentifyError(f"the answer has no JSON object: {text[:200]!r}")
    data = {str(k).lower(): v for k, v in data.items()}
    obj = str(data.get("object") or data.get("description") or "").strip()
    if not obj:
        raise IdentifyError(f"the answer names no object: {text[:200]!r}")
    interaction = str(data.get("interaction") or "pick_place").strip().lower().replace("-", "_").replace(" ", "_")
    if interaction in ("pick", "place", "pickplace", "pick_and_place", "grasp"):
        interaction = "pick_place"
    if interaction not in INTERACTIONS:
        raise IdentifyError(f"interaction must be one of {', '.join(INTERACTIONS)}, got {interaction!r}")
    category = str(data.get("category") or obj.split()[-1]).strip()
    return ObjectIdentity(
        object=obj,
        category=category,
        interaction=interaction,
        target=str(data.get("target") or "").strip(),
        source="vlm",
        raw_response=text,
    )


def identify_with_vlm(planner, episode: DemoEpisode, segment: Segment, n_keyframes: int) -> ObjectIdentity:
    """Ask the VLM (``Planner.ask``) about the segment's keyframe strip."""
    strip = keyframe_strip(episode, segment, n_keyframes)
    answer = planner.ask(strip, identify_prompt(episode.instruction, n_keyframes))
    return parse_identity(answer)


def _center(box: Sequence[float]) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0])


def moved_object(
    objects: Sequence[ObjectTrack], segment: Segment, frame_indices: np.ndarray
) -> tuple[ObjectTrack | None, float]:
    """The known object that moved most from the segment's start to its end, and how far (pixels)."""
    rows = {int(f): r for r, f in enumerate(frame_indices)}
    a, b = rows.get(segment.start, 0), rows.get(segment.end, len(frame_indices) - 1)
    best, best_d = None, 0.0
    for track in objects:
        if track.kind == "fixture":
            continue
        d = float(np.linalg.norm(_center(track.boxes_px[b]) - _center(track.boxes_px[a])))
        if d > best_d:
            best, best_d = track, d
    return best, best_d


def identify_with_oracle(episode: DemoEpisode, segment: Segment) -> ObjectIdentity:
    """Simulated data: the known object that moved during the segment (or the one nearest the closing point)."""
    if not episode.objects:
        raise IdentifyError(f"{episode.source}: the oracle identifier needs known objects (meta/v2gp_objects.jsonl)")
    track, dist = moved_object(episode.objects, segment, episode.frame_indices)
    if track is None or dist < 1.0:
        return ObjectIdentity(object="", category="", interaction="pick_place", source="oracle")
    interaction = "pick_place"
    if track.kind == "articulated" and track.openness is not None:
        rows = {int(f): r for r, f in enumerate(episode.frame_indices)}
        a, b = rows.get(segment.start, 0), rows.get(segment.end, episode.length - 1)
        interaction = "open" if track.openness[b] > track.openness[a] else "close"
    return ObjectIdentity(object=track.name, category=track.category, interaction=interaction, source="oracle")


def name_similarity(a: str, b: str) -> float:
    """Word overlap of two object names (0..1): how the oracle matches a VLM description to a known object."""
    wa, wb = set(a.lower().replace(",", " ").split()), set(b.lower().replace(",", " ").split())
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / math.sqrt(len(wa) * len(wb))
