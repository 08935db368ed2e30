"""The back-projected 3D target of a plan action (position, grasp yaw, width, normal, method, confidence, frame).

A :class:`Target` travels inside its :class:`~grounded_planner.plan.model.GroundedAction` (``action.target_3d``);
a :class:`TargetSet` is the same targets gathered per plan, the ``grounded-planner backproject`` JSON object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from grounded_planner.plan.errors import PlanError


@dataclass(eq=False)
class Target:
    """The 3D target of one plan action, in :attr:`frame`.

    Attributes
    ----------
    index : int
        Index of the action in ``plan.actions``.
    type : str
        ``grasp``, ``place``, ``open`` or ``close``.
    object : str
        The action's object name.
    position : ndarray, shape (3,)
        Metres. grasp: centre of the visible top surface; place: the point on the surface; open/close: the
        handle point (bbox centre on the surface).
    yaw : float or None
        grasp only: radians in (-pi/2, pi/2], the direction along which a parallel gripper should close (the
        object's minor footprint axis) measured about the frame's z axis from its x axis
        (:mod:`grounded_planner.geometry.transforms` holds the one yaw convention).
    width : float or None
        grasp only: extent of the object along that closing direction, metres (no clearance added).
    normal : ndarray, shape (3,) or None
        Unit vector. grasp/place: the support surface's normal (up, the approach direction reversed);
        open/close: the surface normal pointing out of the surface towards the camera (pull along +normal,
        push along -normal).
    method : str
        How the target was computed (``grounded_planner.geometry.targets.METHODS``, ``sim_ground_truth``, ...).
    confidence : float
        0..1: the fraction of the pixels used that held valid depth, lowered for fallbacks and weak fits.
    frame : str
        The frame of ``position`` and ``normal`` (the robot base after back-projection with extrinsics).
    """

    index: int
    type: str
    object: str
    position: np.ndarray
    yaw: float | None = None
    width: float | None = None
    normal: np.ndarray | None = None
    method: str = ""
    confidence: float = 0.0
    frame: str = ""

    def __post_init__(self) -> None:
        self.position = np.asarray(self.position, dtype=float).reshape(3)
        if self.normal is not None:
            self.normal = np.asarray(self.normal, dtype=float).reshape(3)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Target):
            return NotImplemented
        return self.to_dict() == other.to_dict() and self.frame == other.frame

    def to_dict(self) -> dict[str, Any]:
        """One entry of the backproject JSON's ``targets`` (the frame is the set's)."""
        return {
            "index": int(self.index),
            "type": self.type,
            "object": self.object,
            "position": [float(v) for v in self.position],
            "yaw": None if self.yaw is None else float(self.yaw),
            "width": None if self.width is None else float(self.width),
            "normal": None if self.normal is None else [float(v) for v in self.normal],
            "method": self.method,
            "confidence": float(self.confidence),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], frame: str = "") -> "Target":
        if not isinstance(data, Mapping):
            raise PlanError(
                f"a target must be a JSON object with 'index', 'type', 'position', got {type(data).__name__} {data!r}",
                rule="target_format",
            )
        try:
            normal = data.get("normal")
            return cls(
                index=int(data["index"]),
                type=str(data["type"]),
                object=str(data.get("object") or ""),
                position=np.asarray(data["position"], dtype=float).reshape(3),
                yaw=None if data.get("yaw") is None else float(data["yaw"]),
                width=None if data.get("width") is None else float(data["width"]),
                normal=None if normal is None else np.asarray(normal, dtype=float).reshape(3),
                method=str(data.get("method") or ""),
                confidence=float(data.get("confidence", 0.0)),
                frame=str(data.get("frame") or frame),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"invalid target {dict(data)!r}: {exc}", rule="target_format") from exc


@dataclass(eq=False)
class TargetSet:
    """The targets of a whole plan, one per action, all in ``frame``."""

    frame: str
    targets: list[Target] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for target in self.targets:
            if not target.frame:
                target.frame = self.frame

    def to_dict(self) -> dict[str, Any]:
        """Exactly the ``grounded-planner backproject`` JSON object."""
        return {"frame": self.frame, "targets": [t.to_dict() for t in self.targets], "warnings": list(self.warnings)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TargetSet":
        if not isinstance(data, Mapping) or "frame" not in data:
            raise PlanError(
                "a target set must be a JSON object with 'frame', 'targets', 'warnings'", rule="target_format"
            )
        frame = str(data["frame"])
        entries = [] if data.get("targets") is None else data["targets"]
        warnings = [] if data.get("warnings") is None else data["warnings"]
        for name, value in (("targets", entries), ("warnings", warnings)):
            if not isinstance(value, list):
                raise PlanError(
                    f"target set field '{name}' must be a JSON list, got {type(value).__name__}", rule="target_format"
                )
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise PlanError(
                    f"target set field 'targets[{i}]' must be a JSON object, got {type(entry).__name__} {entry!r}",
                    rule="target_format",
                )
        return cls(
            frame=frame,
            targets=[Target.from_dict(t, frame) for t in entries],
            warnings=[str(w) for w in warnings],
        )

    def for_index(self, index: int) -> Target:
        """The target of plan action ``index`` (KeyError when there is none)."""
        for target in self.targets:
            if target.index == index:
                return target
        raise KeyError(f"no target for action {index}")
