"""Translator: a trained run directory as a function from sentences to translations.

The CLI, the trainer's validation, the web server and notebooks all go through it:

    from transformer_mt import Translator
    translator = Translator.from_run("runs/demo")
    translator.translate(["forty-two"])      # ['zweiundvierzig']
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from transformer_mt.config import DecodeConfig, load_config, replace
from transformer_mt.data.batching import pad_sequences
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, Tokenizer
from transformer_mt.decoding.beam import beam_search
from transformer_mt.decoding.greedy import greedy_decode, max_lengths
from transformer_mt.errors import UserError
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder, build_model
from transformer_mt.run import CHECKPOINT_CHOICES, RunDir, resolve_device
from transformer_mt.training.checkpoint import list_checkpoints, load_checkpoint, load_weights

log = logging.getLogger("transformer_mt")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


Hypotheses = list[tuple[list[int], float]]  # n-best of one sentence: (subword ids, score)


class Translator:
    """Batched translation with a model, its tokenizer and decoding settings.

    `decode.beam` > 1 searches with `beam_search`, beam 1 with `greedy_decode`. Inputs
    are sorted by length into batches of about `decode.batch_tokens` source tokens and
    the outputs put back in input order. An empty input line gives an empty output line;
    an input longer than the model's maximum position (model.max_len - 1 subwords) is
    truncated to it with a warning."""

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
        cls,
        path: str | Path,
        device: str = "auto",
        checkpoint: str = "best",
        dtype: str = "float32",
        **decode_overrides: Any,
    ) -> "Translator":
        """Load config, tokenizer and weights of a run directory.

        `checkpoint`: best, last or average; `dtype`: float32, or bfloat16 to cast the
        weights (faster on CPUs with bf16 units); `decode_overrides`: DecodeConfig fields
        such as beam=4, length_penalty=0.6, batch_tokens=2048."""
        if dtype not in DTYPES:
            raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        run = RunDir(Path(path)).require()
        cfg = load_config(run.config)
        tokenizer = Tokenizer.load(run.tokenizer)
        if len(tokenizer) != cfg.model.tgt_vocab_size:
            raise UserError(f"{run.tokenizer}: has {len(tokenizer)} subwords but {run.config} says "
                            f"model.tgt_vocab_size={cfg.model.tgt_vocab_size}")
        model = build_model(cfg.model)
        load_run_weights(model, run, checkpoint)
        try:
            decode = replace(cfg.decode, **decode_overrides)
        except TypeError as err:
            raise UserError(f"unknown decoding setting ({err})") from None
        decode.validate()
        return cls(model.to(DTYPES[dtype]), tokenizer, decode, resolve_device(device))

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

    def _decode_batch(self, src: torch.Tensor, beam: int, nbest: int) -> list[Hypotheses]:
        """n-best (ids without specials, score) for each row of src (B, S)."""
        cfg = self.decode_cfg
        limits = max_lengths((src != PAD_ID).sum(1), cfg.max_len_a, cfg.max_len_b)
        limits = limits.clamp(max=self.max_source)
        if beam == 1 and nbest == 1:
            tokens, scores = greedy_decode(self.model, src, limits, BOS_ID, EOS_ID, PAD_ID)
            tokens, scores = tokens[:, None], scores[:, None]
        else:
            tokens, scores = beam_search(self.model, src, beam, limits, BOS_ID, EOS_ID, PAD_ID,
                                         length_penalty=cfg.length_penalty, nbest=nbest)
        return [
            [([i for i in row.tolist() if i not in SPECIAL_IDS], float(s)) for row, s in zip(rows, row_scores)]
            for rows, row_scores in zip(tokens.cpu(), scores.float().cpu())
        ]

    def _search(self, lines: list[str], beam: int, nbest: int) -> list[Hypotheses]:
        """Decode `lines` in length-sorted batches; results in input order."""
        ids = self._encode(lines)
        outputs: list[Hypotheses] = [[([], 0.0)] for _ in lines]
        for batch in self._batches(ids):
            src = pad_sequences([ids[i] + [EOS_ID] for i in batch]).to(self.device)
            for i, found in zip(batch, self._decode_batch(src, beam, nbest)):
                outputs[i] = found
        return outputs

    def translate(self, lines: list[str]) -> list[str]:
        """Translate sentences; an empty line gives an empty line, order is kept."""
        found = self._search(lines, self.decode_cfg.beam, 1)
        return self.tokenizer.decode([hypotheses[0][0] for hypotheses in found]) if lines else []

    def translate_nbest(self, lines: list[str], n: int) -> list[list[tuple[str, float]]]:
        """The n best translations of each line, best first, with their scores (log-prob
        divided by the length penalty). Searches with a beam of max(decode.beam, n); an
        empty line gives [("", 0.0)]."""
        if n < 1:
            raise UserError(f"n-best size must be at least 1, got {n}")
        found = self._search(lines, max(self.decode_cfg.beam, n), n)
        return [
            list(zip(self.tokenizer.decode([ids for ids, _ in hypotheses]), (s for _, s in hypotheses)))
            for hypotheses in found
        ]

    @torch.inference_mode()
    def attention(self, sentence: str, translation: str | None = None) -> dict[str, Any]:
        """Attention weights of one sentence and its translation: the output is
        teacher-forced through the model once with every MultiHeadAttention storing its
        weights. The output is `translation` when given (one already found, for example by
        a batched beam search: no decoding again), else the configured decoding's.
        Not thread-safe: it switches the shared model's `store_attention`.

        Returns source (S subword pieces, eos included), target_in (T decoder inputs:
        bos + output), target (T pieces the decoder produces: output + eos when it ended),
        translation (text), and float32 cpu tensors encoder (L, H, S, S), decoder
        (L, H, T, T) and cross (L, H, T, S): rows are queries and sum to 1."""
        src_ids = self._encode([sentence])[0]
        if not src_ids:
            raise UserError("the sentence to show attention for is empty")
        src = torch.tensor([src_ids + [EOS_ID]], device=self.device)
        if translation is None:
            output = self._output_with_eos(src)
        else:
            output = self.tokenizer.encode([translation])[0][: self.max_source] + [EOS_ID]
        tgt_in = torch.tensor([[BOS_ID] + output[:-1]], device=self.device)
        self.model.set_store_attention(True)
        try:
            self.model(src, tgt_in, padding_mask(src, PAD_ID))
            encoder = _stored_attention([layer.self_attn for layer in self.model.encoder.layers])
            decoder = _stored_attention([layer.self_attn for layer in self.model.decoder.layers])
            cross = _stored_attention([layer.src_attn for layer in self.model.decoder.layers])
        finally:
            self.model.set_store_attention(False)
        pieces = self.tokenizer.id_to_piece
        return {
            "source": pieces(src[0].tolist()),
            "target_in": pieces(tgt_in[0].tolist()),
            "target": pieces(output),
            "translation": self.tokenizer.decode([output])[0],
            "encoder": encoder,
            "decoder": decoder,
            "cross": cross,
        }

    def _output_with_eos(self, src: torch.Tensor) -> list[int]:
        """The decoded output of one source (1, S), eos included when it was emitted."""
        cfg = self.decode_cfg
        limits = max_lengths((src != PAD_ID).sum(1), cfg.max_len_a, cfg.max_len_b).clamp(max=self.max_source)
        if cfg.beam == 1:
            tokens, _ = greedy_decode(self.model, src, limits, BOS_ID, EOS_ID, PAD_ID)
            row = tokens[0]
        else:
            tokens, _ = beam_search(self.model, src, cfg.beam, limits, BOS_ID, EOS_ID, PAD_ID,
                                    length_penalty=cfg.length_penalty)
            row = tokens[0, 0]
        return [i for i in row.tolist() if i != PAD_ID] or [EOS_ID]


def _stored_attention(modules: list[torch.nn.Module]) -> torch.Tensor:
    """The stored (1, H, Tq, Tk) weights of each layer's module -> (L, H, Tq, Tk) float32 on cpu."""
    return torch.stack([module.attn[0].float().cpu() for module in modules])


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
        raise UserError(f"{run.checkpoints}: no step_N.pt checkpoint (and no {run.best.name}); "
                        "train the run first")
    state = load_checkpoint(steps[-1])
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as err:
        raise UserError(f"{steps[-1]}: does not match the model in config.yaml ({str(err).splitlines()[0]})") from None
    return steps[-1]
