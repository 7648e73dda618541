"""Headless Chromium for the memory browser's tests: the system's browser and driver, never a
download (selenium-manager is never asked), a fresh profile each time, no network but loopback."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"  # Debian's package `chromium`
CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian's package `chromium-driver`
REBOUND_HOST = "rebound.test"  # a name the browser resolves to 127.0.0.1, as DNS rebinding would
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
    f"--host-resolver-rules=MAP {REBOUND_HOST} 127.0.0.1",
)


@contextmanager
def chromium() -> Iterator[Any]:
    """A WebDriver session on headless Chromium; skipped where the browser is not installed."""
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(
            f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="forged-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # with the driver's path below: selenium-manager stays idle
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
