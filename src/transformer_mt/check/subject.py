"""The learner's model as the checks see it: a `Subject`, built by the learner's own builder in
one of the two conventions (learner/conventions.py), with its masks and the batch the checks
feed it."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from transformer_mt.learner.building import PAD, Sizes, build
from transformer_mt.learner.conventions import Convention, convention_of
from transformer_mt.learner.loading import find_builder, load_file
from transformer_mt.learner.masks import MaskSource, mask_source
from transformer_mt.learner.model import runs_once
from transformer_mt.learner.recording import Call, attention_calls, record

BATCH, SRC_LEN, TGT_LEN = 3, 7, 6  # unequal lengths: a source axis and a target axis never look alike
SRC_LENGTHS, TGT_LENGTHS = (7, 5, 4), (6, 4, 6)  # the real tokens of each sentence where padding is checked


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
    subject = Subject(path, name, module, builder, model, convention_of(model, path), sizes, call, masks, notes)
    runs_once(subject.forward, model, sizes, path)  # a model that raises whenever it runs: one line, no checks
    return subject
