"""The generate view in a real browser (headless chromium, as test_browser.py), on a
language-model run: types a prompt, steps (greedy), sees the bars, moves the temperature
slider and finds the top probability softmax(z / T) predicts, clicks a candidate and finds
the sequence grown by it, samples, opens the all-heads overview and equation 1 for a cell,
and generates a whole line; every number is checked against the JSON API of the same server.

Skipped (with the reason) only where chromium or its driver is not installed."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
from browser_support import PAINTED, assert_clean, chromium, click_cell, open_page
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from transformer_mt.inference.language_model import LanguageModel
from transformer_mt.server import LanguageModelService, create_app
from transformer_mt.server.background import BackgroundServer

PROMPT = "eight thousand nine hundred"


@pytest.fixture(scope="module")
def lm(lm_run: Path) -> LanguageModel:
    return LanguageModel.from_run(lm_run, device="cpu")


@pytest.fixture(scope="module")
def page_url(lm: LanguageModel):
    with BackgroundServer(create_app(LanguageModelService(lm, "lm"))) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    yield from chromium(tmp_path_factory.mktemp("chromium"))


def api_step(url: str, forced: list[int]) -> dict:
    return httpx.post(url + "/api/generate/step", json={"prompt": PROMPT, "forced": forced}, timeout=30).json()


def probs_at(data: dict, index: int) -> list[float]:
    """softmax(z / T) of the candidates at the temperature number `index`, from the answer's
    logits and the log-sum-exp of the other tokens (what the page must show)."""
    t = data["temperatures"][index]
    scaled = [c["logit"] / t for c in data["candidates"]]
    top = max(scaled)
    lse = top + math.log(sum(math.exp(z - top) for z in scaled))
    if data["tail_logsumexp"]:
        tail = data["tail_logsumexp"][index]
        lse = max(lse, tail) + math.log1p(math.exp(-abs(lse - tail)))
    return [math.exp(z - lse) for z in scaled]


def sequence_ids(browser) -> list[int]:
    """The ids of the chosen tokens on show, read in one script (the chips are redrawn on each answer)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#lm-sequence .chosen'), (c) => Number(c.dataset.id));")


def bars(browser) -> list:
    return browser.find_elements(By.CSS_SELECTOR, "#lm-bars .bar")


def test_step_slide_force_and_explain(browser, page_url: str, lm: LanguageModel) -> None:
    wait = open_page(browser, page_url)
    assert browser.find_element(By.ID, "lm-prompt").is_displayed()
    assert not browser.find_element(By.ID, "source").is_displayed()  # the translation view is not shown
    browser.find_element(By.ID, "lm-prompt").send_keys(PROMPT)
    browser.find_element(By.ID, "lm-step").click()
    wait.until(lambda d: len(sequence_ids(d)) == 1)
    greedy = api_step(page_url, [])["candidates"][0]["id"]
    assert sequence_ids(browser) == [greedy]
    data = api_step(page_url, [greedy])
    shown = bars(browser)
    assert [int(b.get_attribute("data-id")) for b in shown] == [c["id"] for c in data["candidates"][:10]]
    top = float(shown[0].get_attribute("data-prob"))
    assert top == pytest.approx(math.exp(data["candidates"][0]["logit"] - data["logsumexp"]), abs=1e-9)

    slider = browser.find_element(By.ID, "lm-temperature")
    for _ in range(5):
        slider.send_keys(Keys.ARROW_LEFT)  # T 1.0 -> 0.5
    assert browser.find_element(By.ID, "lm-temperature-value").text == "T = 0.5"
    index = data["temperatures"].index(0.5)
    cooled = float(bars(browser)[0].get_attribute("data-prob"))
    assert cooled == pytest.approx(probs_at(data, index)[0], abs=1e-9) and cooled > top
    assert [float(b.get_attribute("data-prob")) for b in bars(browser)] == pytest.approx(probs_at(data, index)[:10])

    choice = next(c for c in data["candidates"][1:10] if c["id"] != lm.eot)
    bars(browser)[data["candidates"].index(choice)].click()
    wait.until(lambda d: len(sequence_ids(d)) == 2)
    assert sequence_ids(browser) == [greedy, choice["id"]]
    chips = browser.find_elements(By.CSS_SELECTOR, "#lm-sequence .chip")
    assert chips[-1].text == choice["token"].strip() and len(chips) == len(data["tokens"]) + 1
    forced = api_step(page_url, [greedy, choice["id"]])
    assert browser.find_element(By.ID, "lm-text").text == forced["text"]
    assert_heads_and_equation_1(browser, wait, page_url, forced)
    assert_clean(browser, page_url, "lm-error")


