"""package.xml declares, by rosdep key, every third-party module the nodes can import (a ROS install gets only those).

The imports are found statically: every module reachable from ``grounded_planner/ros/*_node.py`` through
``grounded_planner`` imports (function-level ones included), and the third-party top-level names they import.
"""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET

from conftest import REPO

# module -> rosdep key (rosdistro rosdep/python.yaml and base.yaml at 8468e88c, or a ROS package name)
ROSDEP_KEYS = {
    "numpy": "python3-numpy",
    "yaml": "python3-yaml",
    "PIL": "python3-pil",
    "cv2": "python3-opencv",
    "rosbags": "python3-rosbags-pip",
    "mcap": "mcap-ros2-support",  # rosdistro has no key for mcap alone; mcap-ros2-support (pip) depends on it
    "httpx": "python3-httpx",
    "aiohttp": "python3-aiohttp",
    "action_msgs": "action_msgs",
    "mujoco": "python3-mujoco-pip",
    "pyrealsense2": "python3-pyrealsense2-pip",
    "rclpy": "rclpy",
    "rcl_interfaces": "rcl_interfaces",
    "ament_index_python": "ament_index_python",
    "std_msgs": "std_msgs",
    "std_srvs": "std_srvs",
    "sensor_msgs": "sensor_msgs",
    "geometry_msgs": "geometry_msgs",
    "visualization_msgs": "visualization_msgs",
    "diagnostic_msgs": "diagnostic_msgs",
    "service_msgs": "service_msgs",
    "lifecycle_msgs": "lifecycle_msgs",
    "grounded_planner_interfaces": "grounded_planner_interfaces",
}
# Imported only by an optional backend, inside the code that needs it (a clear error names what to install);
# declaring them would make every ROS install pull in a GPU stack or an SDK without a rosdep key.
OPTIONAL = {
    "google": "planner backend:=gemini (pip install google-genai; no rosdep key)",
    "torch": "planner backend:=transformers, decoupled sam3 (multi-GB; python3-torch if wanted)",
    "transformers": "planner backend:=transformers (python3-transformers-pip if wanted)",
    "peft": "planner backend:=transformers with a LoRA adapter (pip; no rosdep key)",
    "sam3": "planner backend:=decoupled with SAM 3 (pip; no rosdep key)",
    "franky": "executor backend:=franky (pip install franky-control; no rosdep key)",
    "lerobot": "executor backend:=lerobot (pip install lerobot; no rosdep key)",
    "placo": "SO-101 inverse kinematics of backend:=lerobot (pip install placo; no rosdep key)",
    "moveit": "executor backend:=moveit (moveit_py from a MoveIt install)",
    "franka_msgs": "the Franka gripper action client, only with franka_ros2 installed",
    "zlib_ng": "a faster CRC-32 of the bag writer's chunks (pip install zlib-ng; no rosdep key; zlib's without it)",
    "lz4": "LZ4-compressed MCAP chunks (rollouts recorded with compression: lz4; no rosdep key)",
    "backports": "reading zstd-compressed MCAP chunks on Python < 3.14 (backports.zstd)",
    "compression": "reading zstd-compressed MCAP chunks on Python >= 3.14 (standard library there)",
}


def _module_file(name: str):
    path = REPO / (name.replace(".", "/") + ".py")
    if path.is_file():
        return path
    path = REPO / name.replace(".", "/") / "__init__.py"
    return path if path.is_file() else None


def third_party_imports_of_nodes() -> dict[str, set[str]]:
    """Top-level third-party module -> our modules that import it, over everything the nodes can reach."""
    todo = [f"grounded_planner.ros.{p.stem}" for p in (REPO / "grounded_planner" / "ros").glob("*_node.py")]
    seen: set[str] = set()
    found: dict[str, set[str]] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _module_file(module)
        if path is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name.split(".")[0] == "grounded_planner":
                    parts = name.split(".")
                    todo.extend(
                        ".".join(parts[:i]) for i in range(2, len(parts) + 1) if _module_file(".".join(parts[:i]))
                    )
                elif name.split(".")[0] not in sys.stdlib_module_names:
                    found.setdefault(name.split(".")[0], set()).add(module)
    return found


def declared_keys() -> set[str]:
    root = ET.parse(REPO / "package.xml").getroot()
    return {e.text.strip() for e in root if e.tag in ("depend", "exec_depend") and e.text}


def test_every_module_the_nodes_import_has_its_rosdep_key_in_package_xml():
    imports = third_party_imports_of_nodes()
    assert {"rclpy", "rosbags", "httpx", "pyrealsense2", "mujoco"} <= set(imports)  # the scan sees the nodes' imports
    declared = declared_keys()
    unknown = {m: sorted(by) for m, by in imports.items() if m not in ROSDEP_KEYS and m not in OPTIONAL}
    assert not unknown, (
        f"modules with no rosdep key in this test's table (add the key to package.xml and here): {unknown}"
    )
    missing = {m: ROSDEP_KEYS[m] for m in imports if m in ROSDEP_KEYS and ROSDEP_KEYS[m] not in declared}
    assert not missing, f"package.xml lacks these rosdep keys (module: key): {missing}"


def test_optional_modules_are_imported_only_inside_functions():
    """An optional SDK at module level would break every node that imports the module on a plain ROS install."""
    imports = third_party_imports_of_nodes()
    for module in sorted(set(imports) & set(OPTIONAL)):
        for ours in imports[module]:
            tree = ast.parse(_module_file(ours).read_text(encoding="utf-8"))
            top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
            names |= {
                n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
            }
            assert module not in names, f"{ours} imports the optional {module} at module level ({OPTIONAL[module]})"
