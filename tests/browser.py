"""Debian's chromium, headless, through Selenium and chromium-driver (no download, no network).

Skips without chromium, except under CI=true where a missing browser fails the test.
Screenshots go to .ci/artifacts/ (gitignored), kept by CI as artifacts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / ".ci" / "artifacts"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage")


def _find() -> tuple[str, str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (Path(chromium).exists() and Path(driver).exists()):
        if os.environ.get("CI") == "true":
            pytest.fail("chromium and chromium-driver are required under CI=true")
        pytest.skip("chromium/chromium-driver not installed (apt-get install chromium "
                    "chromium-driver)")
    return chromium, driver


@pytest.fixture
def browser() -> Iterator[object]:
    """A headless chromium driven by Selenium, with a fresh profile."""
    chromium, driver = _find()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sentinel-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,1000")
    b = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    b.set_page_load_timeout(30)
    try:
        yield b
    finally:
        b.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(b: object, name: str) -> Path:
    """Save a full-page screenshot under .ci/artifacts/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    width = b.get_window_size()["width"]  # type: ignore[attr-defined]
    b.set_window_size(width, 600)  # type: ignore[attr-defined]
    height = b.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    b.set_window_size(width, min(max(int(height) + 120, 600), 6000))  # type: ignore[attr-defined]
    b.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path
