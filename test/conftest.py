"""Shared fixtures: an isolated ROS 2 graph per test (own random domain id, localhost only)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ros_available() -> bool:
    try:
        import rclpy  # noqa: F401
        import grounded_planner_interfaces.srv  # noqa: F401
    except Exception:
        return False
    return True


requires_ros = pytest.mark.skipif(
    not ros_available(), reason="rclpy or grounded_planner_interfaces not importable (run `make setup`)"
)


@pytest.fixture
def ros_domain(monkeypatch) -> int:
    """A random ROS_DOMAIN_ID and localhost-only discovery for this test and its child processes."""
    domain = random.SystemRandom().randint(1, 200)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.setenv("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    return domain


@pytest.fixture
def rclpy_context(ros_domain):
    """An initialised rclpy context of its own, shut down after the test."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context, domain_id=ros_domain)
    try:
        yield context
    finally:
        if context.ok():
            rclpy.shutdown(context=context)


def spawn_python(code_or_args: list[str], **kwargs) -> subprocess.Popen:
    """Start `python ARGS...` of this venv as a child process (inherits ROS_DOMAIN_ID)."""
    return subprocess.Popen(
        [sys.executable, *code_or_args],
        cwd=REPO,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


class _ParserBugs:
    """Collects the parser's "parser bug" log records: parse_plan/parse_location turn any crash into a ParseError
    with rule ``internal``, which a test that only expects *a* ParseError would take for a refusal."""

    def __init__(self):
        import logging

        self.records: list = []
        self.handler = logging.Handler(logging.ERROR)
        self.handler.emit = self.records.append


@pytest.fixture(autouse=True)
def no_parser_bugs(request):
    """Fail every test during which the VLM parser crashed (rule ``internal``), whatever the test expected.
    A test that means to reach the catch-all marks itself ``parser_bug_expected``."""
    import logging

    bugs = _ParserBugs()
    logger = logging.getLogger("grounded_planner.vlm.parse")
    logger.addHandler(bugs.handler)
    try:
        yield bugs
    finally:
        logger.removeHandler(bugs.handler)
    crashes = [
        r.getMessage() + (f": {r.exc_info[1]!r}" if r.exc_info else "")
        for r in bugs.records
        if r.getMessage().startswith("parser bug")
    ]
    if crashes and not request.node.get_closest_marker("parser_bug_expected"):
        pytest.fail(
            f"the VLM parser crashed (ParseError rule 'internal') {len(crashes)} time(s): {crashes[:3]}", pytrace=False
        )
