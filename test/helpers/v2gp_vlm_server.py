"""Stand-in VLM for V2GP tests: the vlm layer's colour-seeing HTTP server, taught V2GP's two extra questions.

It is a mock of a real VLM (none can run here): real HTTP, real OpenAI chat-completions requests, answers
computed from the pixels it receives. Stage 2 ("which object does the gripper manipulate in these
keyframes"): the scene object whose colour blob moved between the first and last keyframe, the fixture it
ended on as the target, or, when nothing moved, the object nearest the gripper disc. Implicit rewrites:
a fixed goal-style sentence per instruction kind. Grounding requests ("Locate ...", "Point to ...") and
planning requests are answered by the base server.
"""

from __future__ import annotations

import json
import re

import numpy as np

from grounded_planner.vlm.fake_server import FakeVLMServer, find_color

GRIPPER_RGB = (50, 50, 50)


class V2GPVLMServer(FakeVLMServer):
    def __init__(self, scene: dict[str, tuple[int, int, int]], kinds: dict[str, str], port: int = 0):
        super().__init__(scene=scene, port=port)
        self.kinds = kinds  # name -> rigid | articulated | fixture

    def answer(self, model: str, texts: list[str], image: np.ndarray | None) -> str:
        user = [t[len("user: ") :] for t in texts if t.startswith("user: ")]
        last = user[-1] if user else ""
        m = re.search(r"The image shows (\d+) keyframes", last)
        if m and image is not None:
            return self._identify(image, int(m.group(1)))
        m = re.search(r"Instruction: \"(.+?)\"\s*\nAnswer with the rewritten instruction only", last)
        if m:
            text = m.group(1).lower()
            return "I need something from the drawer." if text.startswith("open") else "Please tidy up the table."
        return super().answer(model, texts, image)

    def _identify(self, strip: np.ndarray, n: int) -> str:
        width = (strip.shape[1] - 4 * (n - 1)) // n
        panels = [strip[:, k * (width + 4) : k * (width + 4) + width] for k in range(n)]
        first, last = panels[0], panels[-1]
        best, best_d = None, 2.0
        for name, color in self.scene.items():
            if self.kinds[name] == "fixture":
                continue
            a, b = find_color(first, color), find_color(last, color)
            if a is None or b is None:
                continue
            d = float(np.hypot((a[0] + a[2] - b[0] - b[2]) / 2, (a[1] + a[3] - b[1] - b[3]) / 2))
            if d > best_d:
                best, best_d = (name, a, b), d
        if best is not None:
            name, a, b = best
            interaction = "pick_place"
            target = ""
            if self.kinds[name] == "articulated":
                interaction = "open" if b[1] > a[1] else "close"
            else:
                cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
                for fixture, color in self.scene.items():
                    box = find_color(last, color) if self.kinds[fixture] == "fixture" else None
                    if box and box[0] <= cx <= box[2] and box[1] <= cy <= box[3]:
                        target = fixture
        else:  # nothing moved: the object under the gripper while it is closed
            ring = find_color(panels[len(panels) // 2], GRIPPER_RGB, tol=10)
            if ring is None:
                return "I cannot tell which object is manipulated."
            gx, gy = (ring[0] + ring[2]) / 2, (ring[1] + ring[3]) / 2
            dists = []
            for name, color in self.scene.items():
                box = find_color(first, color) if self.kinds[name] != "fixture" else None
                if box:
                    dists.append((np.hypot((box[0] + box[2]) / 2 - gx, (box[1] + box[3]) / 2 - gy), name))
            name = min(dists)[1]
            interaction, target = "pick_place", ""
        answer = {
            "object": name,
            "category": name.split()[-1] if self.kinds[name] != "articulated" else "drawer",
            "interaction": interaction,
            "target": target,
        }
        return (
            "<think>\nThe blob that moves between the first and last keyframe.\n</think>\n```json\n"
            + json.dumps(answer)
            + "\n```"
        )
