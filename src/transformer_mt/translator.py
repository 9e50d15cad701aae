"""Translator: a trained run directory as a function from sentences to translations.

The CLI, the trainer's validation, the web server and notebooks all go through it:

    from transformer_mt import Translator
    translator = Translator.from_run("runs/demo")
    translator.translate(["forty-two"])      # ['zweiundvierzig']
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from transformer_mt.config import DecodeConfig, load_config, replace
from transformer_mt.data.batching import pad_sequences
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from transformer_mt.decoding.greedy import greedy_decode, max_lengths
from transformer_mt.errors import UserError
from transformer_mt.model.transformer import EncoderDecoder, build_model
from transformer_mt.run import CHECKPOINT_CHOICES, RunDir, resolve_device
from transformer_mt.training.checkpoint import list_checkpoints, load_checkpoint, load_weights

log = logging.getLogger("transformer_mt")


class Translator:
    """Batched translation with a model, its tokenizer and decoding settings."""

    def __init__(
        self, model: EncoderDecoder, tokenizer: Tokenizer, decode: DecodeConfig, device: torch.device
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.decode_cfg = decode
        self.device = device
        self.max_source = model.positional.pe.size(0) - 1  # room for eos

    @classmethod
    def from_run(
        cls, path: str | Path, device: str = "auto", checkpoint: str = "best", **decode_overrides
    ) -> "Translator":
        """Load config, tokenizer and weights (`checkpoint`: best, last or average)."""
        run = RunDir(Path(path)).require()
        cfg = load_config(run.config)
        tokenizer = Tokenizer.load(run.tokenizer)
        model = build_model(cfg.model)
        load_run_weights(model, run, checkpoint)
        decode = replace(cfg.decode, **decode_overrides)
        decode.validate()
        return cls(model, tokenizer, decode, resolve_device(device))

    def _encode(self, lines: list[str]) -> list[list[int]]:
        ids = self.tokenizer.encode(lines)
        for number, seq in enumerate(ids, start=1):
            if len(seq) > self.max_source:
                log.warning("input %d has %d subwords; truncated to the model's maximum of %d",
                            number, len(seq), self.max_source)
        return [seq[: self.max_source] for seq in ids]

    def _batches(self, ids: list[list[int]]) -> list[list[int]]:
        """Indices of non-empty inputs, longest first, cut into batches of ~batch_tokens."""
        order = sorted((i for i, s in enumerate(ids) if s), key=lambda i: -len(ids[i]))
        batches, current = [], []
        for i in order:
            width = len(ids[current[0]]) + 1 if current else len(ids[i]) + 1
            if current and width * (len(current) + 1) > self.decode_cfg.batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        return batches + ([current] if current else [])

    def _decode_batch(self, src: torch.Tensor) -> list[list[int]]:
        cfg = self.decode_cfg
        limits = max_lengths((src != PAD_ID).sum(1), cfg.max_len_a, cfg.max_len_b)
        limits = limits.clamp(max=self.max_source)
        tokens, _ = greedy_decode(self.model, src, limits, BOS_ID, EOS_ID, PAD_ID)
        return [row[row != PAD_ID].tolist() for row in tokens.cpu()]

    def translate(self, lines: list[str]) -> list[str]:
        """Translate sentences; an empty line gives an empty line, order is kept."""
        ids = self._encode(lines)
        outputs: list[list[int]] = [[] for _ in lines]
        for batch in self._batches(ids):
            src = pad_sequences([ids[i] + [EOS_ID] for i in batch]).to(self.device)
            for i, out in zip(batch, self._decode_batch(src)):
                outputs[i] = out
        return self.tokenizer.decode(outputs)


def load_run_weights(model: EncoderDecoder, run: RunDir, checkpoint: str = "best") -> Path:
    """Load weights from a run: best.safetensors, average.safetensors or the last
    step checkpoint; `best` falls back to the last checkpoint when none was selected yet."""
    if checkpoint not in CHECKPOINT_CHOICES:
        raise UserError(f"checkpoint must be one of {', '.join(CHECKPOINT_CHOICES)}, got {checkpoint!r}")
    if checkpoint in ("best", "average"):
        path = run.best if checkpoint == "best" else run.average
        if path.is_file():
            load_weights(model, path)
            return path
        if checkpoint == "average":
            raise UserError(f"{path}: missing; create it with `transformer-mt average {run.root} --last N`")
    steps = list_checkpoints(run.checkpoints)
    if not steps:
        raise UserError(f"{run.root}: no model weights (best.safetensors or checkpoints/step_N.pt)")
    state = load_checkpoint(steps[-1])
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as err:
        raise UserError(f"{steps[-1]}: does not match the model in config.yaml ({str(err).splitlines()[0]})") from None
    return steps[-1]
