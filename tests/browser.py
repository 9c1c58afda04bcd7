"""A headless Chromium for the dashboard's browser tests (Debian's chromium and chromedriver,
through Selenium): `needs_browser` skips a module without them, `headless_chromium()` yields a
driver and quits it, `screenshot()` saves the whole page for the documentation."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

needs_browser = pytest.mark.skipif(
    not (CHROMIUM and DRIVER and HAVE_SELENIUM),
    reason="no headless browser: install Debian's chromium and chromium-driver "
    "(`apt-get install -y chromium chromium-driver`, as .ci/run does) and selenium",
)


def headless_chromium() -> Iterator[object]:
    """A Selenium Chrome driver on a 1400x1000 headless window, quit when the caller is done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-gpu"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def screenshot(browser, name: str) -> None:
    """The whole page (up to 2400 px high) as `name`.png in PERFCAST_UI_SCREENSHOTS when it is
    set (docs/img for the README), else nowhere. The window is made as tall as the page plus
    the browser's own frame (143 px in headless Chromium), which a window size includes and
    a screenshot does not."""
    folder = os.environ.get("PERFCAST_UI_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    frame = browser.execute_script("return window.outerHeight - window.innerHeight")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(max(height + 40, 600), 2400) + frame)
    browser.save_screenshot(str(Path(folder) / f"{name}.png"))
    browser.set_window_size(1400, 1000)
