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


@pytest.fixture(autouse=True)
def scheduling_left_as_found():
    """Fail a test that leaves the test process's thread real-time (SCHED_FIFO/RR), and put it back.

    libfranka raises the thread that runs a control loop to SCHED_FIFO 99 when it can (as root it can, whatever
    RealtimeConfig says: Ignore only stops the failure being an error). Left on pytest's thread, every later test
    and every process it starts inherits FIFO 99, and on 2 cores a busy FIFO process starves the rest of the
    machine (a CI run saw a load average of 47 and plans unanswered for 90 s)."""
    before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    yield
    after = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    if after != before:
        os.sched_setscheduler(0, before[0], os.sched_param(before[1]))
        pytest.fail(
            f"the test left this process's thread at scheduling policy {after[0]} priority {after[1]} (was "
            f"{before[0]} priority {before[1]}); every process started after it would inherit that",
            pytrace=False,
        )