def assert_heads_and_equation_1(browser, wait: WebDriverWait, page_url: str, data: dict) -> None:
    """The heatmap is the causal self-attention of the sequence; the overview has every head;
    equation 1 of a cell has the numbers of /api/generate/explain."""
    heatmap = browser.find_element(By.ID, "heatmap")
    n = len(data["tokens"])
    assert (heatmap.get_attribute("data-rows"), heatmap.get_attribute("data-kind")) == (str(n), "causal")
    assert browser.execute_script(PAINTED) > 1000
    browser.find_element(By.ID, "all-heads-toggle").click()
    layers, heads = data["attention"]["layers"], data["attention"]["heads"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#all-heads .thumb canvas")) == layers * heads
    browser.find_elements(By.CSS_SELECTOR, "#all-heads .thumb")[-1].click()
    assert heatmap.get_attribute("data-view") == f"{layers},{heads}"

    query, key = n - 1, 1
    click_cell(browser, query, key)
    wait.until(lambda d: d.find_elements(By.ID, "explain-weight"))
    explained = httpx.post(page_url + "/api/generate/explain", json={
        "prompt": PROMPT, "forced": data["forced"], "layer": layers - 1, "head": heads - 1, "query": query}).json()
    weight = float(browser.find_element(By.ID, "explain-weight").get_attribute("data-value"))
    assert weight == pytest.approx(explained["weights"][key], abs=1e-6)
    assert weight == pytest.approx(data["attention"]["weights"][layers - 1][heads - 1][query][key], abs=1e-3)
    assert browser.find_element(By.ID, "explain-mask").text == "may attend"
    assert "softmax(QKᵀ / √d_k) V" in browser.find_element(By.ID, "explain").text
    click_cell(browser, 0, 1)  # a later position: masked
    wait.until(lambda d: d.find_element(By.ID, "explain-mask").text == "masked")


def test_sample_and_generate(browser, page_url: str, lm: LanguageModel) -> None:
    wait = open_page(browser, page_url)
    prompt = browser.find_element(By.ID, "lm-prompt")
    prompt.clear()
    prompt.send_keys(PROMPT)
    browser.find_element(By.ID, "lm-sample").click()
    wait.until(lambda d: len(sequence_ids(d)) == 1)
    shown = [c["id"] for c in api_step(page_url, [])["candidates"][:10]]
    assert sequence_ids(browser)[0] in shown  # drawn from the bars as shown
    browser.find_element(By.ID, "lm-undo").click()
    wait.until(lambda d: not sequence_ids(d))

    browser.find_element(By.ID, "lm-generate").click()
    generated = browser.find_element(By.ID, "lm-generated")
    wait.until(lambda d: generated.text)
    assert generated.text == lm.generate([PROMPT], 50)[0]
    assert_clean(browser, page_url, "lm-error")


def test_the_page_opens_on_the_runs_example(browser, lm: LanguageModel) -> None:
    with BackgroundServer(create_app(LanguageModelService(lm, "lm", example="seven hundred and"))) as url:
        wait = open_page(browser, url)
        wait.until(lambda d: bars(d))  # nothing clicked: the example's next token is shown
        assert browser.find_element(By.ID, "lm-prompt").get_attribute("value") == "seven hundred and"
        assert browser.find_element(By.ID, "lm-text").text == "seven hundred and"
