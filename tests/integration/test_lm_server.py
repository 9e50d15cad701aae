"""The generate view's JSON API on a language-model run, through FastAPI's test client: the
step answer against the model itself (greedy next token, exact probabilities at every
temperature of the slider, causal attention, forcing), equation 1, whole generations, and
one-line errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from transformer_mt.cli import build_parser, main
from transformer_mt.decoding.sampling import generate
from transformer_mt.common.errors import UserError
from transformer_mt.inference.language_model import LanguageModel
from transformer_mt.server import GenerateLimits, LanguageModelService, TranslateLimits, create_app
from transformer_mt.server.app import load_service
from transformer_mt.server.language_model_service import CANDIDATES, TEMPERATURES, example_prompt

PROMPTS = ["eight thousand nine hundred", "seven", "one hundred and twelve ="]


@pytest.fixture(scope="module")
def lm(lm_run: Path) -> LanguageModel:
    return LanguageModel.from_run(lm_run, device="cpu")


@pytest.fixture(scope="module")
def client(lm: LanguageModel) -> TestClient:
    service = LanguageModelService(lm, "lm", GenerateLimits(max_chars=200, max_new_tokens=40), "seven hundred")
    return TestClient(create_app(service))


def step(client: TestClient, prompt: str, forced: list[int] | None = None, top_k: int = 10) -> dict:
    response = client.post("/api/generate/step", json={"prompt": prompt, "forced": forced or [], "top_k": top_k})
    assert response.status_code == 200, response.json()
    return response.json()


def model_logits(lm: LanguageModel, ids: list[int]) -> torch.Tensor:
    """The model's next-token scores after `ids`, without any hook (the fast attention path)."""
    with torch.inference_mode():
        return lm.model.logits(torch.tensor([ids]))[0, -1].double()


def test_health_says_a_language_model_is_served(client: TestClient, lm: LanguageModel) -> None:
    info = client.get("/api/health").json()
    assert info["kind"] == "language_model" and info["run"] == "lm" and info["example"] == "seven hundred"
    assert info["n_layers"] == len(lm.model.decoder.layers) and info["vocab_size"] == len(lm.tokenizer)
    assert info["limits"] == {"max_chars": 200, "max_new_tokens": 40, "max_top_k": CANDIDATES}
    assert info["temperatures"] == list(TEMPERATURES) and 1.0 in TEMPERATURES


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_top_candidate_is_the_greedy_next_token(client: TestClient, lm: LanguageModel, prompt: str) -> None:
    data = step(client, prompt)
    ids = lm.prompt_ids(prompt)
    assert data["ids"] == ids and data["tokens"] == lm.tokenizer.id_to_piece(ids)
    assert data["prompt_length"] == len(ids) and data["text"] == lm.text_of(ids[1:])
    greedy = generate(lm.model, torch.tensor([ids]), 1, lm.eot)[0].tolist()
    assert data["candidates"][0]["id"] == greedy[0]
    if greedy[0] != lm.eot:
        assert lm.generate([prompt], max_new_tokens=1)[0] == lm.text_of(ids[1:] + greedy)
    logits = [c["logit"] for c in data["candidates"]]
    assert logits == sorted(logits, reverse=True) and len(logits) == min(CANDIDATES, len(lm.tokenizer))


def slider_probs(data: dict, index: int) -> torch.Tensor:
    """The page's formula (generate.js nextProbs): softmax(z / T) of the candidates from their
    logits, with the log-sum-exp of the other tokens sent for that temperature."""
    t = data["temperatures"][index]
    scaled = torch.tensor([c["logit"] for c in data["candidates"]], dtype=torch.float64) / t
    lse = torch.logsumexp(scaled, 0)
    if data["tail_logsumexp"] is not None:
        lse = torch.logaddexp(lse, torch.tensor(data["tail_logsumexp"][index], dtype=torch.float64))
    return (scaled - lse).exp()


