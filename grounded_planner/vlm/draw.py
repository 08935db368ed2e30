"""Draw a plan over its image: green boxes for grasp/open/close, red crosses for place points, step numbers."""

from __future__ import annotations

import numpy as np

from grounded_planner.plan import GroundedPlan
from PIL import Image, ImageDraw, ImageFont
from grounded_planner.vlm.image import check_image

BOX_COLOR = (0, 200, 0)
PLACE_COLOR = (230, 0, 0)
LABEL_BG = (0, 0, 0)


def draw_plan(image_rgb: np.ndarray, plan: GroundedPlan):
    """Return a PIL image of ``image_rgb`` (H, W, 3) uint8 with the plan's actions drawn and numbered from 1.

    Line width and font size scale with the image so the overlay reads the same at 640 px and 4K.
    """

    image_rgb = check_image(image_rgb)
    img = Image.fromarray(image_rgb, "RGB")
    draw = ImageDraw.Draw(img)
    side = max(img.size)
    line = max(2, round(side / 320))
    font_px = max(12, round(side / 40))
    try:
        font = ImageFont.load_default(size=font_px)
    except TypeError:  # Pillow < 10.1 has one fixed-size bitmap font
        font = ImageFont.load_default()
    cross = max(6, round(side / 60))

    def label(x: float, y: float, text: str, color) -> None:
        left, top, right, bottom = draw.textbbox((x, y), text, font=font)
        pad = max(1, line // 2)
        # keep the label inside the picture
        dx = min(0.0, img.size[0] - right - pad) - min(0.0, left - pad)
        dy = min(0.0, img.size[1] - bottom - pad) - min(0.0, top - pad)
        draw.rectangle((left - pad + dx, top - pad + dy, right + pad + dx, bottom + pad + dy), fill=LABEL_BG)
        draw.text((x + dx, y + dy), text, fill=color, font=font)

    for step, action in enumerate(plan.actions, 1):
        name = f"{step} {action.type}" + (f" {action.object}" if action.object else "")
        if action.bbox is not None:
            x1, y1, x2, y2 = action.bbox
            draw.rectangle((x1, y1, x2, y2), outline=BOX_COLOR, width=line)
            label(x1, max(0.0, y1 - font_px - 2 * line), name, BOX_COLOR)
        if action.point is not None:
            x, y = action.point
            draw.line((x - cross, y - cross, x + cross, y + cross), fill=PLACE_COLOR, width=line + 1)
            draw.line((x - cross, y + cross, x + cross, y - cross), fill=PLACE_COLOR, width=line + 1)
            to = f" -> {action.target}" if action.target else ""
            label(x + cross + line, y - font_px / 2, f"{step} place{to}", PLACE_COLOR)
    if not plan.actions:
        label(line * 2, line * 2, f"no actions: {plan.reason}"[:120], (255, 255, 255))
    return img
