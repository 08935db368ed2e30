"""MJCF for a scenario: table, the gp5 arm with its parallel gripper, objects from the library, the D435-like camera.

Plain string building (no MuJoCo import) so the model text can be inspected and tested on its own.
Naming scheme the rest of the package relies on: object bodies are ``obj:<id>``, their geoms ``obj:<id>:<part>``,
a cabinet's drawer body ``obj:<id>:drawer`` with geoms ``obj:<id>:drawer_<part>`` and slide joint
``obj:<id>:drawer_slide``; the grasp weld for a holdable body is ``grasp:<body name>``.

The arm ("gp5", defined here, not a vendor model): base yaw, shoulder/elbow/wrist pitch, wrist roll and two
slide-joint fingers, every joint driven by a position actuator; arm links are gravity-compensated and do not
collide (only the palm and fingers touch the world), which keeps the simulation stable and fast on a CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

import numpy as np

from grounded_planner.errors import InputError
from grounded_planner.sim.scenario import CONTAINER_FLOOR_M, ObjectSpec, Scenario


@dataclass(frozen=True)
class ArmGeometry:
    """Kinematic constants of the gp5 arm shared by the MJCF and the analytic IK (metres)."""

    base_height_m: float = 0.12  # table top to the shoulder pitch axis
    upper_arm_m: float = 0.45  # shoulder axis to elbow axis
    forearm_m: float = 0.42  # elbow axis to wrist pitch axis
    wrist_m: float = 0.05  # wrist pitch axis to the wrist roll / hand frame
    hand_to_tcp_m: float = 0.09  # hand frame to the tool centre point (1 cm above the fingertips)
    finger_start_m: float = 0.03  # hand frame to the fingers' root
    finger_length_m: float = 0.07
    finger_travel_m: float = 0.04  # each finger; full opening = 2 * travel
    finger_thickness_m: float = 0.012

    @property
    def tool_m(self) -> float:
        """Wrist pitch axis to TCP along the tool axis."""
        return self.wrist_m + self.hand_to_tcp_m


ARM = ArmGeometry()
ARM_JOINTS = ("j_yaw", "j_shoulder", "j_elbow", "j_wrist_pitch", "j_wrist_roll")
FINGER_JOINTS = ("j_finger_left", "j_finger_right")
# Joint limits (rad) of the arm joints, in ARM_JOINTS order; the IK checks against them.
ARM_LIMITS = ((-2.9, 2.9), (-2.0, 2.0), (-2.8, 2.8), (-3.1, 3.1), (-2.9, 2.9))
TABLE_SIZE_M = (1.1, 1.2)  # x, y extents of the table top
TABLE_CENTER_M = (0.45, 0.0)
HOME_TCP_M = (0.12, 0.0, 0.45)
# Drawer handles sit this high up the drawer front: high enough that a hand straddling the handle from above
# (the FR3's housing reaches 47 mm above its TCP) clears the cabinet top.
HANDLE_HEIGHT_FRACTION = 0.8
# How far a drawer handle stands off the front: room for a finger of a fully open (80 mm) gripper between handle
# and front (the FR3's finger reaches 67 mm from the hand's centre).
HANDLE_STANDOFF_M = 0.075
HANDLE_HALF_THICKNESS_M = 0.008  # the handle bar's half size across it (a 16 mm square bar)
# The body held objects are welded to, per arm model (the FR3's names carry the prefix it is attached with).
HAND_BODY = {
    "gp5": "hand",
    "fr3": "fr3/hand",
    "so101": "so101/gripper",
}  # where the arm waits: behind the objects, above the camera's view of them


def _f(values) -> str:
    return " ".join(f"{float(v):.6g}" for v in np.atleast_1d(values))


def _rgba(rgb, alpha: float = 1.0) -> str:
    return _f([*rgb, alpha])


def quat_from_matrix(rotation: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of a 3x3 rotation matrix."""
    m = np.asarray(rotation, dtype=float)
    t = np.trace(m)
    if t > 0:
        s = math.sqrt(t + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = math.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k]) * 2
        q = [0.0] * 4
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j, i] + m[i, j]) / s
        q[1 + k] = (m[k, i] + m[i, k]) / s
    q = np.array(q)
    return q / np.linalg.norm(q)


