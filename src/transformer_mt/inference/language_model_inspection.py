"""Looking inside a LanguageModel's next-token decision: the scores of every token for the
position after a prompt and the tokens chosen so far, the causal self-attention of every
layer and head over that sequence, and equation 1 spelt out for one cell of it.

What the page's generate view shows (server/language_model_service.py), as inference/translation_inspection.py is for a
translation model. The weights come from `record_attention` (model/recording.py), which
hooks the shared model for one pass: that pass must run alone on the model (the server
holds its lock). Equation 1 is `inspection.equation_1`, the translator's own implementation.

    ids = sequence_ids(lm, "three hundred", forced=[])     # lm.prefix, then the prompt
    found = next_token(lm, ids)
    found.logits.argmax()       # the token greedy generation picks next
    found.attention[0, 1]       # layer 1, head 2: (T, T), zero above the diagonal"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from transformer_mt.common.errors import UserError
from transformer_mt.inference.language_model import LanguageModel
from transformer_mt.inference.translation_inspection import check_layer_head, equation_1
from transformer_mt.model.recording import AttentionRecorder, record_attention


@dataclass(frozen=True)
class NextToken:
    """One recorded pass over a sequence (lm.prefix, the prompt, the chosen tokens).

    ids and tokens: the sequence (T) as ids and pieces; logits (V,): the scores of the
    token after it, float32 on the CPU (softmax gives P(x_T | x_<T)); attention
    (L, H, T, T): the causal self-attention weights, rows are queries and sum to 1."""

    ids: list[int]
    tokens: list[str]
    logits: torch.Tensor
    attention: torch.Tensor

    @property
    def n_layers(self) -> int:
        return self.attention.size(0)

    @property
    def n_heads(self) -> int:
        return self.attention.size(1)


def sequence_ids(lm: LanguageModel, prompt: str, forced: list[int]) -> list[int]:
    """lm.prefix (end-of-text for a run trained here, nothing for an imported GPT-2), the
    prompt's ids, then the `forced` ids chosen so far; UserError for an
    empty prompt, an id outside the vocabulary, a forced end-of-text (it ends the line) or
    a sequence that leaves the model no position to predict."""
    ids = lm.prompt_ids(prompt)
    vocabulary = len(lm.tokenizer)
    for number, token in enumerate(forced, start=1):
        if not 0 <= token < vocabulary:
            raise UserError(f"forced token {number} is {token}; ids run from 0 to {vocabulary - 1}")
        if token == lm.eot:
            raise UserError(f"forced token {number} is end-of-text: the line ends there, nothing follows it")
    limit = lm.model.positional.max_positions
    if len(ids) + len(forced) >= limit:
        raise UserError(f"the prompt and the chosen tokens make {len(ids) + len(forced) - len(lm.prefix)} tokens; "
                        f"this model sees at most {limit - 1} (model.max_positions {limit}); start again with a "
                        "shorter prompt")
    return ids + list(forced)


@contextmanager
def _recorded_pass(lm: LanguageModel, ids: list[int]) -> Iterator[tuple[torch.Tensor, AttentionRecorder]]:
    """The model's logits (1, T, V) over `ids`, every self-attention recorded; inside the
    block the recorder still holds the weights and the q, k and mask of equation 1."""
    tokens = torch.tensor([ids], device=lm.device)
    with record_attention(lm.model) as recorded, torch.inference_mode():
        yield lm.model.logits(tokens), recorded


def _self_attention(lm: LanguageModel) -> list[Any]:
    return [layer.self_attn for layer in lm.model.decoder.layers]


def next_token(lm: LanguageModel, ids: list[int]) -> NextToken:
    """The scores of the token after `ids` and the attention over them, in one pass (the
    explicit attention path: the same numbers as `generate` up to float rounding)."""
    with _recorded_pass(lm, ids) as (logits, recorded):
        attention = recorded.stacked(_self_attention(lm))
        last = logits[0, -1].float().cpu()
    return NextToken(list(ids), lm.tokenizer.id_to_piece(list(ids)), last, attention)


def explain(lm: LanguageModel, ids: list[int], layer: int, head: int, query: int) -> dict[str, Any]:
    """Equation 1 for one query (row) of one head's causal self-attention over `ids`:
    q.k_j, divided by sqrt(d_k), the mask (later positions masked) and the softmax, which
    equals the row `next_token` shows. layer, head, query count from 0."""
    modules = _self_attention(lm)
    check_layer_head(layer, head, len(modules), modules[0].n_heads)
    tokens = lm.tokenizer.id_to_piece(list(ids))
    with _recorded_pass(lm, ids) as (_, recorded):
        return equation_1(recorded, modules[layer], head, query, tokens, tokens)
