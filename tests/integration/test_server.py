"""The JSON API and the page, through FastAPI's test client and a real local server."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from transformer_mt.cli import build_parser, main
from transformer_mt.server import TranslateLimits, TranslationService, create_app
from transformer_mt.server.background import BackgroundServer
from transformer_mt.inference.translator import Translator

SENTENCES = ["w1 w2 w3", "w4 w4 w5 w6", "w7 w1", "w9 w8 w7 w6 w5"]


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def service(translator: Translator) -> TranslationService:
    return TranslationService(translator, "tiny", TranslateLimits(max_chars=200, max_sentences=4, max_beam=4))


@pytest.fixture(scope="module")
def client(service: TranslationService) -> TestClient:
    return TestClient(create_app(service))


def post(client: TestClient, body: object) -> httpx.Response:
    return client.post("/api/translate", json=body)


def test_health_describes_the_model(client: TestClient, translator: Translator) -> None:
    info = client.get("/api/health").json()
    assert info["status"] == "ok" and info["run"] == "tiny"
    attention = translator.model.encoder.layers[0].self_attn
    assert info["n_layers"] == len(translator.model.encoder.layers) and info["n_heads"] == attention.n_heads
    assert info["limits"] == {"max_chars": 200, "max_sentences": 4, "max_beam": 4}


def test_translate_text_matches_the_translator(client: TestClient, translator: Translator) -> None:
    response = post(client, {"text": "\n".join(SENTENCES[:3]) + "\n\n", "beam": 1})
    assert response.status_code == 200
    data = response.json()
    assert data["translations"] == translator.translate(SENTENCES[:3])
    first = data["results"][0]
    assert first["source"] == SENTENCES[0]
    assert first["source_tokens"] == translator.tokenizer.pieces(SENTENCES[0])
    assert first["nbest"][0]["text"] == first["translation"]
    assert "attention" not in first


def test_cross_attention_when_asked(client: TestClient) -> None:
    data = post(client, {"sentences": SENTENCES[:2], "attention": True}).json()
    for result in data["results"]:
        attention = result["attention"]
        cross = attention["cross"]
        assert attention["source_tokens"] == result["source_tokens"] + ["</s>"]
        assert len(cross) == attention["layers"] and len(cross[0]) == attention["heads"]
        rows, cols = len(attention["target_tokens"]), len(attention["source_tokens"])
        for head in (h for layer in cross for h in layer):
            assert len(head) == rows and all(len(row) == cols for row in head)
            assert all(abs(sum(row) - 1) < 2e-3 for row in head)


def test_empty_sentence_in_a_list_gives_an_empty_translation(client: TestClient) -> None:
    data = post(client, {"sentences": ["w1 w2", ""], "attention": True}).json()
    assert data["translations"][1] == "" and data["results"][1].get("attention") is None


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"text": "w1 " * 100}, 413, "at most 200"),
        ({"sentences": ["w1"] * 5}, 413, "at most 4 per request"),
        ({"text": "w1", "sentences": ["w1"]}, 422, "either 'text' or 'sentences'"),
        ({}, 422, "either 'text' or 'sentences'"),
        ({"text": " \n "}, 422, "nothing to translate"),
        ({"text": "w1", "beam": 0}, 422, "beam"),
        ({"text": "w1", "beam": 9}, 422, "at most 4"),
        ({"text": "w1", "beam": 2, "nbest": 3}, 422, "cannot exceed beam"),
        ({"text": 42}, 422, "text"),
        ({"text": "w1", "colour": "red"}, 422, "colour"),
        (["w1"], 422, "body"),
    ],
)
def test_bad_requests_get_a_json_error(client: TestClient, body: object, status: int, message: str) -> None:
    response = post(client, body)
    assert response.status_code == status
    assert message in response.json()["error"]


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe", b'{"text": "w1"'])
def test_malformed_json_is_a_422_not_a_crash(client: TestClient, raw: bytes) -> None:
    response = client.post("/api/translate", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422 and "error" in response.json()
    assert client.get("/api/health").status_code == 200


def test_huge_body_is_refused_before_parsing(client: TestClient) -> None:
    response = client.post("/api/translate", content=b"x" * 3_000_000, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "larger than" in response.json()["error"]

    def chunks():
        for _ in range(100):
            yield b"y" * 65536

    response = client.post("/api/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_openapi_describes_the_api(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/api/translate", "/api/health"} <= set(spec["paths"])
    assert "TranslateRequest" in spec["components"]["schemas"]
    assert client.get("/unknown").json() == {"error": "Not Found"}


def test_page_and_assets_are_served_without_external_urls(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'id="source"' in page.text and 'id="heatmap"' in page.text
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
    assert {"/static/app.js", "/static/steps.js", "/static/explain.js", "/static/style.css"} <= set(assets)
    texts = [page.text]
    for asset in assets:  # every script and style sheet the page loads, none from elsewhere
        response = client.get(asset)
        assert response.status_code == 200 and len(response.text) > 500
        texts.append(response.text)
    for text in texts:
        assert not re.search(r"(src|href)=\"https?://|url\(https?:|import .* from \"http|fetch\(\"https?:", text)


def test_concurrent_requests_share_one_model(service: TranslationService, translator: Translator) -> None:
    """Requests with and without attention, in parallel on a real server, all answer
    what the model answers alone."""
    expected = translator.translate(SENTENCES)
    with BackgroundServer(create_app(service)) as url:

        def ask(i: int) -> tuple[int, list[str]]:
            body = {"sentences": SENTENCES, "attention": i % 2 == 0}
            response = httpx.post(f"{url}/api/translate", json=body, timeout=60)
            return response.status_code, response.json()["translations"]

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(24)))
    assert all(status == 200 for status, _ in answers)
    assert all(translations == expected for _, translations in answers)
    assert all(module.records_weights is False for module in translator.model.modules()
               if hasattr(module, "records_weights"))


def test_waiting_requests_are_translated_in_one_batch(service: TranslationService, translator: Translator) -> None:
    expected = translator.translate(SENTENCES)
    batches = service.batches
    with ThreadPoolExecutor(4) as pool:
        with service.lock:  # the model is busy: the four requests queue up
            futures = [pool.submit(service.translate, [s], 1, 1, i == 0) for i, s in enumerate(SENTENCES)]
            deadline = time.monotonic() + 30
            while len(service.queue) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        answers = [f.result(timeout=60) for f in futures]
    assert service.batches == batches + 1
    assert [a["translations"][0] for a in answers] == expected
    assert answers[0]["results"][0]["attention"]["layers"] == len(translator.model.encoder.layers)
    assert "attention" not in answers[1]["results"][0]


def test_serve_binds_loopback_by_default() -> None:
    args = build_parser().parse_args(["serve", "runs/x"])
    assert args.host == "127.0.0.1"


def test_serve_on_a_missing_run_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and err.count("\n") == 1


def test_background_server_refuses_other_addresses(service: TranslationService) -> None:
    with pytest.raises(ValueError, match="loopback"):
        BackgroundServer(create_app(service), host="0.0.0.0")


def test_beam_and_nbest(client: TestClient, translator: Translator) -> None:
    data = post(client, {"text": "w1 w2 w3\nw4 w5", "beam": 3, "nbest": 2}).json()
    expected = translator.translate_nbest(["w1 w2 w3", "w4 w5"], 2, beam=3)
    for result, hypotheses in zip(data["results"], expected):
        assert [h["text"] for h in result["nbest"]] == [text for text, _ in hypotheses]
        scores = [h["score"] for h in result["nbest"]]
        assert len(scores) == 2 and scores[0] >= scores[1]
        assert result["translation"] == result["nbest"][0]["text"]
    assert data["beam"] == 3 and data["nbest"] == 2


def test_nbest_lists_distinct_translations_unless_raw(client: TestClient, translator: Translator) -> None:
    """The n-best list holds each text once, at its best score (a beam may finish one text in two
    segmentations); raw_nbest lists every hypothesis the beam finished, as search found them."""
    lines = ["w1 w2 w3", "w4 w5 w5", "w6"]
    found = translator.search(lines, translator.settings(beam=4, nbest=4), 4, raw_nbest=True)
    distinct = post(client, {"sentences": lines, "beam": 4, "nbest": 4}).json()
    raw = post(client, {"sentences": lines, "beam": 4, "nbest": 4, "raw_nbest": True}).json()
    for hypotheses, one_each, every in zip(found, distinct["results"], raw["results"]):
        assert [h["text"] for h in every["nbest"]] == [h.text for h in hypotheses]
        best_of_each = {}
        for h in hypotheses:
            best_of_each.setdefault(h.text, h.score)
        assert [h["text"] for h in one_each["nbest"]] == list(best_of_each)
        assert [h["score"] for h in one_each["nbest"]] == pytest.approx(list(best_of_each.values()))


def api_routes(app) -> set[str]:
    """`METHOD /path` of every JSON route an app serves (the page and its static files aside)."""
    return {f"{method} {route.path}" for route in app.routes for method in getattr(route, "methods", None) or ()
            if route.path.startswith("/api/") or route.path == "/openapi.json"} - {"HEAD /openapi.json"}


def documented_routes(app, capsys) -> set[str]:
    """The app's routes (api_routes), each checked to be in docs/plots.md's API tables and in
    `serve --help`."""
    documented = (Path(__file__).resolve().parents[2] / "docs" / "plots.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    routes = api_routes(app)
    for route in routes:
        assert f"`{route}`" in documented, route
        assert route.split()[1] in helped, route
    return routes


def test_the_docs_and_serve_help_name_every_route_served(client: TestClient, capsys) -> None:
    """Against what the translation page serves (test_lm_server.py: the generate view's)."""
    routes = documented_routes(client.app, capsys)
    assert {"POST /api/translate", "POST /api/steps", "POST /api/explain", "GET /api/doctor"} <= routes


def test_concurrent_requests_with_mixed_beams_get_exactly_their_own(tiny_run: Path) -> None:
    """Many requests at once, mixing beam 1, beam 5 and no beam (the run's default, set
    to 5 here), return exactly what each returns alone: no request decodes with another's
    beam. The sentences are chosen where beam 1 and beam 5 disagree, so a mix-up shows."""
    import random

    translator = Translator.from_run(tiny_run, device="cpu", beam=5)
    rng = random.Random(0)
    lines = [" ".join(f"w{rng.randrange(10)}" for _ in range(rng.randint(3, 14))) for _ in range(40)]
    greedy, beam5 = translator.translate(lines, beam=1), translator.translate(lines, beam=5)
    differing = [i for i in range(len(lines)) if greedy[i] != beam5[i]]
    assert len(differing) >= 3, "no sentence where beam 1 and beam 5 disagree: the test could not fail"
    expected = {1: greedy, 5: beam5, None: beam5}
    service = TranslationService(translator, "tiny", TranslateLimits(max_chars=2000, max_sentences=8, max_beam=8))
    asks = [(beam, differing[k % len(differing)]) for k in range(90) for beam in ((1, 5, None)[k % 3],)]

    def ask(item: tuple[int | None, int]) -> tuple[int | None, int, str, int]:
        beam, index = item
        body = {"text": lines[index]} if beam is None else {"text": lines[index], "beam": beam}
        response = httpx.post(f"{url}/api/translate", json=body, timeout=120)
        data = response.json()
        return beam, index, data["translations"][0], data["beam"]

    with BackgroundServer(create_app(service)) as url:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(ask, asks))
    wrong = [(beam, i, got) for beam, i, got, _ in answers if got != expected[beam][i]]
    assert not wrong, f"{len(wrong)} of {len(answers)} requests got another request's beam"
    assert all(used == (5 if beam is None else beam) for beam, _, _, used in answers)
    assert service.batches < service.requests  # requests were batched, by equal settings only


