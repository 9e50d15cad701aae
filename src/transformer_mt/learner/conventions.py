"""The two conventions a learner's model is read in, with nothing added to their file:

- the Annotated Transformer's (the study notes' seed 000): `encode(src, src_mask)`,
  `decode(memory, src_mask, tgt, tgt_mask)` and a `generator` giving log-probabilities;
- the assembled tutorial model's (seed 003's components put together as its tutorial does):
  `forward(src, trg, src_mask, trg_mask)` giving logits.

Any other style goes through an adapter that the learner writes in a few lines: a function
returning an object with `encode`, `decode` and `generator` (docs/check.md says how)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_mt.common.errors import UserError
from transformer_mt.learner.faults import taken


class Convention:
    """A convention owns every pass of a learner's model: the teacher-forced one (`states`, then
    `scores`), the one as their code returns it (`as_written`, for the report), and the two halves
    decoding drives (`encode`, `decode`) on a LearnerModel (`lm`, learner/model.py). `name`;
    `describe`, for the report; `output`, what the last step gives ("log-probabilities" or
    "logits")."""

    name = describe = output = ""

    def states(self, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
               tgt_mask: Any) -> torch.Tensor:
        """Teacher forcing up to what `scores` takes: (B, T, d_model) or (B, T, tgt_vocab)."""
        raise NotImplementedError

    def scores(self, model: nn.Module, states: torch.Tensor) -> torch.Tensor:
        """(B, T, tgt_vocab) from `states`: their generator's output, or the states themselves."""
        return states

    def as_written(self, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any, tgt_mask: Any) -> Any:
        """One teacher-forced pass, its output as their code returns it (a tuple stays a tuple)."""
        raise NotImplementedError

    def run(self, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
            tgt_mask: Any) -> torch.Tensor:
        """One teacher-forced pass to the scores (B, T, tgt_vocab)."""
        return self.scores(model, self.states(model, src, tgt, src_mask, tgt_mask))

    def output_layer(self, model: nn.Module, tgt_vocab: int) -> str | None:
        """The name of the one layer that decoding may feed only the last position, or None."""
        return None

    def encode(self, lm: Any, src: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, lm: Any, memory: torch.Tensor, their_src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Annotated(Convention):
    """encode(src, src_mask), decode(memory, src_mask, tgt, tgt_mask), a generator giving
    log-probabilities: decoding runs their encoder once and their decoder on each prefix."""

    name = "annotated"
    describe = ("the Annotated Transformer's: encode(src, src_mask), decode(memory, src_mask, tgt, tgt_mask), "
                "generator giving log-probabilities")
    output = "log-probabilities"

    def states(self, model, src, tgt, src_mask, tgt_mask):
        memory = taken(model.encode(src, src_mask))  # (B, S, d_model)
        return taken(model.decode(memory, src_mask, tgt, tgt_mask))  # (B, T, d_model)

    def scores(self, model, states):
        return taken(model.generator(states))  # (B, T, tgt_vocab)

    def as_written(self, model, src, tgt, src_mask, tgt_mask):
        return model.generator(self.states(model, src, tgt, src_mask, tgt_mask))

    def encode(self, lm, src):
        return taken(lm.learner.encode(src, lm.masks.make(src, src[:, :1])[0]))  # (B, S, d_model)

    def decode(self, lm, memory, their_src, tgt):
        their_src_mask, their_tgt_mask = lm.masks.make(their_src, tgt)
        return taken(lm.learner.decode(memory, their_src_mask, tgt, their_tgt_mask))  # (B, T, d_model)


class Tutorial(Convention):
    """forward(src, trg, src_mask, trg_mask) giving logits: decoding reuses their encoder's output
    and feeds their output layer the last position only, where each gives their forward's scores
    (LearnerModel.encoder_output, LearnerModel.last_logits)."""

    name = "tutorial"
    describe = "the assembled tutorial model's: forward(src, trg, src_mask, trg_mask) giving logits"
    output = "logits"

    def states(self, model, src, tgt, src_mask, tgt_mask):
        return taken(model(src, tgt, src_mask, tgt_mask))  # (B, T, tgt_vocab)

    def as_written(self, model, src, tgt, src_mask, tgt_mask):
        return model(src, tgt, src_mask, tgt_mask)

    def output_layer(self, model, tgt_vocab):
        """Their one nn.Linear to the target vocabulary (the tutorial's `self.out`), None where
        there is none or more than one."""
        names = [name for name, module in model.named_modules()
                 if isinstance(module, nn.Linear) and module.out_features == tgt_vocab]
        return names[0] if len(names) == 1 else None

    def encode(self, lm, src):
        return lm.encoder_output(src)  # (B, S, d_model), or the ids (B, S)

    def decode(self, lm, memory, their_src, tgt):
        return lm.last_logits(memory, their_src, tgt)  # (B, 1, V) or (B, T, V)


ANNOTATED, TUTORIAL = Annotated(), Tutorial()


def convention_of(model: nn.Module, path: Path) -> Convention:
    if all(callable(getattr(model, name, None)) for name in ("encode", "decode", "generator")):
        return ANNOTATED
    if len(inspect.signature(model.forward).parameters) >= 4:
        return TUTORIAL
    raise UserError(f"{path}: the model has neither encode, decode and generator (the Annotated Transformer's "
                    "convention) nor forward(src, trg, src_mask, trg_mask) (the tutorial's): write an adapter of a "
                    "few lines (docs/check.md#your-code-in-another-shape)")
