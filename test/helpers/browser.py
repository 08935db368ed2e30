"""Headless Chromium (Debian's chromium + chromium-driver) driven by Selenium, for the console's browser tests and
benchmark; screenshots go to the git-ignored out/ folder as test artefacts."""

from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO

SHOTS = REPO / "out" / "console"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

requires_browser = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER and importlib.util.find_spec("selenium")),
    reason="needs Debian's chromium and chromium-driver (scripts/apt-packages.txt) and selenium (test extra)",
)


def chromium(width: int = 1400, height: int = 1000, nice: int = 0):
    """A headless Chromium under chromedriver; no network but loopback is used (the console ships its files).
    ``nice``: the browser's processes run at that nice value (a benchmark's stand-in for a browser on another
    machine: it takes the CPUs only when the stack leaves them)."""
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    if nice:
        wrapper = Path(tempfile.mkdtemp(prefix="chromium_nice_")) / "chromium"
        wrapper.write_text(f'#!/bin/sh\nexec nice -n {int(nice)} {CHROMIUM} "$@"\n')
        wrapper.chmod(0o755)
        options.binary_location = str(wrapper)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--no-proxy-server",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, driver=None, shot: str = ""):
    """Poll ``predicate`` until it is truthy; on timeout save a screenshot (when ``driver``) and fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a page still loading raises StaleElement/NoSuchElement
            last_error = exc
        time.sleep(0.05)
    if driver is not None:
        screenshot(driver, shot or "timeout")
    raise AssertionError(
        f"timed out after {timeout_s:g} s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )


def screenshot(driver, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
