"""The work behind the generate view: one LanguageModel shared by every request.

A lock makes each model call run alone (a step pass hooks the shared model's attention
modules while it records them). Requests are small (one prompt), so they are not batched.

The step answer carries what the page needs to reshape the next-token distribution for a
temperature slider without asking again: the raw logits z of the CANDIDATES highest-scoring
tokens, log Σ_v exp(z_v) over the whole vocabulary (T = 1: exact probabilities), and for
every temperature T of the slider's grid (TEMPERATURES) log Σ exp(z_v / T) over the tokens
that are not candidates, so that softmax(z / T) is exact at every position of the slider:

    p_i(T) = exp(z_i / T - logaddexp(logsumexp_candidates(z / T), tail_logsumexp(T)))"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_mt.inference import language_model_inspection
from transformer_mt.common.errors import UserError
from transformer_mt.inference.language_model import LanguageModel
from transformer_mt.inference.language_model_inspection import NextToken
from transformer_mt.runs.directory import RunDir
from transformer_mt.server.translation_service import DECIMALS, first_line
from transformer_mt.inference.translator import check_line

CANDIDATES = 50  # next-token logits sent (the slider reshapes them in the browser); the most bars
TEMPERATURES = tuple(round(0.1 * i, 1) for i in range(1, 31))  # the slider's grid: 0.1 .. 3.0
EXAMPLE_WORDS = 12  # most words of the example prompt


@dataclass(frozen=True)
class GenerateLimits:
    """What one generate-view request may ask for; beyond it the API answers 413 or 422."""

    max_chars: int = 2000
    max_new_tokens: int = 256

    def as_dict(self) -> dict[str, int]:
        return {"max_chars": self.max_chars, "max_new_tokens": self.max_new_tokens, "max_top_k": CANDIDATES}


class LanguageModelService:
    """Next-token distributions, attention, equation 1 and whole continuations of prompts."""

    def __init__(self, lm: LanguageModel, name: str = "model", limits: GenerateLimits = GenerateLimits(),
                 example: str = "") -> None:
        """`example`: a prompt the page opens with ("" for none)."""
        self.lm = lm
        self.name = name
        self.limits = limits
        self.example = example
        self.lock = threading.Lock()
        self.requests = 0

    def info(self) -> dict[str, Any]:
        """What the page shows about the model: its kind, sizes, device and the request limits."""
        attention = self.lm.model.decoder.layers[0].self_attn
        return {
            "status": "ok",
            "kind": "language_model",
            "run": self.name,
            "device": str(self.lm.device),
            "n_layers": len(self.lm.model.decoder.layers),
            "n_heads": attention.n_heads,
            "d_model": attention.d_model,
            "vocab_size": len(self.lm.tokenizer),
            "max_positions": self.lm.model.positional.max_positions,
            "temperatures": list(TEMPERATURES),
            "example": self.example,
            "limits": self.limits.as_dict(),
            "requests": self.requests,
        }

    def _sequence(self, prompt: str, forced: list[int]) -> list[int]:
        check_line(prompt, 1)
        return language_model_inspection.sequence_ids(self.lm, prompt, forced)

    def step(self, prompt: str, forced: list[int], top_k: int) -> dict[str, Any]:
        """The sequence so far (end-of-text, the prompt, the `forced` ids), the CANDIDATES
        best tokens for the next position (`top_k` of them shown as bars) and the causal
        self-attention over the sequence."""
        start = time.perf_counter()
        with self.lock:
            self.requests += 1
            ids = self._sequence(prompt, forced)
            found = language_model_inspection.next_token(self.lm, ids)
        return {
            "prompt": prompt,
            "forced": forced,
            "ids": found.ids,
            "tokens": found.tokens,
            "prompt_length": len(ids) - len(forced),
            "text": self.lm.text_of(ids[len(self.lm.prefix):]),
            "eot": self.lm.eot,
            "top_k": top_k,
            **candidates_payload(found.logits, CANDIDATES, self.lm.tokenizer.id_to_piece),
            "attention": attention_payload(found),
            "elapsed_ms": round(1000 * (time.perf_counter() - start), 2),
        }

    def generate(self, prompt: str, max_new_tokens: int, temperature: float | None, top_k: int | None,
                 top_p: float | None, seed: int | None) -> dict[str, Any]:
        """The prompt continued to the end of its line or `max_new_tokens` (LanguageModel.generate)."""
        check_line(prompt, 1)
        if max_new_tokens > self.limits.max_new_tokens:
            raise UserError(f"max_new_tokens must be at most {self.limits.max_new_tokens}, got {max_new_tokens}")
        start = time.perf_counter()
        with self.lock:
            self.requests += 1
            text = self.lm.generate([prompt], max_new_tokens, temperature, top_k, top_p, seed)[0]
        sampled = not (temperature is None and top_k is None and top_p is None)
        return {"prompt": prompt, "text": text, "sampled": sampled,
                "elapsed_ms": round(1000 * (time.perf_counter() - start), 2)}

    def explain(self, prompt: str, forced: list[int], layer: int, head: int, query: int) -> dict[str, Any]:
        """Equation 1 opened up for one query of one head (language_model_inspection.explain)."""
        with self.lock:
            self.requests += 1
            ids = self._sequence(prompt, forced)
            return language_model_inspection.explain(self.lm, ids, layer, head, query)


def candidates_payload(logits: torch.Tensor, count: int, pieces: Any) -> dict[str, Any]:
    """The `count` highest logits of (V,) with their ids and pieces, best first; the
    log-sum-exp of all logits; and, for every T of TEMPERATURES, the log-sum-exp of the
    other logits divided by T (None when every token is a candidate)."""
    logits = logits.double()
    top = logits.topk(min(count, logits.numel()))
    ids = top.indices.tolist()
    rest = torch.ones_like(logits, dtype=torch.bool)
    rest[top.indices] = False
    tail = logits[rest]
    return {
        "candidates": [{"id": i, "token": token, "logit": z} for i, token, z in zip(ids, pieces(ids), top.values.tolist())],
        "logsumexp": float(torch.logsumexp(logits, 0)),
        "temperatures": list(TEMPERATURES),
        "tail_logsumexp": [float(torch.logsumexp(tail / t, 0)) for t in TEMPERATURES] if tail.numel() else None,
    }


def attention_payload(found: NextToken) -> dict[str, Any]:
    """The causal self-attention as JSON, weights[layer][head][query][key] over the sequence."""
    return {"layers": found.n_layers, "heads": found.n_heads,
            "weights": found.attention.round(decimals=DECIMALS).tolist()}


def example_prompt(run: str | Path, max_chars: int) -> str:
    """The start of the first line of the run's validation text (else its test text): its
    words but the last, at most EXAMPLE_WORDS of them, for the page to open with; "" when
    the run has no text to read."""
    run_dir = RunDir(Path(run))
    paths = [run_dir.data / "valid.txt"]
    try:
        valid = run_dir.read_config().data.valid_text
        paths += [Path(valid)] if valid else []
    except (ValueError, OSError):  # no or a broken config.yaml (ConfigError is a ValueError)
        pass
    words = first_line(paths + [run_dir.data / "test.txt"], max_chars).split()
    return " ".join(words[: min(len(words) - 1, EXAMPLE_WORDS)] if len(words) > 1 else words)
