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
    colcon = f"rosdep install --from-paths src -y (key {rosdep_key})" if rosdep_key else \
        f"pip install {pip} beside ROS's Python"
    return f"pip install {pip} (a colcon install: {colcon}; this repository's venv: pip install -e '.[{extra}]')"
