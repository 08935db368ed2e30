"""One demonstration episode as the V2GP stages see it (any dataset format), and the known objects of a simulated one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grounded_planner.v2gp.errors import DatasetError


@dataclass
class ObjectTrack:
    """Known object of a simulated episode: name, category, kind and its box in every frame (pixels)."""

    name: str
    category: str
    kind: str  # "rigid" (can be picked up), "articulated" (opens/closes: box of the handle), "fixture"
    boxes_px: np.ndarray  # (T, 4) x1, y1, x2, y2 per frame
    openness: np.ndarray | None = None  # (T,) 0 closed .. 1 open, articulated objects only

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ObjectTrack":
        boxes = np.asarray(data["boxes_px"], dtype=float)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise DatasetError(f"object {data.get('name')!r}: boxes_px must be (T, 4), got shape {boxes.shape}")
        openness = data.get("openness")
        return cls(
            name=str(data["name"]),
            category=str(data.get("category") or data["name"]),
            kind=str(data.get("kind", "rigid")),
            boxes_px=boxes,
            openness=None if openness is None else np.asarray(openness, dtype=float),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "category": self.category,
            "kind": self.kind,
            "boxes_px": np.round(self.boxes_px, 2).tolist(),
        }
        if self.openness is not None:
            out["openness"] = np.round(self.openness, 4).tolist()
        return out


@dataclass
class GripperTrace:
    """One gripper's signal in an episode (several on a two-armed robot or a humanoid with two hands)."""

    hand: str  # "" for the only gripper; "left", "right", ... otherwise
    label: str  # where it was read: observation.state[gripper.pos]
    values: np.ndarray  # (T,) raw readings, NaN = missing
    commanded: np.ndarray | None = None  # (T,) the commanded gripper in the same units, None when there is none


@dataclass
class DemoEpisode:
    """One demonstration: instruction, gripper signal, frames of one camera, optional known objects."""

    index: int
    instruction: str
    fps: float
    gripper: np.ndarray  # (T,) raw gripper readings, NaN = missing
    frame_indices: np.ndarray  # (T,) frame numbers within the episode
    source: str  # where it came from (dataset path + episode)
    camera: str
    _reader: Any = field(repr=False, default=None)
    objects: list[ObjectTrack] | None = None
    # (T,) the commanded gripper in the same raw units (the dataset's ``action``), None when there is none
    commanded: np.ndarray | None = None
    # every gripper of the robot (the first is ``gripper``/``commanded``); None: the one above only
    grippers: list[GripperTrace] | None = None

    @property
    def length(self) -> int:
        return int(self.gripper.size)

    def frame(self, i: int) -> np.ndarray:
        """RGB frame ``i`` (row index within the episode) as (H, W, 3) uint8."""
        if not 0 <= i < self.length:
            raise DatasetError(f"{self.source}: frame {i} outside 0..{self.length - 1}")
        return self._reader(i)
