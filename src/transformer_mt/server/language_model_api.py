"""The JSON API of the generate view, served for a language-model run (model.arch: decoder_only):

    POST /api/generate/step     {"prompt": "...", "forced": [12, 7], "top_k": 10}: the sequence so
                                far, the next-token candidates (raw logits, for a temperature
                                slider in the browser) and the causal self-attention
    POST /api/generate          {"prompt": "...", "max_new_tokens": 50, "temperature": 0.8,
                                 "top_k": 20, "top_p": 0.9, "seed": 1}: a whole continuation
    POST /api/generate/explain  {"prompt": "...", "forced": [], "layer": 0, "head": 0, "query": 2}:
                                equation 1 with the numbers of one query
    GET  /api/health            kind (language_model), model sizes, device and request limits

Errors are one line of JSON ({"error": ...}), 413 beyond the request limits, 422 otherwise,
as for the translation API (app.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from transformer_mt.server.language_model_service import CANDIDATES, LanguageModelService
from transformer_mt.server.schemas import ExplainResponse, HealthBase, one_line

MAX_FORCED = 4096  # longest list of chosen tokens a request may carry (the model's positions bound it first)
ERRORS = {413: {"description": "too many characters"}, 422: {"description": "invalid request (message in 'error')"}}
EMPTY_PROMPT = "the prompt is empty; give some text to continue"


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"prompt": "three hundred and", "forced": [], "top_k": 10}]})

    prompt: str = Field(description="the text to continue (one line)")
    forced: list[int] = Field([], max_length=MAX_FORCED, description="ids chosen so far, after the prompt "
                              "(as `candidates` gives them); end-of-text is refused: it ends the line")
    top_k: int = Field(10, ge=1, le=CANDIDATES, description=f"candidates the page shows as bars; {CANDIDATES} "
                       "are sent (all, for a smaller vocabulary)")


class Candidate(BaseModel):
    id: int
    token: str
    logit: float = Field(description="the raw score z; P = exp(z - logsumexp) at temperature 1")


class SelfAttentionOut(BaseModel):
    layers: int
    heads: int
    weights: list[list[list[list[float]]]] = Field(description="[layer][head][query][key] over `tokens`; "
                                                   "zero above the diagonal (causal)")


class StepResponse(BaseModel):
    prompt: str
    forced: list[int]
    ids: list[int] = Field(description="end-of-text, the prompt's ids, the forced ids")
    tokens: list[str] = Field(description="their pieces: the attention's axes")
    prompt_length: int = Field(description="positions of end-of-text and the prompt")
    text: str = Field(description="the prompt and the forced tokens as text")
    eot: int = Field(description="the end-of-text id: choosing it ends the line")
    top_k: int
    candidates: list[Candidate] = Field(description="the highest-scoring next tokens, best first")
    logsumexp: float = Field(description="log of the sum of exp(z) over the whole vocabulary")
    temperatures: list[float] = Field(description="the temperatures tail_logsumexp is given for")
    tail_logsumexp: list[float] | None = Field(description="log sum of exp(z / T) over the tokens that are not "
                                               "candidates, one per temperature; null when there are none")
    attention: SelfAttentionOut
    elapsed_ms: float


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"prompt": "three hundred and", "max_new_tokens": 50, "temperature": 0.8, "top_k": 20, "seed": 1}]})

    prompt: str = Field(description="the text to continue (one line)")
    max_new_tokens: int = Field(50, ge=1, description="tokens generated at most (fewer when the line ends)")
    temperature: float | None = Field(None, gt=0, description="sampling temperature; none of temperature, "
                                      "top_k and top_p: greedy")
    top_k: int | None = Field(None, ge=1, description="sample among the k most probable tokens")
    top_p: float | None = Field(None, gt=0, le=1, description="sample within the nucleus of mass p")
    seed: int | None = Field(None, ge=0, description="the same seed, the same sample (default 0)")


class GenerateResponse(BaseModel):
    prompt: str
    text: str = Field(description="the prompt and its continuation, to the end of the line")
    sampled: bool
    elapsed_ms: float


class LMExplainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(description="the text, as sent to /api/generate/step")
    forced: list[int] = Field([], max_length=MAX_FORCED, description="the ids chosen after it")
    layer: int = Field(ge=0, description="from 0")
    head: int = Field(ge=0, description="from 0")
    query: int = Field(ge=0, description="row of the attention map (a position of `tokens`), from 0")


class GenerateHealth(HealthBase):
    max_positions: int
    temperatures: list[float] = Field(description="the temperature slider's grid (as in every step answer)")


def add_generate_routes(app: FastAPI, service: LanguageModelService) -> None:
    """The routes of the generate view around one shared LanguageModelService."""
    max_chars = service.limits.max_chars

    @app.get("/api/health", response_model=GenerateHealth, summary="Model and server information")
    def health() -> dict[str, Any]:
        return service.info()

    @app.post("/api/generate/step", response_model=StepResponse, responses=ERRORS,
              summary="The next-token candidates and the attention after a prompt and chosen tokens")
    def step(request: StepRequest) -> dict[str, Any]:
        return service.step(one_line(request.prompt, max_chars, EMPTY_PROMPT), request.forced, request.top_k)

    @app.post("/api/generate", response_model=GenerateResponse, responses=ERRORS,
              summary="Continue a prompt (greedy, or sampled with temperature, top-k, top-p)")
    def generate(request: GenerateRequest) -> dict[str, Any]:
        prompt = one_line(request.prompt, max_chars, EMPTY_PROMPT)
        return service.generate(prompt, request.max_new_tokens, request.temperature, request.top_k,
                                request.top_p, request.seed)

    @app.post("/api/generate/explain", response_model=ExplainResponse, responses=ERRORS,
              summary="Equation 1 for one query of one head of the causal self-attention")
    def explain(request: LMExplainRequest) -> dict[str, Any]:
        prompt = one_line(request.prompt, max_chars, EMPTY_PROMPT)
        return service.explain(prompt, request.forced, request.layer, request.head, request.query)
