"""Seeded synthetic tabletop scenes for the geometry tests: ray-cast depth with holes, noise and 1 mm quantisation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grounded_planner.geometry import CameraModel, Extrinsics
from grounded_planner.geometry.synthetic import (
    Box,
    Cylinder,
    Scene,
    add_holes,
    look_at,
    realsense_camera,
    to_depth_units,
)

BASE = "panda_link0"


@dataclass
class RenderedScene:
    scene: Scene
    depth_m: np.ndarray      # what a D4xx would deliver: noisy, quantised to 1 mm, with holes
    labels: np.ndarray       # -1 nothing, 0 table, k + 1 objects[k] (from the clean render)
    depth_units: np.ndarray  # the same depth as a uint16 image in mm

    @property
    def camera(self) -> CameraModel:
        return self.scene.camera

    @property
    def cam2base(self) -> Extrinsics:
        return self.scene.cam2world


def oblique_camera(rng: np.random.Generator, elevation_deg: tuple[float, float] = (40, 60)) -> Extrinsics:
    """A camera 0.75-0.95 m from the table centre, looking down at 40-60 deg from a random side."""
    azimuth = rng.uniform(0, 2 * math.pi)
    elevation = math.radians(rng.uniform(*elevation_deg))
    dist = rng.uniform(0.75, 0.95)
    eye = dist * np.array([math.cos(azimuth) * math.cos(elevation), math.sin(azimuth) * math.cos(elevation),
                           math.sin(elevation)])
    return look_at(eye, [0.0, 0.0, 0.0], parent_frame=BASE)


def tabletop(seed: int, width: int = 640, height: int = 480, D: tuple[float, ...] = (), n_holes: int = 25,
             noise_m: float = 0.001, elongated_only: bool = False) -> RenderedScene:
    """Three boxes and a cylinder on a grid of cells 0.24 m apart (no mutual occlusion of top faces)."""
    rng = np.random.default_rng(seed)
    camera = realsense_camera(width, height, D=D)
    cells = [(-0.12, -0.12), (-0.12, 0.12), (0.12, -0.12), (0.12, 0.12)]
    objects: list = []
    for k, (cx, cy) in enumerate(cells):
        xy = (cx + rng.uniform(-0.02, 0.02), cy + rng.uniform(-0.02, 0.02))
        if k == 3 and not elongated_only:
            objects.append(Cylinder(f"can{k}", xy, rng.uniform(0.025, 0.04), rng.uniform(0.06, 0.12)))
        else:
            size = (rng.uniform(0.09, 0.14), rng.uniform(0.03, 0.05), rng.uniform(0.03, 0.09))
            objects.append(Box(f"box{k}", xy, size, rng.uniform(-math.pi, math.pi)))
    scene = Scene(camera, oblique_camera(rng), objects)
    clean, labels = scene.render()
    holed = add_holes(clean, rng, n_holes, 6)
    units = to_depth_units(holed, rng, noise_m)
    return RenderedScene(scene, units * 0.001, labels, units)
