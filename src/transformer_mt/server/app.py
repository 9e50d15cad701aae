"""The web page and its JSON API (FastAPI). For a translation run:

    GET  /                 the page: type a sentence, translate, see where each head looks
    POST /api/translate    {"text": "...", "beam": 4, "nbest": 2, "attention": true}
    POST /api/steps        {"text": "...", "beam": 4, "top_k": 5, "prefix": ["▁Ein"]}: the beam search step by step
    POST /api/explain      {"text": "...", "target_tokens": [...], "kind": "cross", "layer": 0, "head": 0,
                            "query": 2}: equation 1 with the numbers of one query
    GET  /api/health       kind (translation), model sizes, device and request limits
    GET  /openapi.json     the OpenAPI description of the API

For a language-model run (model.arch: decoder_only) the same page opens its generate view
and the API is language_model_api.py's (/api/generate, /api/generate/step, /api/generate/explain).

Everything the page needs is served from server/static/: no CDN, works offline. The
OpenAPI description is served, the Swagger page is not (it loads scripts from a CDN).
`serve` binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from transformer_mt import __version__
from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir
from transformer_mt.server.request_guards import BodySizeLimit, TooLarge, install_error_handlers
from transformer_mt.server.language_model_api import add_generate_routes
from transformer_mt.server.language_model_service import GenerateLimits, LanguageModelService, example_prompt
from transformer_mt.server.schemas import ExplainResponse, HealthBase, one_line
from transformer_mt.server.translation_service import TranslateLimits, TranslationService, example_sentence

Service = TranslationService | LanguageModelService

STATIC = Path(__file__).resolve().parent / "static"
log = logging.getLogger("transformer_mt")


class TranslateRequest(BaseModel):
    """Give `text` (one sentence per line) or `sentences`, not both."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "forty-two", "beam": 4, "nbest": 2, "attention": True}]})

    text: str | None = Field(None, description="one sentence per line; blank lines are skipped")
    sentences: list[str] | None = Field(None, description="sentences, translated in order")
    beam: int | None = Field(None, ge=1, description="beam size; default: the run's decode.beam, "
                             "widened to nbest when that is larger")
    nbest: int = Field(1, ge=1, description="translations returned per sentence (<= beam when beam is given), "
                                           "each a different text")
    raw_nbest: bool = Field(False, description="every hypothesis of the beam instead, the same text in two "
                                               "subword segmentations included")
    attention: bool = Field(False, description="also return the cross-attention of each sentence")


class StepsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"text": "forty-two", "beam": 4, "top_k": 5, "prefix": []}]})

    text: str = Field(description="one sentence")
    beam: int | None = Field(None, ge=1, description="beam size; default: the run's decode.beam")
    top_k: int = Field(5, ge=1, le=50, description="next-token candidates shown per step")
    prefix: list[str] = Field([], max_length=512, description="target subwords forced first (as returned in "
                              "target_tokens / top_k), then the model continues")


class TokenProb(BaseModel):
    token: str
    prob: float


class ChosenOut(TokenProb):
    from_: int = Field(alias="from", description="index of its parent among the previous step's kept hypotheses")


class StepHypothesis(BaseModel):
    tokens: list[str]
    score: float = Field(description="summed log-probability; once finished, divided by the length penalty")
    status: str = Field(description="kept (continues), finished (ended with </s>) or pruned (dropped)")
    parent: int = Field(description="index of its parent among the previous step's kept hypotheses")


class StepOut(BaseModel):
    step: int
    forced: bool = Field(description="a token of the forced prefix")
    top_k: list[TokenProb] = Field(description="most probable next tokens of the best open hypothesis")
    chosen: ChosenOut = Field(description="the best-scoring extension of this step")
    cross_attention: list[list[list[float]]] = Field(description="[layer][head][source] of the best hypothesis' query")
    hypotheses: list[StepHypothesis] = Field(description="the candidates of this step, best first")


class StepsResponse(BaseModel):
    source_tokens: list[str]
    beam: int
    top_k: int
    prefix: list[str]
    translation: str = Field(description="without a prefix: what /api/translate gives for this text and beam")
    target_tokens: list[str]
    score: float
    steps: list[StepOut]
    elapsed_ms: float


class ExplainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="one sentence")
    target_tokens: list[str] = Field(max_length=512, description="the output as /api/translate returned it")
    kind: str = Field(description="encoder, decoder or cross")
    layer: int = Field(ge=0, description="from 0")
    head: int = Field(ge=0, description="from 0")
    query: int = Field(ge=0, description="row of the attention map, from 0")


class HypothesisOut(BaseModel):
    text: str
    score: float = Field(description="log-probability divided by the length penalty "
                               "((5 + |Y|) / 6) ** alpha, |Y| counting eos; the same for every beam size")


class AttentionOut(BaseModel):
    layers: int = Field(description="the encoder's layers (encoder)")
    decoder_layers: int = Field(description="the decoder's layers (decoder and cross; fewer with model.decoder_layers)")
    heads: int
    source_tokens: list[str] = Field(description="source subwords + </s> (columns)")
    target_tokens: list[str] = Field(description="produced subwords (+ </s>) (rows)")
    decoder_input_tokens: list[str] = Field(description="<s> + produced subwords but the last: decoder self-attention axis")
    cross: list[list[list[list[float]]]] = Field(description="weights[layer][head][target][source]")
    encoder: list[list[list[list[float]]]] = Field(description="weights[layer][head][source][source]")
    decoder: list[list[list[list[float]]]] = Field(description="weights[layer][head][decoder input][decoder input]")


class ResultOut(BaseModel):
    source: str
    translation: str
    nbest: list[HypothesisOut]
    source_tokens: list[str]
    target_tokens: list[str]
    attention: AttentionOut | None = None


