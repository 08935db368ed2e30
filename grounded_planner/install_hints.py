"""What to install for an optional dependency, said right for both ways the project is installed.

A colcon install (a ROS workspace) has no pip extras: rosdep installs the keys ``package.xml`` declares, and
anything else is a plain ``pip install`` beside ROS's Python. A source checkout's venv (``make setup``) has the
extras of ``setup.py``. One message names both, so that neither reader is sent to a command that does not exist.
"""

from __future__ import annotations


def install_hint(pip: str, extra: str, rosdep_key: str = "") -> str:
    """``pip`` (the PyPI names), ``extra`` (setup.py's extra that holds them), ``rosdep_key`` (package.xml's key,
    when it declares one): ``"pip install franky-control (a colcon install: pip install franky-control beside ROS's
    Python; this repository's venv: pip install -e '.[execution]')"``."""
    colcon = (
        f"rosdep install --from-paths src -y (key {rosdep_key})"
        if rosdep_key
        else f"pip install {pip} beside ROS's Python"
    )
    return f"pip install {pip} (a colcon install: {colcon}; this repository's venv: pip install -e '.[{extra}]')"


# Import name -> (PyPI name, setup.py extra) of the optional packages (setup.py's EXTRAS), so that a missing one that
# reaches the command line as a bare ModuleNotFoundError is named with what to install.
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "httpx": ("httpx", "vlm"),
    "google": ("google-genai", "vlm"),
    "torch": ("torch", "ml"),
    "torchvision": ("torchvision", "ml"),
    "transformers": ("transformers", "ml"),
    "peft": ("peft", "ml"),
    "cv2": ("opencv-python-headless", "geometry"),
    "pyrealsense2": ("pyrealsense2", "geometry"),
    "franky": ("franky-control", "execution"),
    "placo": ("placo", "execution"),
    "draccus": ("draccus", "lerobot"),
    "datasets": ("datasets", "lerobot"),
    "scservo_sdk": ("feetech-servo-sdk", "lerobot"),
    "serial": ("pyserial", "lerobot"),
    "aiohttp": ("aiohttp", "console"),
    "mujoco": ("mujoco", "sim"),
    "rosbags": ("rosbags", "rollout"),
    "matplotlib": ("matplotlib", "rollout"),
    "mcap": ("mcap", "rollout"),
    "pyarrow": ("pyarrow", "v2gp"),
    "av": ("av", "v2gp"),
    "ray": ("ray", "scale"),
    "accelerate": ("accelerate", "scale"),
    "tensorboard": ("tensorboard", "scale"),
}


def missing_module_hint(module: str) -> str:
    """What to install for an import of ``module`` that failed: the extra's hint for an optional package of
    setup.py, ROS's for rclpy and message packages, else a plain ``pip install``."""
    top = module.split(".")[0]
    if top in OPTIONAL_MODULES:
        return install_hint(*OPTIONAL_MODULES[top])
    if top in ("rclpy", "launch", "launch_ros", "grounded_planner_interfaces") or top.endswith("_msgs"):
        return (
            "source a ROS 2 installation (source /opt/ros/<distro>/setup.bash) or, in this repository's venv, "
            "pip install -e '.[ros]' and build grounded_planner_interfaces (make setup)"
        )
    return f"pip install {top}"
