"""The two conventions a learner's model is read in, with nothing added to their file:

- the Annotated Transformer's (the study notes' seed 000): `encode(src, src_mask)`,
  `decode(memory, src_mask, tgt, tgt_mask)` and a `generator` giving log-probabilities;
- the assembled tutorial model's (seed 003's components put together as its tutorial does):
  `forward(src, trg, src_mask, trg_mask)` giving logits.

Any other style goes through an adapter that the learner writes in a few lines: a function
returning an object with `encode`, `decode` and `generator` (docs/check.md says how)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from transformer_mt.common.errors import UserError
from transformer_mt.learner.faults import taken

Forward = Callable[[nn.Module, torch.Tensor, torch.Tensor, Any, Any], torch.Tensor]


def annotated_forward(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
                      tgt_mask: Any) -> Any:
    memory = taken(model.encode(src, src_mask))  # (B, S, d_model)
    return model.generator(taken(model.decode(memory, src_mask, tgt, tgt_mask)))  # (B, T, tgt_vocab)


def tutorial_forward(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
                     tgt_mask: Any) -> Any:
    return model(src, tgt, src_mask, tgt_mask)  # (B, T, tgt_vocab)


@dataclass(frozen=True)
class Convention:
    """name; describe: for the report; output: what the last step gives ("log-probabilities"
    or "logits"); as_written: one teacher-forced pass, its output as their code returns it;
    `run`: that output, the first tensor of a tuple ((logits, attention))."""

    name: str
    describe: str
    output: str
    as_written: Forward

    def run(self, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
            tgt_mask: Any) -> torch.Tensor:
        return taken(self.as_written(model, src, tgt, src_mask, tgt_mask))  # (B, T, tgt_vocab)


ANNOTATED = Convention("annotated", "the Annotated Transformer's: encode(src, src_mask), decode(memory, src_mask, "
                       "tgt, tgt_mask), generator giving log-probabilities", "log-probabilities", annotated_forward)
TUTORIAL = Convention("tutorial", "the assembled tutorial model's: forward(src, trg, src_mask, trg_mask) giving "
                      "logits", "logits", tutorial_forward)


def convention_of(model: nn.Module, path: Path) -> Convention:
    if all(callable(getattr(model, name, None)) for name in ("encode", "decode", "generator")):
        return ANNOTATED
    if len(inspect.signature(model.forward).parameters) >= 4:
        return TUTORIAL
    raise UserError(f"{path}: the model has neither encode, decode and generator (the Annotated Transformer's "
                    "convention) nor forward(src, trg, src_mask, trg_mask) (the tutorial's): write an adapter of a "
                    "few lines (docs/check.md#your-code-in-another-shape)")
