"""The page in a real browser: Debian's chromium, headless, driven by selenium through
Debian's chromedriver. Types a sentence, clicks Translate, finds the translation and a
drawn heatmap, and switches layer and head.

Skipped (with the reason) only where chromium or its driver is not installed; install
them with `apt-get install -y chromium chromium-driver` (the Makefile's browser step)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from transformer_mt.server import Limits, TranslationService, create_app
from transformer_mt.server.background import BackgroundServer
from transformer_mt.translator import Translator

CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", shutil.which("chromedriver") or "/usr/bin/chromedriver")
SENTENCE = "w3 w1 w4 w1 w5"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")

if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
    pytest.skip(
        f"chromium ({CHROMIUM}) or chromedriver ({CHROMEDRIVER}) not found: "
        "apt-get install -y chromium chromium-driver",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

PAINTED = """
const canvas = document.getElementById('heatmap');
const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let painted = 0;
for (let i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) painted++; }
return painted;
"""


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def page_url(translator: Translator):
    with BackgroundServer(create_app(TranslationService(translator, "tiny", Limits()))) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1200,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except Exception as err:  # a broken local install: say why instead of failing obscurely
        pytest.skip(f"chromium did not start headless: {str(err).splitlines()[0]}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_type_translate_and_see_the_heatmap(browser, page_url: str, translator: Translator, tmp_path: Path) -> None:
    expected = translator.translate([SENTENCE])[0]  # before the page uses the shared model
    browser.get(page_url + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: "layers" in d.find_element(By.ID, "model-info").text)
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .translation"))
    assert browser.find_element(By.CSS_SELECTOR, "#output .translation").text == expected

    heatmap = browser.find_element(By.ID, "heatmap")
    wait.until(lambda d: heatmap.get_attribute("data-rows"))
    assert browser.find_element(By.ID, "attention-panel").is_displayed()
    assert int(heatmap.get_attribute("data-cols")) == len(translator.tokenizer.pieces(SENTENCE)) + 1
    assert int(heatmap.get_attribute("data-rows")) >= 1
    assert browser.execute_script(PAINTED) > 1000
    assert heatmap.get_attribute("data-view") == "1,1"

    Select(browser.find_element(By.ID, "layer")).select_by_visible_text("layer 2")
    Select(browser.find_element(By.ID, "head")).select_by_visible_text("head 2")
    assert heatmap.get_attribute("data-view") == "2,2"
    assert browser.execute_script(PAINTED) > 1000
    browser.save_screenshot(str(tmp_path / "page.png"))
    assert not browser.find_element(By.ID, "error").is_displayed()


def test_an_error_is_shown_on_the_page(browser, page_url: str) -> None:
    browser.get(page_url + "/")
    browser.find_element(By.ID, "source").send_keys("w1 " * 800)
    browser.find_element(By.ID, "translate").click()
    error = browser.find_element(By.ID, "error")
    WebDriverWait(browser, 30).until(lambda d: error.is_displayed())
    assert "at most 2000" in error.text