class TranslateResponse(BaseModel):
    translations: list[str]
    results: list[ResultOut]
    beam: int
    nbest: int
    elapsed_ms: float


class HealthResponse(HealthBase):
    n_decoder_layers: int = Field(description="the decoder's layers (n_layers is the encoder's)")
    default_beam: int
    batches: int = Field(description="decoding calls: fewer than requests when waiting requests were batched")


def request_sentences(request: TranslateRequest, limits: TranslateLimits) -> list[str]:
    """The sentences of a request, checked against `limits` (TooLarge -> 413, UserError -> 422)."""
    if (request.text is None) == (request.sentences is None):
        raise UserError("give either 'text' or 'sentences'")
    if request.text is not None:
        sentences = [line.strip() for line in request.text.splitlines() if line.strip()]
    else:
        sentences = [s.strip() for s in request.sentences or []]
    chars = sum(len(s) for s in sentences)
    if chars > limits.max_chars:
        raise TooLarge(f"{chars} characters; at most {limits.max_chars} per request")
    if len(sentences) > limits.max_sentences:
        raise TooLarge(f"{len(sentences)} sentences; at most {limits.max_sentences} per request")
    if not any(sentences):
        raise UserError("nothing to translate: the text is empty")
    return sentences


def one_sentence(text: str, limits: TranslateLimits) -> str:
    """The one sentence of a steps or explain request (TooLarge -> 413, UserError -> 422)."""
    return one_line(text, limits.max_chars, "nothing to decode: the text is empty", "sentence")


def create_app(service: Service) -> FastAPI:
    """The FastAPI application around one shared service: the translation API for a
    TranslationService, the generate API (language_model_api.py) for a LanguageModelService; the same
    page, which asks /api/health which view to open."""
    app = FastAPI(
        title="transformer-mt", version=__version__, docs_url=None, redoc_url=None,
        description="Translate, or generate text, with a trained Transformer and see its attention.",
    )
    install_error_handlers(app)
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    if isinstance(service, LanguageModelService):
        add_generate_routes(app, service)
        page = page.replace('<body class="translate">', '<body class="generate">', 1)  # opens the generate view
    else:
        add_translation_routes(app, service)

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(BodySizeLimit, max_bytes=8 * service.limits.max_chars + 65536)
    return app


def add_translation_routes(app: FastAPI, service: TranslationService) -> None:
    """The routes of the translation page around one shared TranslationService."""
    limits = service.limits

    @app.get("/api/health", response_model=HealthResponse, summary="Model and server information")
    def health() -> dict[str, Any]:
        return service.info()

    @app.post("/api/translate", response_model=TranslateResponse, response_model_exclude_none=True,
              summary="Translate sentences",
              responses={413: {"description": "too many characters or sentences"},
                         422: {"description": "invalid request (message in 'error')"}})
    def translate(request: TranslateRequest) -> dict[str, Any]:
        sentences = request_sentences(request, limits)
        return service.translate(sentences, request.beam, request.nbest, request.attention, request.raw_nbest)

    @app.post("/api/steps", response_model=StepsResponse, response_model_by_alias=True,
              summary="Decode one sentence step by step",
              responses={413: {"description": "too many characters"}, 422: {"description": "invalid request"}})
    def steps(request: StepsRequest) -> dict[str, Any]:
        return service.steps(one_sentence(request.text, limits), request.beam, request.top_k, request.prefix)

    @app.get("/api/doctor", summary="Why this model may translate poorly: the doctor's findings on the run")
    def doctor() -> dict[str, Any]:
        return service.doctor()

    @app.post("/api/explain", response_model=ExplainResponse, summary="Equation 1 for one query of one head",
              responses={413: {"description": "too many characters"}, 422: {"description": "invalid request"}})
    def explain(request: ExplainRequest) -> dict[str, Any]:
        return service.explain(one_sentence(request.text, limits), request.target_tokens, request.kind,
                               request.layer, request.head, request.query)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(run: str | Path, host: str = "127.0.0.1", port: int = 8000, device: str = "auto",
          checkpoint: str = "best", limits: TranslateLimits = TranslateLimits(), dtype: str = "float32",
          max_new_tokens: int = GenerateLimits.max_new_tokens) -> None:
    """Load the run (its weights in `dtype`: float32, bfloat16 or int8) and serve the
    page and the API of its kind until interrupted."""
    import uvicorn

    app = create_app(load_service(run, device, checkpoint, limits, dtype, max_new_tokens))
    if not is_loopback(host):
        log.warning("serving on %s: the page is reachable from other machines", host)
    log.info("open http://%s:%d/ (Ctrl+C stops)", "127.0.0.1" if host in ("0.0.0.0", "::") else host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def load_service(run: str | Path, device: str, checkpoint: str, limits: TranslateLimits, dtype: str,
                 max_new_tokens: int) -> Service:
    """The service of the run's kind: a LanguageModelService for model.arch decoder_only
    (the generate view; float32 weights only), else a TranslationService."""
    from transformer_mt.inference.language_model import LanguageModel
    from transformer_mt.inference.translator import Translator

    name = Path(run).name
    if RunDir(Path(run)).require().read_config().model.arch == "decoder_only":
        if dtype != "float32":
            raise UserError(f"--dtype {dtype}: a language-model run is served in float32 only")
        lm = LanguageModel.from_run(run, device=device, checkpoint=checkpoint)
        lm_limits = GenerateLimits(limits.max_chars, max_new_tokens)
        return LanguageModelService(lm, name, lm_limits, example_prompt(run, limits.max_chars))
    translator = Translator.from_run(run, device=device, checkpoint=checkpoint, dtype=dtype)
    return TranslationService(translator, name, limits, example_sentence(run, limits.max_chars), Path(run))
