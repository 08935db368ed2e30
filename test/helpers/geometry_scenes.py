"""Seeded synthetic tabletop scenes for the geometry tests: ray-cast depth with holes, noise and 1 mm quantisation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grounded_planner.geometry import CameraModel, Extrinsics
from grounded_planner.geometry.synthetic import Scene, random_tabletop

BASE = "panda_link0"


@dataclass
class RenderedScene:
    scene: Scene
    depth_m: np.ndarray  # what a D4xx would deliver: noisy, quantised to 1 mm, with holes
    labels: np.ndarray  # -1 nothing, 0 table, k + 1 objects[k] (from the clean render)
    depth_units: np.ndarray  # the same depth as a uint16 image in mm

    @property
    def camera(self) -> CameraModel:
        return self.scene.camera

    @property
    def cam2base(self) -> Extrinsics:
        return self.scene.cam2world


def tabletop(
    seed: int,
    width: int = 640,
    height: int = 480,
    D: tuple[float, ...] = (),
    n_holes: int = 25,
    noise_m: float = 0.001,
    elongated_only: bool = False,
) -> RenderedScene:
    """Three boxes and a cylinder on cells 0.24 m apart (no mutual occlusion of top faces), base frame BASE."""
    scene, units, labels = random_tabletop(seed, width, height, D, n_holes, noise_m, elongated_only)
    return RenderedScene(scene, units * 0.001, labels, units)
