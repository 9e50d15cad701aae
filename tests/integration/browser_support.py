"""What the browser tests share (test_browser.py: the translation view, test_lm_browser.py:
the generate view): Debian's chromium, headless, driven by selenium through Debian's
chromedriver, and helpers that read the page.

Importing this module skips the importing test module (with the reason) where selenium,
chromium or its driver is not installed; install them with
`apt-get install -y chromium chromium-driver` (the Makefile's browser step)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", shutil.which("chromedriver") or "/usr/bin/chromedriver")

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")

if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
    pytest.skip(
        f"chromium ({CHROMIUM}) or chromedriver ({CHROMEDRIVER}) not found: "
        "apt-get install -y chromium chromium-driver",
        allow_module_level=True,
    )

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PAINTED = """
const canvas = document.getElementById('heatmap');
const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let painted = 0;
for (let i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) painted++; }
return painted;
"""


def chromium(profile: Path) -> Iterator:
    """A headless chromium with its own profile folder, for a module-scoped fixture to yield
    from; skips the tests with the reason when the local install cannot start it."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1200,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})  # script errors, failed loads
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except Exception as err:  # a broken local install: say why instead of failing obscurely
        pytest.skip(f"chromium did not start headless: {str(err).splitlines()[0]}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def waiting(browser) -> WebDriverWait:
    """A wait of up to 30 s that looks every 50 ms: selenium's default, every 0.5 s, makes each
    wait up to half a second longer than the page needs."""
    return WebDriverWait(browser, 30, poll_frequency=0.05)


def open_page(browser, page_url: str) -> WebDriverWait:
    """Load the page, wait until it describes the model, and empty the console."""
    browser.get(page_url + "/")
    wait = waiting(browser)
    wait.until(lambda d: "layers" in d.find_element(By.ID, "model-info").text)
    browser.get_log("browser")  # start with an empty console
    return wait


def assert_clean(browser, page_url: str, error_id: str = "error") -> None:
    """No error on the page (the view's error line `error_id`) or in the console, and nothing
    loaded from another origin."""
    assert not browser.find_element(By.ID, error_id).is_displayed()
    assert [entry["message"] for entry in browser.get_log("browser")] == []
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(page_url + "/") for url in loaded)


def click_cell(browser, row: int, col: int) -> None:
    """Click the centre of one heatmap cell (the canvas says where its cells are)."""
    heatmap = browser.find_element(By.ID, "heatmap")
    left, top, cell = (float(v) for v in heatmap.get_attribute("data-box").split(","))
    size = heatmap.size  # offsets are from the element's centre
    x = left + (col + 0.5) * cell - size["width"] / 2
    y = top + (row + 0.5) * cell - size["height"] / 2
    ActionChains(browser).move_to_element_with_offset(heatmap, int(x), int(y)).click().perform()
