"""The learner's API: /api/steps (the beam search step by step), every attention in
/api/translate, and /api/explain (equation 1 with the numbers of one query)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from transformer_mt.server import TranslateLimits, TranslationService, create_app
from transformer_mt.inference.translator import Translator


@pytest.fixture(scope="module")
def client(tiny_run: Path) -> TestClient:
    translator = Translator.from_run(tiny_run, device="cpu")
    return TestClient(create_app(TranslationService(translator, "tiny", TranslateLimits(max_chars=300))))


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(10)}" for _ in range(rng.randint(2, 9))) for _ in range(n)]


@pytest.mark.parametrize("beam", [1, 3])
def test_the_steps_end_with_what_translate_gives(client: TestClient, beam: int) -> None:
    for text in sentences(6, seed=beam):
        translated = client.post("/api/translate", json={"text": text, "beam": beam}).json()
        steps = client.post("/api/steps", json={"text": text, "beam": beam}).json()
        assert steps["translation"] == translated["translations"][0]
        assert steps["beam"] == beam and steps["steps"]
        final = [h for h in steps["steps"][-1]["hypotheses"] if h["status"] == "finished"]
        assert final or len(steps["steps"]) > 1


def test_with_beam_one_the_chosen_token_is_the_most_probable_of_top_k(client: TestClient) -> None:
    body = client.post("/api/steps", json={"text": "w3 w1 w4 w1 w5", "beam": 1, "top_k": 3}).json()
    tokens = []
    for step in body["steps"]:
        top = step["top_k"]
        assert len(top) == 3 and [t["prob"] for t in top] == sorted((t["prob"] for t in top), reverse=True)
        assert step["chosen"]["token"] == top[0]["token"] and step["chosen"]["prob"] == top[0]["prob"]
        assert step["chosen"]["from"] == 0 and not step["forced"]
        layers = step["cross_attention"]
        assert len(layers) == 2 and len(layers[0]) == 4 and len(layers[0][0]) == len(body["source_tokens"])
        assert all(math.isclose(sum(row), 1.0, abs_tol=1e-3) for layer in layers for row in layer)
        tokens.append(step["chosen"]["token"])
    assert tokens == body["target_tokens"]


def test_a_forced_token_starts_the_output_and_the_model_continues(client: TestClient) -> None:
    text = "w3 w1 w4 w1 w5"
    free = client.post("/api/steps", json={"text": text, "beam": 2}).json()
    other = next(t["token"] for t in free["steps"][0]["top_k"][1:] if t["token"] != "</s>")
    forced = client.post("/api/steps", json={"text": text, "beam": 2, "prefix": [other]}).json()
    assert forced["steps"][0]["forced"] and forced["steps"][0]["chosen"]["token"] == other
    assert not forced["steps"][1]["forced"]
    assert forced["target_tokens"][0] == other and forced["translation"] != free["translation"]
    assert forced["steps"][0]["chosen"]["prob"] == next(t["prob"] for t in free["steps"][0]["top_k"] if t["token"] == other)


@pytest.mark.parametrize("body, status, words", [
    ({"text": "w1 w2", "prefix": ["nonsense"]}, 422, "not a subword"),
    ({"text": "w1\nw2"}, 422, "one sentence"),
    ({"text": "   "}, 422, "empty"),
    ({"text": "w1 " * 200}, 413, "at most 300"),
    ({"text": "w1", "beam": 99}, 422, "beam must be at most"),
    ({"text": "w1", "top_k": 0}, 422, "top_k"),
])
def test_bad_step_requests_get_one_clear_message(client: TestClient, body: dict, status: int, words: str) -> None:
    response = client.post("/api/steps", json=body)
    assert response.status_code == status and words in response.text


def test_translate_returns_every_attention(client: TestClient) -> None:
    result = client.post("/api/translate", json={"text": "w3 w1 w4", "attention": True}).json()["results"][0]
    attention = result["attention"]
    source, target, inputs = attention["source_tokens"], attention["target_tokens"], attention["decoder_input_tokens"]
    assert inputs[0] == "<s>" and inputs[1:] == target[:-1]
    for kind, rows, columns in (("encoder", source, source), ("decoder", inputs, inputs), ("cross", target, source)):
        weights = attention[kind]
        assert len(weights) == 2 and len(weights[0]) == 4
        assert len(weights[0][0]) == len(rows) and len(weights[0][0][0]) == len(columns)
        assert all(math.isclose(sum(row), 1.0, abs_tol=1e-3) for layer in weights for head in layer for row in head)
    masked = attention["decoder"]  # a decoder position never looks ahead (the subsequent mask)
    assert all(masked[l][h][i][j] == 0 for l in range(2) for h in range(4) for i in range(len(inputs))
               for j in range(i + 1, len(inputs)))


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_explain_opens_equation_one_for_the_weights_shown(client: TestClient, kind: str) -> None:
    text = "w3 w1 w4 w1"
    result = client.post("/api/translate", json={"text": text, "attention": True}).json()["results"][0]
    shown = result["attention"][kind]
    query = 2
    body = {"text": text, "target_tokens": result["attention"]["target_tokens"], "kind": kind, "layer": 1,
            "head": 3, "query": query}
    explained = client.post("/api/explain", json=body).json()
    health = client.get("/api/health").json()
    d_k = health["d_model"] // health["n_heads"]
    assert explained["d_k"] == d_k and math.isclose(explained["sqrt_d_k"], math.sqrt(d_k))
    assert [round(w, 4) for w in explained["weights"]] == pytest.approx(shown[1][3][query], abs=2e-4)
    for dot, scaled in zip(explained["dot"], explained["scaled"]):
        assert math.isclose(scaled, dot / math.sqrt(d_k), rel_tol=1e-5, abs_tol=1e-6)
    allowed = [s for s, m in zip(explained["scaled"], explained["mask"]) if m]
    total = sum(math.exp(s) for s in allowed)
    expected = [math.exp(s) / total if m else 0.0 for s, m in zip(explained["scaled"], explained["mask"])]
    assert explained["weights"] == pytest.approx(expected, abs=1e-6)
    if kind == "decoder":
        assert explained["mask"] == [j <= query for j in range(len(explained["mask"]))]
    else:
        assert all(explained["mask"])
    rows = {"encoder": "source_tokens", "decoder": "decoder_input_tokens", "cross": "target_tokens"}[kind]
    assert explained["query_token"] == result["attention"][rows][query]


def test_explain_refuses_a_layer_or_query_out_of_range(client: TestClient) -> None:
    base = {"text": "w1 w2", "target_tokens": ["▁w1"], "kind": "cross", "layer": 0, "head": 0, "query": 0}
    assert client.post("/api/explain", json={**base, "layer": 7}).status_code == 422
    assert client.post("/api/explain", json={**base, "query": 9}).status_code == 422
    assert client.post("/api/explain", json={**base, "kind": "sideways"}).status_code == 422


@pytest.mark.parametrize("field", ["layer", "head"])
@pytest.mark.parametrize("past_the_last", [1, 99])
def test_explain_names_the_json_field_and_its_range_counted_from_zero(
        client: TestClient, field: str, past_the_last: int) -> None:
    health = client.get("/api/health").json()
    count = health["n_layers"] if field == "layer" else health["n_heads"]
    value = count - 1 + past_the_last  # from 0, the last one is count - 1
    base = {"text": "w1 w2", "target_tokens": ["▁w1"], "kind": "cross", "layer": 0, "head": 0, "query": 0}
    response = client.post("/api/explain", json={**base, field: value})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error.startswith(f"{field} must be between 0 and {count - 1}") and error.endswith(f"got {value}")
    assert "--" not in error and "\n" not in error
