"""The page in a real browser: Debian's chromium, headless, driven by selenium through
Debian's chromedriver. Types a sentence, clicks Translate, finds the translation and a
drawn heatmap, and switches layer and head; switches the attention kind, opens the
all-heads overview and equation 1 for one cell; steps through the decoding and forces a
candidate (checked against the JSON API of the same server).

Skipped (with the reason) only where chromium or its driver is not installed; install
them with `apt-get install -y chromium chromium-driver` (the Makefile's browser step)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from browser_support import PAINTED, assert_clean, chromium, click_cell, open_page, waiting
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from transformer_mt.server import TranslateLimits, TranslationService, create_app
from transformer_mt.server.background import BackgroundServer
from transformer_mt.inference.translator import Translator

SENTENCE = "w3 w1 w4 w1 w5"


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def page_url(translator: Translator):
    with BackgroundServer(create_app(TranslationService(translator, "tiny", TranslateLimits()))) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    yield from chromium(tmp_path_factory.mktemp("chromium"))


def test_type_translate_and_see_the_heatmap(browser, page_url: str, translator: Translator, tmp_path: Path) -> None:
    expected = translator.translate([SENTENCE])[0]  # before the page uses the shared model
    wait = open_page(browser, page_url)
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
    # set, not typed: typing 2,400 characters takes seconds
    browser.execute_script("document.getElementById('source').value = arguments[0];", "w1 " * 800)
    browser.find_element(By.ID, "translate").click()
    error = browser.find_element(By.ID, "error")
    waiting(browser).until(lambda d: error.is_displayed())
    assert "at most 2000" in error.text


def test_every_attention_all_heads_and_equation_1(browser, page_url: str, translator: Translator) -> None:
    wait = open_page(browser, page_url)
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    browser.find_element(By.ID, "beam").clear()
    browser.find_element(By.ID, "beam").send_keys("1")
    browser.find_element(By.ID, "translate").click()
    heatmap = browser.find_element(By.ID, "heatmap")
    wait.until(lambda d: heatmap.get_attribute("data-rows"))
    answer = httpx.post(page_url + "/api/translate", json={"text": SENTENCE, "beam": 1, "attention": True}).json()
    attention = answer["results"][0]["attention"]
    n_source, n_target = len(attention["source_tokens"]), len(attention["target_tokens"])

    kind = Select(browser.find_element(By.ID, "kind"))
    kind.select_by_value("encoder")
    assert heatmap.get_attribute("data-kind") == "encoder"
    assert (heatmap.get_attribute("data-rows"), heatmap.get_attribute("data-cols")) == (str(n_source), str(n_source))
    assert browser.execute_script(PAINTED) > 1000
    assert browser.find_element(By.ID, "attention-title").text == "Encoder self-attention"
    kind.select_by_value("decoder")
    assert heatmap.get_attribute("data-kind") == "decoder"
    assert (heatmap.get_attribute("data-rows"), heatmap.get_attribute("data-cols")) == (str(n_target), str(n_target))
    assert browser.execute_script(PAINTED) > 1000

    # every layer x head as a thumbnail; a click shows that head in the big map
    browser.find_element(By.ID, "all-heads-toggle").click()
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#all-heads .thumb canvas")
    assert len(thumbs) == attention["layers"] * attention["heads"]
    last = browser.find_elements(By.CSS_SELECTOR, "#all-heads .thumb")[-1]
    last.click()
    assert heatmap.get_attribute("data-view") == f"{attention['layers']},{attention['heads']}"
    assert browser.find_elements(By.CSS_SELECTOR, "#all-heads .thumb")[-1].get_attribute("aria-pressed") == "true"

    # equation 1 for one cell of the decoder's self-attention: the numbers of /api/explain
    layer, head, query, key = attention["layers"] - 1, attention["heads"] - 1, 1, 0
    click_cell(browser, query, key)
    wait.until(lambda d: d.find_elements(By.ID, "explain-weight"))
    explained = httpx.post(page_url + "/api/explain", json={
        "text": SENTENCE, "target_tokens": attention["target_tokens"], "kind": "decoder",
        "layer": layer, "head": head, "query": query}).json()
    shown = {name: float(browser.find_element(By.ID, f"explain-{name}").get_attribute("data-value"))
             for name in ("dot", "scaled", "weight")}
    assert shown == pytest.approx({"dot": explained["dot"][key], "scaled": explained["scaled"][key],
                                   "weight": explained["weights"][key]}, abs=1e-6)
    assert browser.find_element(By.ID, "explain-weight").text == f"{explained['weights'][key]:.4f}"
    assert browser.find_element(By.ID, "explain-dk").text == str(explained["d_k"])
    assert browser.find_element(By.ID, "explain-mask").text == "may attend"
    assert explained["weights"][key] == pytest.approx(attention["decoder"][layer][head][query][key], abs=1e-3)
    panel = browser.find_element(By.ID, "explain")
    assert "softmax(QKᵀ / √d_k) V" in panel.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#explain-table tr.explain-row")
    assert len(rows) == n_target and "current" in rows[key].get_attribute("class")
    click_cell(browser, 0, 1)  # a future position: masked
    wait.until(lambda d: d.find_elements(By.ID, "explain-mask")
               and d.find_element(By.ID, "explain-mask").text == "masked")
    assert float(browser.find_element(By.ID, "explain-weight").get_attribute("data-value")) == 0.0
    assert_clean(browser, page_url)


def test_step_through_and_force_a_candidate(browser, page_url: str, translator: Translator) -> None:
    wait = open_page(browser, page_url)
    browser.find_element(By.ID, "source").send_keys(SENTENCE)
    browser.find_element(By.ID, "beam").clear()
    browser.find_element(By.ID, "beam").send_keys("2")
    browser.find_element(By.ID, "step-through").click()
    translation = browser.find_element(By.ID, "steps-translation")
    wait.until(lambda d: translation.text)
    free = httpx.post(page_url + "/api/steps", json={"text": SENTENCE, "beam": 2}).json()
    assert translation.text == free["translation"]
    slider = browser.find_element(By.ID, "steps-slider")
    assert slider.get_attribute("value") == "1" and slider.get_attribute("max") == str(len(free["steps"]))
    assert len(free["steps"]) >= 3

    for expected in (2, 3):
        browser.find_element(By.ID, "steps-next").click()
        assert slider.get_attribute("value") == str(expected)
    assert browser.find_element(By.ID, "steps-label").text == f"step 3 of {len(free['steps'])}"
    bars = browser.find_elements(By.CSS_SELECTOR, "#steps-bars .bar")
    assert [b.get_attribute("data-token") for b in bars] == [t["token"] for t in free["steps"][2]["top_k"]]
    nodes = browser.find_elements(By.CSS_SELECTOR, "#steps-tree .node")
    assert len(nodes) == 1 + sum(len(s["hypotheses"]) for s in free["steps"][:3])  # <s> + 3 columns
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps-cross .strip-cell")) == len(free["source_tokens"])
    browser.find_element(By.ID, "steps-prev").click()
    assert slider.get_attribute("value") == "2"

    # force, at step 2, a candidate other than the model's choice
    step = free["steps"][1]
    index = next(i for i, t in enumerate(step["top_k"]) if i > 0 and t["token"] not in ("</s>", step["chosen"]["token"]))
    token = step["top_k"][index]["token"]
    best_kept = next(h for h in free["steps"][0]["hypotheses"] if h["status"] == "kept")
    prefix = best_kept["tokens"] + [token]
    browser.find_elements(By.CSS_SELECTOR, "#steps-bars .bar")[index].click()
    wait.until(lambda d: d.find_element(By.ID, "steps-prefix").is_displayed())
    forced = httpx.post(page_url + "/api/steps", json={"text": SENTENCE, "beam": 2, "prefix": prefix}).json()
    assert forced["target_tokens"][: len(prefix)] == prefix
    wait.until(lambda d: translation.text == forced["translation"])
    assert forced["translation"].startswith("".join(prefix).replace("▁", " ").strip())
    assert forced["translation"] != free["translation"]
    assert slider.get_attribute("value") == str(len(prefix))  # the page stays at the forced step
    chips = browser.find_elements(By.CSS_SELECTOR, "#steps-prefix-tokens .chip")
    assert [c.text for c in chips] == prefix

    # the slider itself moves through the steps
    browser.execute_script("const s = document.getElementById('steps-slider'); s.value = 1;"
                           "s.dispatchEvent(new Event('input'));")
    assert browser.find_element(By.ID, "steps-label").text.startswith("step 1 of")
    browser.find_element(By.ID, "steps-clear").click()
    wait.until(lambda d: not d.find_element(By.ID, "steps-prefix").is_displayed())
    assert translation.text == free["translation"]
    assert_clean(browser, page_url)


def test_the_page_opens_with_the_runs_example_translated(browser, tiny_run: Path, translator: Translator) -> None:
    from transformer_mt.server.translation_service import example_sentence

    example = example_sentence(tiny_run, TranslateLimits().max_chars)
    assert example, "the tiny run has validation text"
    expected = translator.translate([example])[0]
    with BackgroundServer(create_app(TranslationService(translator, "tiny", TranslateLimits(), example))) as url:
        browser.get(url + "/")
        wait = waiting(browser)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#output .translation"))  # nothing clicked
        assert browser.find_element(By.ID, "source").get_attribute("value") == example
        assert browser.find_element(By.CSS_SELECTOR, "#output .translation").text == expected
        assert not browser.find_element(By.ID, "error").is_displayed()
