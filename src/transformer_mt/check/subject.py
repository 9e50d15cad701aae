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

from transformer_mt.learner.building import SRC_LENGTHS, Sizes, padded, probe_batch
from transformer_mt.learner.conventions import Convention
from transformer_mt.learner.loading import load_file
from transformer_mt.learner.masks import MaskSource
from transformer_mt.learner.model import LearnerModel, LearnerSource, build_learner
from transformer_mt.learner.recording import Call, attention_calls, record


def changed_everywhere(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Other real ids at every position: id + 1, wrapping within 1 .. vocab - 1."""
    return (ids % (vocab - 1)) + 1


@dataclass
class Subject:
    """The learner's model as training builds it (`built`: its builder, convention, sizes and
    masks are its own), and the batch the checks feed it. `notes` are what the kit did that the
    report must say."""

    path: Path
    module: types.ModuleType
    built: LearnerModel
    notes: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.built.name

    @property
    def builder(self) -> Callable[..., Any]:
        return self.built.builder

    @property
    def model(self) -> nn.Module:
        return self.built.learner

    @property
    def convention(self) -> Convention:
        return self.built.convention

    @property
    def sizes(self) -> Sizes:
        return self.built.sizes

    @property
    def call(self) -> str:
        return self.built.call

    @property
    def masks(self) -> MaskSource:
        return self.built.masks

    @property
    def src(self) -> torch.Tensor:
        return probe_batch(self.sizes)[0]

    @property
    def tgt(self) -> torch.Tensor:
        return probe_batch(self.sizes)[1]

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, masks: tuple[Any, Any] | None = None) -> torch.Tensor:
        """One teacher-forced pass (B, T, tgt_vocab), with the masks of `self.masks` unless given.
        In eval mode a dropout of theirs that still drops is off, and a model that draws random
        numbers anyway draws the same ones on every pass (the `dropout` check names both), so that
        two passes differ only where their inputs do."""
        if self.built.eval_random and not self.model.training:
            torch.manual_seed(0)
        return self.built.teacher_forced(src, tgt, masks)

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


def open_subject(path: Path, name: str | None = None, sizes: Sizes = Sizes(), seconds: float = 20.0) -> Subject:
    """Import FILE (within `seconds`), find NAME and build the model."""
    return subject_of(load_file(path, seconds), path, name, sizes)


def subject_of(module: types.ModuleType, path: Path, name: str | None = None, sizes: Sizes = Sizes()) -> Subject:
    """Find NAME in the imported file (make_model, get_model or class Transformer) and build the
    model as training does (learner/model.py::build_learner), its draws from seed 0."""
    built = build_learner(module, LearnerSource(path, name), sizes, seed=0)
    built.learner.eval()
    return Subject(path, module, built, list(built.notes))
