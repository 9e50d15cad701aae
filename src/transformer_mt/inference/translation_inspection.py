"""Looking inside a translation model: the attention weights of a source and an output
the model is forced to produce, and equation 1 spelt out for one query of one head.

The functions here take the model, its tokenizer and ids, never a Translator:
`Translator.attention` and `Translator.explain` (inference/translator.py) turn text into those ids
and call them. The weights
come from the model's `recorded_attention` (model/recording.py for ours, learner/model.py for
a learner's), which hooks the shared model for one pass: that pass must run alone on the model (the server holds its lock). `check_layer_head`
and `equation_1` serve the language model's page as well (inference/language_model_inspection.py)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from transformer_mt.common.specials import BOS_ID, PAD_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.common.device import autocast
from transformer_mt.common.errors import UserError
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.recording import AttentionRecorder
from transformer_mt.model.transformer import EncoderDecoder

ATTENTION_KINDS = ("encoder", "decoder", "cross")


class NoAttentionWeights(UserError):
    """A learner's model whose attention gives no weights to read (one on
    F.scaled_dot_product_attention, say): the page shows its translation without them."""


@dataclass(frozen=True)
class AttentionMaps:
    """Attention of one sentence pair. S = source subwords + eos, T = output subwords
    (+ eos when the translation finished).

    encoder (L, H, S, S), decoder (L, H, T, T), cross (L, H, T, S), float32 on the CPU;
    rows are queries and sum to 1. The decoder query at position t reads `target_in[t]`
    and produces `target[t]`."""

    source: list[str]
    target_in: list[str]
    target: list[str]
    translation: str
    encoder: torch.Tensor
    decoder: torch.Tensor
    cross: torch.Tensor

    @property
    def n_layers(self) -> int:
        """The encoder's layers (the decoder may have fewer: model.decoder_layers)."""
        return self.encoder.size(0)

    def layers(self, kind: str) -> int:
        """The layers of `kind`: the encoder's for encoder, the decoder's for decoder and cross."""
        return self.weights(kind).size(0)

    @property
    def n_heads(self) -> int:
        return self.encoder.size(1)

    def weights(self, kind: str) -> torch.Tensor:
        """(L, H, rows, columns) of `kind`: encoder, decoder or cross."""
        if kind not in ATTENTION_KINDS:
            raise UserError(f"attention kind must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
        return getattr(self, kind)

    def labels(self, kind: str) -> tuple[list[str], list[str], str, str]:
        """(row labels, column labels, row axis name, column axis name) of `kind`."""
        if kind == "encoder":
            return self.source, self.source, "source subword (query)", "source subword (key)"
        if kind == "decoder":
            return self.target_in, self.target_in, "decoder input (query)", "decoder input (key)"
        return self.target, self.source, "producing target subword", "source subword"

    def check_layer_head(self, layer: int, head: int, first: int = 1,
                         names: tuple[str, str] = ("--layer", "--head"), kind: str = "encoder") -> None:
        """UserError unless layer and head name one of this model's attention of `kind`, counted
        from `first`: 1 for the command line's --layer and --head, 0 for the Python and web APIs'
        `layer` and `head`. The message names the option or field (`names`) and its range."""
        check_layer_head(layer, head, self.layers(kind), self.n_heads, first, names)


def check_layer_head(layer: int, head: int, n_layers: int, n_heads: int, first: int = 0,
                     names: tuple[str, str] = ("layer", "head")) -> None:
    """UserError unless 0 <= layer - first < n_layers and 0 <= head - first < n_heads: the
    check of every API that names one head (translation and language model alike)."""
    for name, value, count in ((names[0], layer, n_layers), (names[1], head, n_heads)):
        if not first <= value < first + count:
            counted = " (counted from 0)" if first == 0 else ""
            raise UserError(f"{name} must be between {first} and {first + count - 1}{counted}, got {value}")


# ---- attention ---------------------------------------------------------------------------
@contextmanager
def forced_pass(model: EncoderDecoder, tokenizer: Tokenizer, src: torch.Tensor, output: list[int],
                translation: str, precision: str) -> Iterator[tuple[AttentionMaps, AttentionRecorder]]:
    """One teacher-forced pass of `model` with every attention module recorded: src (1, S)
    is the source's ids and eos, `output` the output's ids (with eos when the translation
    finished), `translation` its text, `precision` a resolved one (common/device.py). Inside the
    block the recorder still holds what it saw (weights and the q, k, mask of equation 1)."""
    device = src.device
    tgt_in = torch.tensor([[BOS_ID] + output[:-1]], device=device)  # (1, T)
    layers = model.attention_layers()
    with model.recorded_attention([module for kind in ATTENTION_KINDS for module in layers[kind]]) as recorded:
        with torch.inference_mode(), autocast(device, precision):
            model(src, tgt_in, padding_mask(src, PAD_ID))
        try:
            stacks = [recorded.stacked(layers[kind]) for kind in ATTENTION_KINDS]
        except (KeyError, RuntimeError):  # a module that gave no weights, or a kind with no module
            raise NoAttentionWeights("the model's attention modules give no weights to show (an attention on "
                                     "F.scaled_dot_product_attention, say)") from None
        source_pieces = tokenizer.source_id_to_piece(src[0].tolist())  # the encoder's ids: the source vocabulary
        maps = AttentionMaps(source_pieces, tokenizer.id_to_piece(tgt_in[0].tolist()), tokenizer.id_to_piece(output),
                             translation, *stacks)
        yield maps, recorded


def explain_query(model: EncoderDecoder, maps: AttentionMaps, recorded: AttentionRecorder, kind: str, layer: int,
            head: int, query: int) -> dict[str, Any]:
    """Equation 1 for one query of one head of a `forced_pass` (its `maps` and `recorded`):
    the attention of `kind` (encoder, decoder or cross); layer, head, query count from 0."""
    maps.check_layer_head(layer, head, first=0, names=("layer", "head"), kind=kind)
    module = model.attention_layers()[kind][layer]
    if not isinstance(module, MultiHeadAttention):
        raise UserError("equation 1 is spelt out for this package's attention, whose q and k it reads; your "
                        "model's weights are shown as its softmax gave them")
    rows, columns, _, _ = maps.labels(kind)
    return equation_1(recorded, module, head, query, rows, columns)


def equation_1(recorded: AttentionRecorder, module: MultiHeadAttention, head: int, query: int,
               rows: list[str], columns: list[str]) -> dict[str, Any]:
    """Equation 1 for one query of one head of a recorded pass (batch row 0): q.k_j for
    every key j, divided by sqrt(d_k), the mask, and the softmax of the row, with the
    query's and the keys' tokens (`rows`, `columns`). One implementation for every
    attention a page explains: the translator's three kinds and a language model's."""
    q, k, mask = recorded.inputs(module)
    if not 0 <= query < q.size(2):
        raise UserError(f"query must be between 0 and {q.size(2) - 1}, got {query}")
    dot = (k[0, head].float() @ q[0, head, query].float()).cpu()  # (Tk,)
    scaled = dot / module.d_k**0.5
    allowed = (torch.ones_like(dot, dtype=torch.bool) if mask is None
               else mask.expand(1, module.n_heads, q.size(2), k.size(2))[0, head, query].cpu())
    weights = scaled.masked_fill(~allowed, float("-inf")).softmax(-1)
    return {"d_k": module.d_k, "sqrt_d_k": module.d_k**0.5, "query_token": rows[query], "key_tokens": columns,
            "dot": dot.tolist(), "scaled": scaled.tolist(), "mask": allowed.tolist(), "weights": weights.tolist()}
