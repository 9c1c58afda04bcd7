"""A headless Chromium for the dashboard's browser tests (Debian's chromium and chromedriver,
through Selenium): `needs_browser` skips a module without them, `headless_chromium()` yields a
driver and quits it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

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