def test_probabilities_from_the_logits_are_the_models(client: TestClient, lm: LanguageModel) -> None:
    data = step(client, PROMPTS[0])
    ids = [c["id"] for c in data["candidates"]]
    logits = model_logits(lm, data["ids"])
    at_one = torch.tensor([math.exp(c["logit"] - data["logsumexp"]) for c in data["candidates"]])
    torch.testing.assert_close(at_one, logits.softmax(0)[ids].float(), atol=1e-5, rtol=1e-4)
    assert data["tail_logsumexp"] is not None  # 64 tokens, 50 candidates: the tail is exercised
    for t in (0.3, 1.0, 2.5):
        index = data["temperatures"].index(t)
        torch.testing.assert_close(slider_probs(data, index), (logits / t).softmax(0)[ids], atol=1e-5, rtol=1e-4)


def test_attention_rows_sum_to_one_and_are_causal(client: TestClient, lm: LanguageModel) -> None:
    data = step(client, PROMPTS[2], forced=[step(client, PROMPTS[2])["candidates"][1]["id"]])
    attention = data["attention"]
    weights = torch.tensor(attention["weights"])
    n = len(data["tokens"])
    assert weights.shape == (len(lm.model.decoder.layers), attention["heads"], n, n)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=2e-3, rtol=0)
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    assert bool((weights[..., above] == 0).all()) and bool((weights[..., ~above] >= 0).all())


def test_forcing_a_token_changes_the_next_distribution_as_the_model_says(client: TestClient,
                                                                          lm: LanguageModel) -> None:
    free = step(client, PROMPTS[0])
    chosen = next(c for c in free["candidates"][1:] if c["id"] != lm.eot)
    forced = step(client, PROMPTS[0], forced=[chosen["id"]])
    assert forced["ids"] == free["ids"] + [chosen["id"]] and forced["tokens"][-1] == chosen["token"]
    assert forced["forced"] == [chosen["id"]] and forced["prompt_length"] == free["prompt_length"]
    expected = model_logits(lm, free["ids"] + [chosen["id"]]).softmax(0)
    got = {c["id"]: math.exp(c["logit"] - forced["logsumexp"]) for c in forced["candidates"]}
    assert got == pytest.approx({i: float(expected[i]) for i in got}, abs=1e-5)
    assert forced["candidates"][0]["id"] == int(expected.argmax())
    assert [c["id"] for c in forced["candidates"]] != [c["id"] for c in free["candidates"]]


def test_explain_opens_equation_one_for_a_cell_shown(client: TestClient) -> None:
    data = step(client, PROMPTS[0])
    layer, head, query = 1, 2, 3
    response = client.post("/api/generate/explain", json={"prompt": PROMPTS[0], "forced": [], "layer": layer,
                                                          "head": head, "query": query})
    assert response.status_code == 200
    explained = response.json()
    assert explained["query_token"] == data["tokens"][query] and explained["key_tokens"] == data["tokens"]
    assert explained["mask"] == [j <= query for j in range(len(data["tokens"]))]
    assert explained["weights"] == pytest.approx(data["attention"]["weights"][layer][head][query], abs=1e-3)
    scaled = torch.tensor(explained["dot"]) / explained["sqrt_d_k"]
    torch.testing.assert_close(scaled, torch.tensor(explained["scaled"]))


