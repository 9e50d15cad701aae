"""LanguageModel: a trained (or imported GPT-2) decoder-only run as a function from
prompts to text, and from text to perplexity; what `generate`, `evaluate` on a
language-model run, the benchmarks and notebooks call:

    from transformer_mt import LanguageModel
    lm = LanguageModel.from_run("runs/lm")
    lm.generate(["three hundred"])                          # greedy, up to 50 new tokens
    lm.generate(["three hundred"], temperature=0.8, top_k=20, seed=1)   # sampled
    lm.perplexity(["one = 1", "two = 2"])                   # loss, perplexity, bits per char

Where a prompt starts depends on how the run was made (`after_end_of_text`). A run this
package trained saw every line of its text after the end-of-text id (data/text_stream.py
ends each line with it), so its prompts are fed after that id, where a line starts. An
imported GPT-2 continues a prompt from the prompt's own tokens alone, as transformers'
`generate` and GPT-2's own sampling code do, so that both give the same text. Generation
stops at the next end-of-text (the end of the line) or after `max_new_tokens`. Sampling
settings are arguments of each call."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_mt.data.blocks import validation_blocks
from transformer_mt.data.text_stream import end_of_text
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.decoding.sampling import Sampling, generate
from transformer_mt.common.device import autocast, resolve_device
from transformer_mt.common.errors import UserError
from transformer_mt.model.language_model import DecoderOnly
from transformer_mt.runs.directory import RunDir, list_checkpoints, load_run_model

IMPORTED_GPT2 = "huggingface-gpt2"  # imported.json's format of a run written by `import gpt2`
MAX_SEED = 2**64 - 1  # the largest seed torch.Generator takes


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


def check_text(text: str, what: str) -> None:
    """UserError when `text` holds a lone surrogate: on the command line, bytes that were
    not UTF-8 (Python keeps byte 0xNN as U+DCNN); no tokenizer can encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        char = ord(text[err.start])
        byte = f"byte 0x{char - 0xDC00:02x}" if 0xDC80 <= char <= 0xDCFF else f"U+{char:04X}"
        raise UserError(f"{what} is not valid UTF-8 ({byte} at character {err.start + 1}); "
                        "give it as UTF-8 text") from None


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


def check_seed(seed: int | None, name: str = "seed") -> None:
    """A seed torch.Generator takes (0 to 2^64 - 1), else one UserError line naming `name`."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UserError(f"{name} must be from 0 to {MAX_SEED} (2^64 - 1), got {seed}")


def starts_after_end_of_text(run: RunDir) -> bool:
    """How the run was made decides where its prompts start: after end-of-text for a run
    trained here (its training stream puts end-of-text before every line), from the
    prompt alone for a GPT-2 imported by `import gpt2` and never trained here (as
    transformers continues it)."""
    try:
        made = json.loads((run.root / "imported.json").read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        made = None
    return made != IMPORTED_GPT2 or bool(list_checkpoints(run.checkpoints))


class LanguageModel:
    """Generation and scoring with a decoder-only model and its tokenizer.

    `after_end_of_text`: prompts are fed after the end-of-text id (a model trained here),
    or alone (an imported GPT-2); see the module docstring."""

    def __init__(self, model: DecoderOnly, tokenizer: Tokenizer, device: torch.device, block_size: int = 128,
                 after_end_of_text: bool = True) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.eot = end_of_text(tokenizer)
        self.block_size = min(block_size, model.positional.max_positions)
        self.after_end_of_text = after_end_of_text

    @classmethod
    def from_run(cls, path: str | Path, device: str = "auto", checkpoint: str = "best") -> "LanguageModel":
        """Config, tokenizer and weights of a language-model run (model.arch: decoder_only);
        where its prompts start is decided by how it was made (`starts_after_end_of_text`)."""
        run = RunDir(Path(path))
        cfg, tokenizer, model = load_run_model(run, checkpoint, arch="decoder_only")
        return cls(model, tokenizer, resolve_device(device), cfg.data.block_size, starts_after_end_of_text(run))

    @property
    def prefix(self) -> list[int]:
        """The ids fed before every prompt: end-of-text, or nothing (`after_end_of_text`)."""
        return [self.eot] if self.after_end_of_text else []

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prefix (end-of-text, or nothing), then the prompt's ids; an empty, too long or
        not encodable prompt (a lone surrogate: bytes that were not UTF-8) is one UserError line."""
        if not prompt.strip():
            raise UserError("the prompt is empty; give some text to continue")
        check_text(prompt, "the prompt")
        ids = [*self.prefix, *self.tokenizer.encode([prompt])[0]]
        limit = self.model.positional.max_positions
        if len(ids) >= limit:
            raise UserError(f"the prompt has {len(ids) - len(self.prefix)} tokens; this model sees at most "
                            f"{limit - 1} (model.max_positions {limit} with one left to generate); shorten it")
        return ids

    def room(self, prompt: str) -> int:
        """The most tokens the model can add to `prompt`: its positions left after the prompt."""
        return self.model.positional.max_positions - len(self.prompt_ids(prompt))

    def generate(self, prompts: list[str], max_new_tokens: int = 50, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None) -> list[str]:
        """Each prompt continued to the end of its line (or max_new_tokens): the whole text,
        prompt included. Greedy unless temperature, top_k or top_p is given; the same seed
        gives the same text. Prompts of one length are generated as one batch."""
        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        sampling = sampling_of(temperature, top_k, top_p)
        check_seed(seed)
        ids = [self.prompt_ids(prompt) for prompt in prompts]
        generator = torch.Generator(device=self.device)
        generator.manual_seed(0 if seed is None else seed)
        texts: list[str] = [""] * len(prompts)
        for length in sorted({len(row) for row in ids}):
            rows = [i for i, row in enumerate(ids) if len(row) == length]
            prompt = torch.tensor([ids[i] for i in rows], device=self.device)
            new = generate(self.model, prompt, max_new_tokens, self.eot, sampling, generator)
            for i, continuation in zip(rows, new.tolist()):
                texts[i] = self.text_of(ids[i][len(self.prefix):] + continuation)
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