@pytest.mark.parametrize("text", ["w1 \ud800", "\udfff"])
def test_text_that_is_not_unicode_is_a_json_422(client: TestClient, text: str) -> None:
    response = client.post("/api/translate", content=f'{{"text": "{text.encode("unicode_escape").decode()}"}}',
                           headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "not valid Unicode" in response.json()["error"]


@pytest.mark.parametrize("text", ["\u0000", "\u00ad", "\u200b"])
def test_invisible_text_translates_to_an_empty_line(client: TestClient, text: str) -> None:
    data = post(client, {"sentences": [text, "w1 w2"]}).json()
    assert data["translations"][0] == ""


def test_nbest_above_a_given_beam_is_refused_as_by_the_cli(client: TestClient) -> None:
    response = post(client, {"text": "w1 w2", "beam": 2, "nbest": 3})
    assert response.status_code == 422 and "nbest (3) cannot exceed beam (2)" in response.json()["error"]
    widened = post(client, {"text": "w1 w2", "nbest": 3}).json()  # no beam: the default widened
    assert widened["beam"] == 3 and len(widened["results"][0]["nbest"]) == 3


def first_line_with_text(path: Path, max_chars: int = 10_000) -> str:
    return next(line.strip() for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and len(line.strip()) <= max_chars)


def test_the_page_opens_on_the_runs_first_validation_sentence(tiny_run: Path, translator: Translator) -> None:
    from transformer_mt.server.translation_service import example_sentence

    example = example_sentence(tiny_run, 200)
    assert example == first_line_with_text(tiny_run / "data" / "valid.src")
    client = TestClient(create_app(TranslationService(translator, "tiny", TranslateLimits(), example)))
    assert client.get("/api/health").json()["example"] == example
    script = client.get("/static/app.js").text
    assert "info.example" in script


def test_the_example_comes_from_the_configs_files_and_fits_the_limit(tmp_path: Path) -> None:
    from transformer_mt.common.config import config_yaml, load_config
    from transformer_mt.server.translation_service import example_sentence

    valid = tmp_path / "valid.en"
    valid.write_text("\n   \nthis line is rather long for the limit\nshort one\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config("small", [f"--data.train_src={valid}", f"--data.train_tgt={valid}",
                                f"--data.valid_src={valid}", f"--data.valid_tgt={valid}"])
    (run / "config.yaml").write_text(config_yaml(cfg), encoding="utf-8")
    assert example_sentence(run, 200) == "this line is rather long for the limit"
    assert example_sentence(run, 10) == "short one"
    assert example_sentence(run, 5) == ""
    valid.unlink()
    assert example_sentence(run, 200) == ""  # the files have moved: no example, no error
    assert example_sentence(tmp_path / "nowhere", 200) == ""