def test_generate_is_the_language_models(client: TestClient, lm: LanguageModel) -> None:
    greedy = client.post("/api/generate", json={"prompt": PROMPTS[1], "max_new_tokens": 12}).json()
    assert greedy["text"] == lm.generate([PROMPTS[1]], 12)[0] and greedy["sampled"] is False
    body = {"prompt": PROMPTS[1], "max_new_tokens": 12, "temperature": 1.5, "top_k": 20, "seed": 3}
    sampled = [client.post("/api/generate", json=body).json()["text"] for _ in range(2)]
    assert sampled[0] == sampled[1] == lm.generate([PROMPTS[1]], 12, 1.5, 20, None, 3)[0]


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/api/generate/step", {"prompt": "  "}, 422, "the prompt is empty"),
        ("/api/generate/step", {"prompt": "seven " * 40}, 413, "at most 200 per request"),
        ("/api/generate/step", {"prompt": "seven", "forced": [5] * 130}, 422, "this model sees at most 127"),
        ("/api/generate/step", {"prompt": "seven", "top_k": 0}, 422, "top_k"),
        ("/api/generate/step", {"prompt": "seven", "top_k": CANDIDATES + 1}, 422, "top_k"),
        ("/api/generate/step", {"prompt": "seven", "forced": [64]}, 422, "ids run from 0 to 63"),
        ("/api/generate/step", {"prompt": "seven", "forced": [3]}, 422, "end-of-text"),
        ("/api/generate/step", {"prompt": "one\ntwo"}, 422, "no line breaks"),
        ("/api/generate/step", {"prompt": "seven", "beam": 2}, 422, "beam"),
        ("/api/generate", {"prompt": ""}, 422, "the prompt is empty"),
        ("/api/generate", {"prompt": "seven", "max_new_tokens": 41}, 422, "at most 40"),
        ("/api/generate", {"prompt": "seven", "temperature": 0}, 422, "temperature"),
        ("/api/generate", {"prompt": "seven", "top_p": 1.5}, 422, "top_p"),
        ("/api/generate/explain", {"prompt": "seven", "layer": 2, "head": 0, "query": 0}, 422,
         "layer must be between 0 and 1"),
        ("/api/generate/explain", {"prompt": "seven", "layer": 0, "head": 0, "query": 50}, 422,
         "query must be between 0 and"),
        ("/api/translate", {"text": "seven"}, 404, "Not Found"),
    ],
)
def test_bad_requests_get_one_line(client: TestClient, path: str, body: dict, status: int, message: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert message in error and "\n" not in error


def test_the_page_opens_its_generate_view(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and '<body class="generate">' in page.text and 'id="lm-prompt"' in page.text
    assets = set(re.findall(r'src="(/static/[^"]+\.js)"', page.text))
    assert {"/static/heatmap.js", "/static/explain.js", "/static/generate.js", "/static/page.js"} <= assets
    assert all(client.get(asset).status_code == 200 for asset in assets)
    spec = client.get("/openapi.json").json()
    assert {"/api/generate", "/api/generate/step", "/api/generate/explain", "/api/health"} == set(spec["paths"])


def test_serve_loads_the_service_of_the_runs_kind(lm_run: Path) -> None:
    service = load_service(lm_run, "cpu", "best", TranslateLimits(max_chars=300), "float32", 64)
    assert isinstance(service, LanguageModelService)
    assert service.limits == GenerateLimits(300, 64) and service.name == lm_run.name
    assert service.example == example_prompt(lm_run, 300)
    first = (lm_run / "data" / "valid.txt").read_text(encoding="utf-8").splitlines()[0].split()
    assert service.example == " ".join(first[:-1])
    with pytest.raises(UserError, match="float32 only"):
        load_service(lm_run, "cpu", "best", TranslateLimits(), "int8", 64)


def test_serve_command_line_on_a_language_model(lm_run: Path, capsys: pytest.CaptureFixture) -> None:
    args = build_parser().parse_args(["serve", str(lm_run), "--max-new-tokens", "32"])
    assert args.max_new_tokens == 32 and args.host == "127.0.0.1"
    assert main(["serve", str(lm_run), "--dtype", "bfloat16"]) == 2  # refused before the server starts
    err = capsys.readouterr().err
    assert "float32 only" in err and err.count("\n") == 1



def test_the_docs_and_serve_help_name_every_route_served(client: TestClient, capsys) -> None:
    from test_server import documented_routes

    routes = documented_routes(client.app, capsys)
    assert {"POST /api/generate", "POST /api/generate/step", "POST /api/generate/explain"} <= routes