def _rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _rot_y(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def camera_axes(position_m, look_at_m) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Optical-frame axes (x right, y down, z forward) in the base frame for a camera looking at a point.

    Returns ``(x_opt, y_opt, z_opt)``, each (3,); the image's "up" is as close to base +z as possible.
    """
    z_opt = np.asarray(look_at_m, float) - np.asarray(position_m, float)
    z_opt /= np.linalg.norm(z_opt)
    x_opt = np.cross(z_opt, [0.0, 0.0, 1.0])
    if np.linalg.norm(x_opt) < 1e-6:  # looking straight down: pick image right = base -y
        x_opt = np.array([0.0, -1.0, 0.0])
    x_opt /= np.linalg.norm(x_opt)
    y_opt = np.cross(z_opt, x_opt)
    return x_opt, y_opt, z_opt


# -- objects -----------------------------------------------------------------------------------------
def _ring_walls(
    name: str,
    radius: float,
    height: float,
    thickness: float,
    tilt_rad: float,
    rgba: str,
    segments: int = 16,
    z0: float = 0.0,
) -> list[str]:
    """Box segments forming the wall of a cup/bowl; tilted outwards by ``tilt_rad`` (0 = vertical)."""
    out = []
    wall_h = height / math.cos(tilt_rad)
    r_mid = radius - 0.5 * height * math.tan(tilt_rad) - 0.5 * thickness
    half_len = (r_mid + 0.5 * thickness) * math.tan(math.pi / segments) * 1.08
    for k in range(segments):
        theta = 2 * math.pi * k / segments
        rot = _rot_z(theta) @ _rot_y(tilt_rad)  # outward tilt: the wall's top leans along +x local
        quat = quat_from_matrix(rot)
        pos = [r_mid * math.cos(theta), r_mid * math.sin(theta), z0 + 0.5 * height]
        out.append(
            f'<geom name="{name}:wall{k}" type="box" size="{_f([thickness / 2, half_len, wall_h / 2])}" '
            f'pos="{_f(pos)}" quat="{_f(quat)}" rgba="{rgba}"/>'
        )
    return out


def object_mjcf(obj: ObjectSpec, lift_m: float = 0.0) -> tuple[str, list[str]]:
    """MJCF of one object and the names of its holdable bodies (a grasp weld is made for each).

    ``lift_m``: how far above the table its bottom starts (the floor of the container it starts in).
    States: an ``upside_down`` cup has its floor at the top (a closed disc up, open below); an ``open`` box is a
    tray with walls and a floor but no lid.
    """
    body = f"obj:{obj.id}"
    rgba = _rgba(obj.color)
    yaw = math.radians(obj.yaw_deg)
    x, y = obj.position_m
    quat = _f([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)])
    friction = 'friction="1.0 0.01 0.001"'
    state = obj.resolved_state
    if obj.kind == "box" and state == "open":
        sx, sy, sz = obj.size_m
        t = min(0.004, sx / 6, sy / 6)
        walls = [
            ("floor", [sx / 2, sy / 2, t / 2], [0, 0, -sz / 2 + t / 2]),
            ("wall_px", [t / 2, sy / 2, sz / 2], [sx / 2 - t / 2, 0, 0]),
            ("wall_nx", [t / 2, sy / 2, sz / 2], [-sx / 2 + t / 2, 0, 0]),
            ("wall_py", [sx / 2 - t, t / 2, sz / 2], [0, sy / 2 - t / 2, 0]),
            ("wall_ny", [sx / 2 - t, t / 2, sz / 2], [0, -sy / 2 + t / 2, 0]),
        ]
        xml = (
            f'<body name="{body}" pos="{_f([x, y, lift_m + sz / 2])}" quat="{quat}"><freejoint name="{body}:free"/>'
            f'<inertial pos="0 0 {-sz / 6:.6g}" mass="{obj.mass_kg}" '
            f'diaginertia="{_f([obj.mass_kg * (sy * sy + sz * sz) / 12, obj.mass_kg * (sx * sx + sz * sz) / 12, obj.mass_kg * (sx * sx + sy * sy) / 12])}"/>'
            + "".join(
                f'<geom name="{body}:{n}" type="box" size="{_f(sz_)}" pos="{_f(p)}" rgba="{rgba}" {friction}/>'
                for n, sz_, p in walls
            )
            + "</body>"
        )
        return xml, [body]
    if obj.kind == "box":
        sx, sy, sz = obj.size_m
        xml = (
            f'<body name="{body}" pos="{_f([x, y, lift_m + sz / 2])}" quat="{quat}"><freejoint name="{body}:free"/>'
            f'<geom name="{body}:body" type="box" size="{_f([sx / 2, sy / 2, sz / 2])}" mass="{obj.mass_kg}" '
            f'rgba="{rgba}" {friction}/></body>'
        )
        return xml, [body]
    if obj.kind in ("cylinder", "plate"):
        r, h = obj.size_m
        xml = (
            f'<body name="{body}" pos="{_f([x, y, lift_m + h / 2])}" quat="{quat}"><freejoint name="{body}:free"/>'
            f'<geom name="{body}:body" type="cylinder" size="{_f([r, h / 2])}" mass="{obj.mass_kg}" '
            f'rgba="{rgba}" {friction}/></body>'
        )
        return xml, ([body] if obj.kind == "cylinder" else [])
    if obj.kind in ("cup", "bowl"):
        r, h = obj.size_m
        thickness = CONTAINER_FLOOR_M[obj.kind]
        tilt = 0.0 if obj.kind == "cup" else math.radians(30)
        base_r = r - h * math.tan(tilt)
        floor_z = h - thickness / 2 if state == "upside_down" else thickness / 2
        parts = [
            f'<geom name="{body}:bottom" type="cylinder" size="{_f([base_r, thickness / 2])}" '
            f'pos="0 0 {floor_z:.6g}" rgba="{rgba}"/>'
        ]
        parts += _ring_walls(body, r, h, thickness, tilt, rgba)
        # mass spread over the parts by MuJoCo from their volumes: set the total with an inertial-free body mass
        com_z = h * (0.65 if state == "upside_down" else 0.35)
        xml = (
            f'<body name="{body}" pos="{_f([x, y, lift_m])}" quat="{quat}"><freejoint name="{body}:free"/>'
            f'<inertial pos="0 0 {com_z:.6g}" mass="{obj.mass_kg}" diaginertia="{_f([obj.mass_kg * r * r / 3] * 3)}"/>'
            + "".join(parts)
            + "</body>"
        )
        return xml, ([body] if obj.kind == "cup" else [])
    if obj.kind == "cabinet":
        return _cabinet_mjcf(obj, body, rgba, quat), [f"{body}:drawer"]
    raise InputError(f"object {obj.id!r}: unsupported kind {obj.kind!r}")


def _cabinet_mjcf(obj: ObjectSpec, body: str, rgba: str, quat: str) -> str:
    """A fixed cabinet with one drawer that slides out along the cabinet's local -x; the handle stands off the
    front so a top-down gripper fits between handle and front."""
    d, w, h = obj.size_m
    t = 0.012
    x, y = obj.position_m
    shell = [
        ("bottom", [d / 2, w / 2, t / 2], [0, 0, t / 2]),
        ("top", [d / 2, w / 2, t / 2], [0, 0, h - t / 2]),
        ("left", [d / 2, t / 2, h / 2], [0, w / 2 - t / 2, h / 2]),
        ("right", [d / 2, t / 2, h / 2], [0, -w / 2 + t / 2, h / 2]),
        ("back", [t / 2, w / 2, h / 2], [d / 2 - t / 2, 0, h / 2]),
    ]
    front_rgba = _rgba(np.clip(np.asarray(obj.color) * 1.15, 0, 1))
    handle_rgba = _rgba((0.75, 0.75, 0.78))
    inner_w = w / 2 - t - 0.002
    drawer_h = h - 2 * t - 0.004
    standoff = HANDLE_STANDOFF_M
    handle_z = t + 0.002 + HANDLE_HEIGHT_FRACTION * drawer_h
    drawer = [
        (
            "drawer_front",
            [t / 2, w / 2 - 0.002, drawer_h / 2 + t / 2],
            [-d / 2 + t / 2, 0, t + 0.002 + drawer_h / 2],
            front_rgba,
        ),
        ("drawer_bottom", [d / 2 - 2 * t, inner_w, t / 4], [-t, 0, t + 0.004], rgba),
        ("drawer_side_l", [d / 2 - 2 * t, t / 4, drawer_h * 0.3], [-t, inner_w, t + drawer_h * 0.3], rgba),
        ("drawer_side_r", [d / 2 - 2 * t, t / 4, drawer_h * 0.3], [-t, -inner_w, t + drawer_h * 0.3], rgba),
        ("drawer_back", [t / 4, inner_w, drawer_h * 0.3], [d / 2 - 3 * t, 0, t + drawer_h * 0.3], rgba),
        (
            "drawer_handle",
            [HANDLE_HALF_THICKNESS_M, 0.25 * w, HANDLE_HALF_THICKNESS_M],
            [-d / 2 - standoff, 0, handle_z],
            handle_rgba,
        ),
        ("drawer_post_l", [standoff / 2, 0.006, 0.006], [-d / 2 - standoff / 2, 0.2 * w, handle_z], handle_rgba),
        ("drawer_post_r", [standoff / 2, 0.006, 0.006], [-d / 2 - standoff / 2, -0.2 * w, handle_z], handle_rgba),
    ]
    xml = [f'<body name="{body}" pos="{_f([x, y, 0.0])}" quat="{quat}">']
    xml += [f'<geom name="{body}:{n}" type="box" size="{_f(s)}" pos="{_f(p)}" rgba="{rgba}"/>' for n, s, p in shell]
    xml.append(
        f'<body name="{body}:drawer"><joint name="{body}:drawer_slide" type="slide" axis="-1 0 0" '
        f'range="0 {obj.drawer_travel_m:.6g}" damping="8" frictionloss="0.5" armature="0.05"/>'
        f'<inertial pos="0 0 {h / 2:.6g}" mass="0.6" diaginertia="0.005 0.005 0.005"/>'
    )
    xml += [
        f'<geom name="{body}:{n}" type="box" size="{_f(s)}" pos="{_f(p)}" rgba="{c}" friction="1.2 0.01 0.001"/>'
        for n, s, p, c in drawer
    ]
    xml.append("</body></body>")
    return "".join(xml)


def cabinet_handle_local(obj: ObjectSpec) -> np.ndarray:
    """Handle centre in the cabinet frame when the drawer is closed (matches :func:`_cabinet_mjcf`)."""
    d, _w, h = obj.size_m
    t = 0.012
    return np.array([-d / 2 - HANDLE_STANDOFF_M, 0.0, t + 0.002 + HANDLE_HEIGHT_FRACTION * (h - 2 * t - 0.004)])


# -- the arm -----------------------------------------------------------------------------------------
def arm_mjcf() -> str:
    a = ARM
    link = 'contype="0" conaffinity="0" rgba="0.92 0.92 0.94 1"'
    dark = 'contype="0" conaffinity="0" rgba="0.2 0.2 0.22 1"'
    ft = a.finger_thickness_m
    finger_geom = (
        f'type="box" size="0.011 {ft / 2:.6g} {a.finger_length_m / 2:.6g}" rgba="0.25 0.25 0.27 1" '
        f'friction="1.5 0.02 0.002" condim="4" mass="0.03"'
    )
    return f"""
<body name="arm_base" pos="0 0 0">
  <geom type="cylinder" size="0.07 0.03" pos="0 0 0.03" {dark}/>
  <body name="link1" pos="0 0 0.06" gravcomp="1">
    <joint name="j_yaw" axis="0 0 1" range="{_f(ARM_LIMITS[0])}"/>
    <geom type="cylinder" size="0.055 0.03" pos="0 0 0.03" mass="1.0" {link}/>
    <body name="link2" pos="0 0 {a.base_height_m - 0.06:.6g}" gravcomp="1">
      <joint name="j_shoulder" axis="0 1 0" range="{_f(ARM_LIMITS[1])}"/>
      <geom type="capsule" fromto="0 0 0 0 0 {a.upper_arm_m:.6g}" size="0.035" mass="1.2" {link}/>
      <body name="link3" pos="0 0 {a.upper_arm_m:.6g}" gravcomp="1">
        <joint name="j_elbow" axis="0 1 0" range="{_f(ARM_LIMITS[2])}"/>
        <geom type="capsule" fromto="0 0 0 0 0 {a.forearm_m:.6g}" size="0.03" mass="0.9" {link}/>
        <body name="link4" pos="0 0 {a.forearm_m:.6g}" gravcomp="1">
          <joint name="j_wrist_pitch" axis="0 1 0" range="{_f(ARM_LIMITS[3])}"/>
          <geom type="capsule" fromto="0 0 0 0 0 {a.wrist_m:.6g}" size="0.028" mass="0.4" {dark}/>
          <body name="hand" pos="0 0 {a.wrist_m:.6g}" gravcomp="1">
            <joint name="j_wrist_roll" axis="0 0 1" range="{_f(ARM_LIMITS[4])}"/>
            <geom name="palm" type="box" size="0.02 0.06 0.015" pos="0 0 0.015" mass="0.4" rgba="0.2 0.2 0.22 1"/>
            <site name="tcp" pos="0 0 {a.hand_to_tcp_m:.6g}" size="0.004" rgba="1 0 1 0"/>
            <body name="finger_left" pos="0 0 {a.finger_start_m:.6g}" gravcomp="1">
              <joint name="j_finger_left" type="slide" axis="0 1 0" range="0 {a.finger_travel_m:.6g}"/>
              <geom name="finger_left" pos="0 {ft / 2:.6g} {a.finger_length_m / 2:.6g}" {finger_geom}/>
            </body>
            <body name="finger_right" pos="0 0 {a.finger_start_m:.6g}" gravcomp="1">
              <joint name="j_finger_right" type="slide" axis="0 -1 0" range="0 {a.finger_travel_m:.6g}"/>
              <geom name="finger_right" pos="0 {-ft / 2:.6g} {a.finger_length_m / 2:.6g}" {finger_geom}/>
            </body>
          </body>
        </body>
      </body>
    </body>
  </body>
</body>"""


def scene_mjcf(scenario: Scenario) -> tuple[str, list[str]]:
    """The whole model as MJCF text, and the holdable body names (each gets an inactive weld to the hand).

    For ``robot: gp5`` the text is complete; for other arms it lacks the arm, whose MjSpec is attached before
    compiling (the welds already name its ``hand`` body).
    """
    cam = scenario.camera
    x_opt, y_opt, _ = camera_axes(cam.position_m, cam.look_at_m)
    # MuJoCo cameras look along their -z with +y up: x_cam = x_opt, y_cam = -y_opt
    fovy_deg = math.degrees(2 * math.atan(0.5 * cam.height / cam.fy_px))
    objects, holdable = [], []
    kinds = {o.id: o.kind for o in scenario.objects}
    for obj in scenario.objects:
        # an object that starts in a container starts 1 mm above its floor (it settles onto it)
        lift = CONTAINER_FLOOR_M[kinds[obj.inside]] + 0.001 if obj.inside else 0.0
        xml, bodies = object_mjcf(obj, lift)
        objects.append(xml)
        holdable += bodies
    tx, ty = TABLE_CENTER_M
    welds = "".join(
        f'<weld name="grasp:{b}" body1="{HAND_BODY[scenario.robot]}" body2={quoteattr(b)} active="false" '
        f'solref="0.004 1" torquescale="1"/>'
        for b in holdable
    )
    excludes = "".join(
        f'<exclude body1="obj:{o.id}" body2="obj:{o.id}:drawer"/>' for o in scenario.objects if o.kind == "cabinet"
    )
    gains = 'kp="3000" kv="120"'
    actuators = "".join(
        f'<position name="a_{j[2:]}" joint="{j}" {gains} ctrlrange="{_f(ARM_LIMITS[i])}"/>'
        for i, j in enumerate(ARM_JOINTS)
    )
    actuators += "".join(
        f'<position name="a_{j[2:]}" joint="{j}" kp="800" kv="20" forcerange="-25 25" '
        f'ctrlrange="0 {ARM.finger_travel_m:.6g}"/>'
        for j in FINGER_JOINTS
    )
    arm = arm_mjcf()
    if scenario.robot != "gp5":  # another arm model is attached to the compiled spec (robots.attach_fr3)
        arm, actuators = "", ""
    xml = f"""<mujoco model="grounded_planner_workcell_{scenario.name}">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.002" integrator="implicitfast" cone="elliptic" impratio="5"/>
  <visual><global offwidth="{max(cam.width, 640)}" offheight="{max(cam.height, 480)}"/>
    <quality shadowsize="2048"/><headlight ambient="0.35 0.35 0.35" diffuse="0.5 0.5 0.5"/></visual>
  <default><joint damping="2" armature="0.05"/><geom solref="0.004 1" solimp="0.95 0.99 0.001"/></default>
  <asset>
    <texture name="floor_tex" type="2d" builtin="checker" rgb1="0.35 0.37 0.4" rgb2="0.3 0.32 0.35" width="256" height="256"/>
    <material name="floor_mat" texture="floor_tex" texrepeat="8 8"/>
    <texture name="table_tex" type="2d" builtin="flat" rgb1="0.78 0.72 0.62" width="32" height="32"/>
    <material name="table_mat" texture="table_tex" specular="0.1"/>
  </asset>
  <worldbody>
    <light name="key" pos="0.6 -0.4 1.6" dir="-0.2 0.3 -1" diffuse="0.6 0.6 0.6" castshadow="true"/>
    <light name="fill" pos="0.3 0.6 1.4" dir="0 -0.3 -1" diffuse="0.3 0.3 0.3" castshadow="false"/>
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 -0.75" material="floor_mat"/>
    <geom name="table" type="box" size="{_f([TABLE_SIZE_M[0] / 2, TABLE_SIZE_M[1] / 2, 0.02])}" pos="{_f([tx, ty, -0.02])}" material="table_mat" friction="0.8 0.01 0.001"/>
    <geom name="table_leg" type="box" size="0.05 0.05 0.365" pos="{_f([tx, ty, -0.405])}" rgba="0.3 0.3 0.3 1" contype="0" conaffinity="0"/>
    <camera name="rgbd" pos="{_f(cam.position_m)}" xyaxes="{_f([*x_opt, *(-y_opt)])}" fovy="{fovy_deg:.8g}"/>
    {arm}
    {"".join(objects)}
  </worldbody>
  <contact>{excludes}</contact>
  <equality>{welds}</equality>
  <actuator>{actuators}</actuator>
</mujoco>"""
    return xml, holdable
