"""Record a simulated run as an animated GIF: frames from the workcell camera at a fixed simulated frame rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from grounded_planner.errors import InputError


class FrameRecorder:
    """Grabs a camera frame every ``period_s`` of simulated time while attached to a workcell.

    Use as a context manager around the motions to record; frames are downscaled by ``scale`` to keep GIFs
    small. A 320x240 frame renders in ~30 ms on a CPU.
    """

    def __init__(self, workcell, period_s: float = 0.2, scale: float = 0.5, max_frames: int = 600):
        if period_s <= 0:
            raise InputError(f"period_s must be > 0 seconds of simulated time, got {period_s!r}")
        if not 0 < scale <= 1:
            raise InputError(f"scale must be in (0, 1], got {scale!r}")
        self.workcell = workcell
        self.period_s = period_s  # simulated seconds between frames
        self.scale = scale  # frame size relative to the camera image
        self.max_frames = max_frames  # later frames are dropped (and counted) so memory stays bounded
        self.frames: list[np.ndarray] = []
        self.dropped = 0
        self._next_s = 0.0

    def __enter__(self) -> "FrameRecorder":
        self._next_s = self.workcell.time_s
        self.grab()
        self.workcell.tick_listeners.append(self._on_tick)
        return self

    def __exit__(self, *exc) -> None:
        if self._on_tick in self.workcell.tick_listeners:
            self.workcell.tick_listeners.remove(self._on_tick)
        self.grab()

    def _on_tick(self, time_s: float) -> None:
        if time_s + 1e-9 >= self._next_s:
            self.grab()

    def grab(self) -> None:
        """Add the current camera view now."""
        self._next_s = self.workcell.time_s + self.period_s
        if len(self.frames) >= self.max_frames:
            self.dropped += 1
            return
        cam = self.workcell.scenario.camera
        rgb = self.workcell.render_rgb(max(1, int(cam.width * self.scale)), max(1, int(cam.height * self.scale)))
        self.frames.append(rgb)

    def save_gif(self, path: str | Path, speedup: float = 1.0) -> Path:
        """Write the frames as a looping GIF playing at ``speedup`` x simulated time; returns the path."""

        if not self.frames:
            raise InputError("no frames recorded: use the recorder as a context manager around the motions")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        images = [Image.fromarray(f) for f in self.frames]
        duration_ms = max(20, int(round(1000 * self.period_s / speedup)))
        images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0, optimize=True)
        return path
