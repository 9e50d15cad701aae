"""LanguageModel: a trained (or imported GPT-2) decoder-only run as a function from
prompts to text, and from text to perplexity; what `generate`, `evaluate` on a
language-model run, the benchmarks and notebooks call:

    from transformer_mt import LanguageModel
    lm = LanguageModel.from_run("runs/lm")
    lm.generate(["three hundred"])                          # greedy, up to 50 new tokens
    lm.generate(["three hundred"], temperature=0.8, top_k=20, seed=1)   # sampled
    lm.perplexity(["one = 1", "two = 2"])                   # loss, perplexity, bits per char

A prompt starts where a line of the training stream starts: after the end-of-text id,
which is fed first. Generation stops at the next end-of-text (the end of the line) or
after `max_new_tokens`. Sampling settings are arguments of each call."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_mt.data.blocks import validation_blocks
from transformer_mt.data.text_stream import end_of_text
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.decoding.sampling import Sampling, generate
from transformer_mt.device import autocast, resolve_device
from transformer_mt.errors import UserError
from transformer_mt.model.language_model import DecoderOnly
from transformer_mt.runs import RunDir, load_run_model


def stream_loss(model: DecoderOnly, tokens: Any, block_size: int, blocks_per_batch: int, device: torch.device,
                precision: str = "fp32") -> tuple[float, int]:
    """(summed cross entropy in nats, tokens predicted) of a token stream, every token but
    the first predicted once from up to block_size tokens before it, in eval mode."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in validation_blocks(tokens, block_size, blocks_per_batch):
            batch = batch.to(device)
            with autocast(device, precision):
                logits = model.logits(batch.inputs)  # (B, T, V)
            total += nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch.targets.reshape(-1),
                                                 reduction="sum").item()
            count += batch.n_tokens
    return total, count


def stream_scores(nats: float, tokens: int, characters: int) -> tuple[float, float, float]:
    """(loss per token in nats, perplexity = exp(loss), bits per character) of a stream
    whose `tokens` predictions cost `nats`; bits per character compare models whose
    tokenizers cut the same text into different numbers of tokens."""
    loss = nats / max(tokens, 1)
    return loss, math.exp(min(loss, 100.0)), nats / math.log(2) / max(characters, 1)


def sampling_of(temperature: float | None, top_k: int | None, top_p: float | None) -> Sampling | None:
    """None (greedy) when no sampling setting is given, else the Sampling they describe;
    an impossible one is one UserError line."""
    if temperature is None and top_k is None and top_p is None:
        return None
    if top_k is not None and top_k < 1:
        raise UserError(f"top-k must be at least 1, got {top_k}")
    try:
        return Sampling(1.0 if temperature is None else temperature, top_k or 0, 1.0 if top_p is None else top_p)
    except ValueError as err:
        raise UserError(str(err)) from None


class LanguageModel:
    """Generation and scoring with a decoder-only model and its tokenizer."""

    def __init__(self, model: DecoderOnly, tokenizer: Tokenizer, device: torch.device, block_size: int = 128) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.eot = end_of_text(tokenizer)
        self.block_size = min(block_size, model.positional.max_positions)

    @classmethod
    def from_run(cls, path: str | Path, device: str = "auto", checkpoint: str = "best") -> "LanguageModel":
        """Config, tokenizer and weights of a language-model run (model.arch: decoder_only)."""
        cfg, tokenizer, model = load_run_model(RunDir(Path(path)), checkpoint, arch="decoder_only")
        return cls(model, tokenizer, resolve_device(device), cfg.data.block_size)

    def prompt_ids(self, prompt: str) -> list[int]:
        """End-of-text, then the prompt's ids; an empty or too long prompt is one UserError line."""
        if not prompt.strip():
            raise UserError("the prompt is empty; give some text to continue")
        ids = [self.eot, *self.tokenizer.encode([prompt])[0]]
        limit = self.model.positional.max_positions
        if len(ids) >= limit:
            raise UserError(f"the prompt has {len(ids) - 1} tokens; this model sees at most {limit - 1} "
                            f"(model.max_positions {limit} with one left to generate); shorten it")
        return ids

    def generate(self, prompts: list[str], max_new_tokens: int = 50, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None) -> list[str]:
        """Each prompt continued to the end of its line (or max_new_tokens): the whole text,
        prompt included. Greedy unless temperature, top_k or top_p is given; the same seed
        gives the same text. Prompts of one length are generated as one batch."""
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        sampling = sampling_of(temperature, top_k, top_p)
        ids = [self.prompt_ids(prompt) for prompt in prompts]
        generator = torch.Generator(device=self.device)
        generator.manual_seed(0 if seed is None else seed)
        texts: list[str] = [""] * len(prompts)
        for length in sorted({len(row) for row in ids}):
            rows = [i for i, row in enumerate(ids) if len(row) == length]
            prompt = torch.tensor([ids[i] for i in rows], device=self.device)
            new = generate(self.model, prompt, max_new_tokens, self.eot, sampling, generator)
            for i, continuation in zip(rows, new.tolist()):
                texts[i] = self.text_of(ids[i][1:] + continuation)
        return texts

    def text_of(self, ids: list[int]) -> str:
        """Ids -> text, up to the first end-of-text."""
        if self.eot in ids:
            ids = ids[: ids.index(self.eot)]
        return self.tokenizer.decode([ids])[0]

    def perplexity(self, lines: list[str]) -> dict[str, float]:
        """Cross entropy per token (nats), perplexity and bits per character of `lines` as one
        stream (each line then end-of-text, the first line after one), as validation computes them."""
        if not any(line.strip() for line in lines):
            raise UserError("no text to score")
        tokens = [self.eot] + [t for row in self.tokenizer.encode(lines) for t in (*row, self.eot)]
        nats, count = stream_loss(self.model, tokens, self.block_size, 16, self.device)
        loss, ppl, bpc = stream_scores(nats, count, sum(len(line) + 1 for line in lines))
        return {"loss": loss, "perplexity": ppl, "bits_per_character": bpc, "tokens": count, "lines": len(lines)}
