"""Debian's chromium, headless, through Selenium and chromium-driver (no download, no network).

Skips without chromium, except under CI=true where a missing browser fails the test.
Screenshots go to .ci/artifacts/ (gitignored), kept by CI as artifacts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / ".ci" / "artifacts"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage")
T = TypeVar("T")


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


# A page that navigates (a form's redirect, the list's live update) detaches the nodes a
# test looked up a moment before; chromedriver then answers a stale element, or, when the
# document is being swapped at that instant, this inspector error. Both mean "look again".
DETACHED = ("does not belong to the document", "No node with given id",
            "Node is detached from document", "Cannot find context with specified id")


def detached(exc: BaseException) -> bool:
    """Whether a Selenium error means the node left the document (look it up again)."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )

    if isinstance(exc, StaleElementReferenceException | NoSuchElementException):
        return True
    return isinstance(exc, WebDriverException) and any(m in str(exc) for m in DETACHED)


def settled(act: Callable[[], T], what: str, timeout_s: float = 20.0) -> T:
    """act() (a lookup and what is done with the element), tried again while the page
    swaps the node under it or has not shown it yet; fail with `what` after timeout_s."""
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return act()
        except WebDriverException as exc:
            if not detached(exc) or time.monotonic() >= deadline:
                raise AssertionError(f"{what}: {exc}") from exc
        time.sleep(0.05)


def click(b: Any, by: str, value: str, timeout_s: float = 20.0) -> None:
    """Find the element and click it, again if it is replaced between the two."""
    settled(lambda: b.find_element(by, value).click(), f"clicking {by}={value}", timeout_s)


def type_into(b: Any, by: str, value: str, text: str, clear: bool = False) -> None:
    """Find a field and type `text` into it (cleared first if asked), again if replaced."""
    def act() -> None:
        field = b.find_element(by, value)
        if clear:
            field.clear()
        field.send_keys(text)
    settled(act, f"typing into {by}={value}")


def text_of(b: Any, by: str, value: str) -> str:
    """The shown text of the element, read again if it is replaced while being read."""
    return settled(lambda: str(b.find_element(by, value).text), f"reading {by}={value}")


def attr_of(b: Any, by: str, value: str, name: str) -> str | None:
    """An attribute of the element, read again if it is replaced while being read."""
    return settled(lambda: b.find_element(by, value).get_attribute(name),
                   f"reading {name} of {by}={value}")


def gone(element: Any) -> bool:
    """Whether a looked-up element has left the document (its page was replaced)."""
    from selenium.common.exceptions import WebDriverException

    try:
        element.tag_name  # noqa: B018
        return False
    except WebDriverException as exc:
        if detached(exc):
            return True
        raise


def loaded(b: Any) -> bool:
    """Whether the current document has finished loading (False while it is swapped)."""
    from selenium.common.exceptions import WebDriverException

    try:
        return bool(b.execute_script("return document.readyState") == "complete")
    except WebDriverException as exc:
        if detached(exc):
            return False
        raise


def present(b: Any, by: str, value: str) -> list[Any]:
    """The elements found now ([] while the document is being swapped): poll it."""
    from selenium.common.exceptions import WebDriverException

    try:
        return list(b.find_elements(by, value))
    except WebDriverException as exc:
        if detached(exc):
            return []
        raise
