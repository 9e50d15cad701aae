"""The learner's model as the checks see it: a `Subject`. Two conventions need nothing of the
learner:

- the Annotated Transformer's (the study notes' seed 000): `encode(src, src_mask)`,
  `decode(memory, src_mask, tgt, tgt_mask)` and a `generator` giving log-probabilities;
- the assembled tutorial model's (seed 003's components put together as its tutorial does):
  `forward(src, trg, src_mask, trg_mask)` giving logits.

Any other style goes through an adapter that the learner writes in a few lines: a function
returning an object with `encode`, `decode` and `generator` (docs/check.md says how)."""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from transformer_mt.check.building import PAD, Sizes, build
from transformer_mt.check.loading import find_builder, load_file
from transformer_mt.check.masks import MaskSource, mask_source
from transformer_mt.check.recording import Call, attention_calls, record
from transformer_mt.common.errors import UserError

BATCH, SRC_LEN, TGT_LEN = 3, 7, 6  # unequal lengths: a source axis and a target axis never look alike
SRC_LENGTHS, TGT_LENGTHS = (7, 5, 4), (6, 4, 6)  # the real tokens of each sentence where padding is checked

Forward = Callable[[nn.Module, torch.Tensor, torch.Tensor, Any, Any], torch.Tensor]


def annotated_forward(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
                      tgt_mask: Any) -> torch.Tensor:
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    return model.generator(model.decode(memory, src_mask, tgt, tgt_mask))  # (B, T, tgt_vocab)


def tutorial_forward(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, src_mask: Any,
                     tgt_mask: Any) -> torch.Tensor:
    return model(src, tgt, src_mask, tgt_mask)  # (B, T, tgt_vocab)


@dataclass(frozen=True)
class Convention:
    """name; describe: for the report; output: what the last step gives ("log-probabilities"
    or "logits"); run: one teacher-forced pass to that output."""

    name: str
    describe: str
    output: str
    run: Forward


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


def tokens(vocab: int, length: int, seed: int) -> torch.Tensor:
    """(BATCH, length) random ids in 1 .. vocab - 1 (0 is the padding id)."""
    return torch.randint(1, vocab, (BATCH, length), generator=torch.Generator().manual_seed(seed))


def changed_everywhere(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Other real ids at every position: id + 1, wrapping within 1 .. vocab - 1."""
    return (ids % (vocab - 1)) + 1


def padded(ids: torch.Tensor, lengths: tuple[int, ...]) -> torch.Tensor:
    """ids with PAD after each sentence's length."""
    out = ids.clone()
    for row, length in enumerate(lengths):
        out[row, length:] = PAD
    return out


@dataclass
class Subject:
    """The learner's model, freshly built, with its convention, its masks and the batch the
    checks feed it. `notes` are what the kit did that the report must say."""

    path: Path
    name: str
    module: types.ModuleType
    builder: Callable[..., Any]
    model: nn.Module
    convention: Convention
    sizes: Sizes
    call: str
    masks: MaskSource
    notes: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def src(self) -> torch.Tensor:
        return tokens(self.sizes.src_vocab, SRC_LEN, seed=1)

    @property
    def tgt(self) -> torch.Tensor:
        return tokens(self.sizes.tgt_vocab, TGT_LEN, seed=2)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, masks: tuple[Any, Any] | None = None) -> torch.Tensor:
        """One teacher-forced pass (B, T, tgt_vocab), with the masks of `self.masks` unless given."""
        src_mask, tgt_mask = masks if masks is not None else self.masks.make(src, tgt)
        return self.convention.run(self.model, src, tgt, src_mask, tgt_mask)

    def recorded(self) -> list[Call]:
        """Every module call of one pass over the padded batch, recorded once."""
        if "pass" not in self.cache:
            src = padded(self.src, SRC_LENGTHS)
            self.cache["pass"] = record(self.model, lambda: self.forward(src, self.tgt))
        return self.cache["pass"]

    def attention_calls(self) -> list[Call]:
        """The calls of that pass to attention modules (a query, a key and a value in)."""
        return attention_calls(self.recorded(), self.sizes.d_model)

    def parameters(self) -> dict[str, nn.Parameter]:
        """Each parameter once (a tied one under its first name)."""
        return dict(self.model.named_parameters())

    def build(self, sizes: Sizes, seed: int = 0) -> nn.Module:
        """Another model from the same builder (learns_copy trains one)."""
        return build(self.name, self.builder, sizes, self.path, seed)[0]


def open_subject(path: Path, name: str | None = None, sizes: Sizes = Sizes(), seconds: float = 20.0) -> Subject:
    """Import FILE (within `seconds`), find NAME and build the model."""
    return subject_of(load_file(path, seconds), path, name, sizes)


def subject_of(module: types.ModuleType, path: Path, name: str | None = None, sizes: Sizes = Sizes()) -> Subject:
    """Find NAME in the imported file (make_model, get_model or class Transformer) and build the model."""
    name, builder = find_builder(module, path, name)
    model, sizes, call, notes = build(name, builder, sizes, path)
    masks = mask_source(module, sizes)
    return Subject(path, name, module, builder, model, convention_of(model, path), sizes, call, masks, notes)
