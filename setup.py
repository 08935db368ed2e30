"""grounded_planner: an ament_python package that also installs with pip into a plain venv."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "grounded_planner"

# ROS 2 Kilted from the PyPI wheels, for machines with no ROS install (`make setup`).
# On a ROS install these come from the distribution instead (package.xml / rosdep).
ROS_WHEELS = [
    "ros-kilted-rclpy",
    "ros-kilted-rmw-fastrtps-cpp",
    "ros-kilted-std-msgs",
    "ros-kilted-std-srvs",
    "ros-kilted-sensor-msgs",
    "ros-kilted-geometry-msgs",
    "ros-kilted-visualization-msgs",
    "ros-kilted-diagnostic-msgs",  # rollout_logger_node reports on /diagnostics whether episodes are recorded
    "ros-kilted-lifecycle-msgs",
    "ros-kilted-action-msgs",
    "ros-kilted-service-msgs",  # executor_node reads its action server's introspection events (who cancelled)
    "ros-kilted-rosidl-default-runtime",
    # needed to build grounded_planner_interfaces with CMake into the venv
    "ros-kilted-rosidl-default-generators",
    "ros-kilted-rosidl-core-generators",
    "ros-kilted-ament-cmake",
    "ros-kilted-ament-cmake-include-directories",
    "ros-kilted-ament-cmake-ros",
    "ros-kilted-ament-cmake-ros-core",
    "ros-kilted-ament-package",
    "catkin-pkg",
]

# Every optional dependency lives here. `dev` (what `make setup` installs) is the union of the
# extras CI needs; heavy hardware SDKs stay out of it unless their tests need them.
EXTRAS = {
    "ros": ROS_WHEELS,
    "test": [
        "pytest>=8",
        "hypothesis>=6.100",
        "pytest-timeout>=2.3",
        "colcon-common-extensions",  # the ROS-install path (colcon build) is checked by a test
        # drives Debian's chromium + chromium-driver (scripts/apt-packages.txt) in the console's browser tests;
        # 4.52 needs a certifi newer than the package index has here
        "selenium>=4.30,<4.52",
    ],
    # one line per layer; keep each layer's optional dependencies on its own line
    "vlm": ["httpx>=0.27,<1", "google-genai>=3.0,<4"],  # OpenAI-compatible HTTP backend; Gemini SDK (retry options)
    # in-process Qwen3-VL (+LoRA). torch 2.14.1 + torchvision 0.29.1 (a matching pair on this machine kind's local
    # wheel mirror, CUDA build, runs on CPU): LeRobot's robot and dataset modules import torchvision, and PyPI's
    # torchvision does not import beside the CPU-only torch 2.13.0 wheel (its C ops link the CUDA torch libraries)
    "ml": ["torch==2.14.1", "torchvision==0.29.1", "transformers>=5.20,<6", "peft>=0.18,<1"],
    "geometry": [
        "opencv-python-headless>=4.10,<5",
        "pyrealsense2>=2.55",
    ],  # ChArUco/hand-eye; RealSense reference deprojection (bench, tests)
    "bench": [],
    # franky: FR3/Panda over libfranka (tested against franky-sim on localhost); placo: SO-101 IK (what
    # LeRobot's RobotKinematics wraps). The SO-101 URDF/MJCF is installed --no-deps by scripts/setup.sh.
    "execution": ["franky-control>=2.0", "franky-sim>=1.0.4", "placo>=0.9.6"],
    # what LeRobot 0.4.4's SOFollower, FeetechMotorsBus and LeRobotDataset import, beside the ml extra's torch and
    # torchvision; lerobot itself is installed --no-deps by scripts/setup.sh (its metadata pins torch<2.11 and
    # pulls wandb, rerun, diffusers, gymnasium, ... that none of these modules import)
    "lerobot": [
        "draccus==0.10.0",
        "deepdiff>=7.0.1,<9",
        "datasets>=4.0,<5",
        "einops>=0.8,<0.9",
        "feetech-servo-sdk>=1.0,<2",
        "pyserial>=3.5,<4",
    ],
    # the operator console's web server and push channel (console_node): aiohttp, ~2 MB with its small pure-Python
    # deps (multidict, yarl, frozenlist, aiosignal, propcache, attrs), already pulled in by datasets' fsspec[http];
    # OpenCV (as the geometry extra's) encodes the live JPEGs with the GIL released (Pillow's encoder holds it);
    # rosbags (as the nodes extra's) reads the live camera images from their CDR bytes (ros.frames.read_cdr)
    "console": ["aiohttp>=3.9,<4", "opencv-python-headless>=4.10,<5", "rosbags>=0.10"],
    "sim": ["mujoco>=3.2,<5"],  # physics + headless EGL rendering of the simulated workcell
    # bags without rclpy; plots; mcap: the bag writer and reference reader; zlib-ng: the same CRC-32 as zlib, ~4x
    # faster (one ~0.3 MB wheel), for the CRC of every chunk the writer computes (bag_write.fast_crc)
    "rollout": [
        "rosbags>=0.10",
        "matplotlib>=3.7",
        "mcap>=1.1",
        "zlib-ng>=0.5,<2",
    ],
    "v2gp": ["pyarrow>=15", "av>=12"],  # LeRobot parquet + MP4 frames (PyAV); fine-tuning uses the ml extra
    "nodes": ["pyrealsense2>=2.55", "rosbags>=0.10"],  # camera_node (software_device in tests), bag_player_node
    # scale-out: V2GP episodes on Ray actors (a local cluster in tests); fine-tuning on transformers' Trainer with
    # accelerate (multi-process data parallel, FSDP/DeepSpeed configs), logging to TensorBoard. Not TRL: its
    # SFTTrainer (1.16) refuses a LoRA on lm_head and computes the loss through its own fused head (docs/scale.md)
    "scale": ["ray>=2.40,<3", "accelerate>=1.4,<2", "tensorboard>=2.16,<3"],
    # `make lint` (ruff.toml): lint and format check; pinned so that a new ruff's new rules do not fail CI unasked
    "lint": ["ruff==0.17.5"],  # one static binary, ~12 MB
}
# What `make setup` installs (CI included): every extra above unless listed in HEAVY_EXTRAS.
HEAVY_EXTRAS: list[str] = []
DEV_EXTRAS = [name for name in EXTRAS if name not in HEAVY_EXTRAS]
EXTRAS["dev"] = sorted({req for name in DEV_EXTRAS for req in EXTRAS[name]})

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    # the console's page, script and style ship in the package: it works with no network (no CDN)
    package_data={"grounded_planner.console": ["static/*.html", "static/*.js", "static/*.css"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/launch", glob("launch/*.py")),
        ("share/" + PACKAGE + "/config", glob("config/*.yaml") + glob("config/*.xml")),
        ("share/" + PACKAGE + "/config/scenarios", glob("config/scenarios/*.yaml")),
        ("share/" + PACKAGE + "/config/rviz", glob("config/rviz/*.rviz")),
        ("share/" + PACKAGE + "/config/foxglove", glob("config/foxglove/*.json")),
        ("share/" + PACKAGE + "/calibration", glob("calibration/*.yaml")),
    ],
    install_requires=["numpy>=1.24", "pyyaml>=6", "pillow>=10", "setuptools"],
    extras_require=EXTRAS,
    python_requires=">=3.10",
    zip_safe=True,
    maintainer="grounded_planner maintainers",
    maintainer_email="maintainers@grounded-planner.org",
    description="Execution stack for spatially grounded plans from vision-language models.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "grounded-planner = grounded_planner.cli.main:main",
            "camera_node = grounded_planner.ros.camera_node:main",
            "bag_player_node = grounded_planner.ros.bag_player_node:main",
            "planner_node = grounded_planner.ros.planner_node:main",
            "backprojection_node = grounded_planner.ros.backprojection_node:main",
            "rollout_logger_node = grounded_planner.ros.rollout_logger_node:main",
            "executor_node = grounded_planner.ros.executor_node:main",
            "console_node = grounded_planner.ros.console_node:main",
        ],
    },
)
