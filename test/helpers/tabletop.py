"""A tabletop seen from 1 m straight above: a red box (5 cm tall, 30x50 px) on a table, as camera messages, with its extrinsics."""

import numpy as np

W, H = 320, 240  # image size (pixels)
# Non-square pixels and a principal point off the centre: an fx/fy or cx/cy mix-up moves a target by centimetres
FX, FY = 300.0, 345.0  # focal lengths (pixels)
CX, CY = W / 2 - 12.5, H / 2 + 7.5  # principal point (pixels)
TABLE_M, CUBE_M = 1.0, 0.95  # depth of the table and of the cube's top
CUBE_PX = (85, 95, 115, 145)  # x1, y1, x2, y2 of the cube in the image
# What the stand-in VLM (grounded_planner.vlm.fake_server) looks for: it finds objects by colour.
SCENE_COLORS = {"red cube": (220, 30, 30), "table": (200, 200, 200)}
INSTRUCTION = "put the red cube on the table"
EXTRINSICS = """parent_frame: fr3_link0
child_frame: camera_color_optical_frame
translation: [0.5, 0.0, 1.0]
rotation: [1.0, 0.0, 0.0, 0.0]   # 180 deg about x: optical z points down
"""


def scene_messages(stamp_s: int = 0):
    """(colour Image, 16UC1 depth Image, CameraInfo), frame camera_color_optical_frame, stamped ``stamp_s`` (0 =
    unstamped; a recording for a bag is stamped, as a camera stamps its frames)."""
    from sensor_msgs.msg import CameraInfo

    from grounded_planner.ros.convert import numpy_to_image

    x1, y1, x2, y2 = CUBE_PX
    rgb = np.full((H, W, 3), SCENE_COLORS["table"], np.uint8)
    rgb[y1:y2, x1:x2] = SCENE_COLORS["red cube"]
    depth_mm = np.full((H, W), int(TABLE_M * 1000), np.uint16)
    depth_mm[y1:y2, x1:x2] = int(CUBE_M * 1000)
    color, depth = numpy_to_image(rgb, "rgb8"), numpy_to_image(depth_mm, "16UC1")
    info = CameraInfo(
        width=W, height=H, distortion_model="plumb_bob", d=[0.0] * 5, k=[FX, 0.0, CX, 0.0, FY, CY, 0.0, 0.0, 1.0]
    )
    for msg in (color, depth, info):
        msg.header.frame_id = "camera_color_optical_frame"
        msg.header.stamp.sec = int(stamp_s)
    return color, depth, info


def base_point(u_px: float, v_px: float, depth_m: float) -> list[float]:
    """Where the plan pixel (u, v) at ``depth_m`` lies in fr3_link0 (plan pixel centres sit at +0.5)."""
    x = (u_px - 0.5 - CX) / FX * depth_m
    y = (v_px - 0.5 - CY) / FY * depth_m
    return [0.5 + x, -y, 1.0 - depth_m]
