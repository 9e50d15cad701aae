"""What is trained: the seam between the training loop and a kind of model.

The Trainer (training/trainer.py) is one loop for every task: steps, accumulation,
precision, resume, DDP, divergence checks, logging, checkpoints. A task is what differs
between, say, translation (training/translation.py) and a language model:

    build_model()          the model, sized for the task's data (vocabulary)
    train_batches(...)     an endless, resumable, seeded stream of training batches
    loss_view(model)       a module whose forward(batch) is (logits (N, V), targets (N,)):
                           the N predicted tokens of the batch. DDP wraps this module,
                           so gradients are reduced by the ordinary forward/backward
    criterion(model)       the loss of (logits, targets, scale), summed over tokens, times scale
    validate(model, ...)   a dict of validation numbers ({} without validation data)
    selection              which of those numbers selects the best model, and its direction
    summary(batches)       one log line about the data, before training starts
    prepared_summary()     what `prepare` made, in a few words

A batch only needs `to(device)` and `n_tokens` (the targets it holds): the loss of a step
is divided by the tokens of all its batches, so an update does not depend on how the
tokens were cut into batches or processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, TypeVar

import torch
from torch import nn

from transformer_mt.common.config import Config, replace
from transformer_mt.runs.directory import RunDir
from transformer_mt.training.distributed import DistributedContext, barrier

Prepared = TypeVar("Prepared")


class TrainingBatch(Protocol):
    n_tokens: int

    def to(self, device: torch.device) -> "TrainingBatch":
        ...


class BatchSource(Protocol):
    """An endless stream of batches whose position can be saved and restored."""

    def __iter__(self) -> Iterator[TrainingBatch]:
        ...

    def __next__(self) -> TrainingBatch:
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...


@dataclass(frozen=True)
class Selection:
    """The validation number that selects the best model: its key in `validate`'s dict
    and whether higher is better (BLEU) or lower (loss)."""

    metric: str
    higher_is_better: bool = True

    def better(self, value: float, best: float | None) -> bool:
        """Whether `value` beats the best so far (None: nothing yet)."""
        if best is None:
            return True
        return value > best if self.higher_is_better else value < best


class Task(Protocol):
    selection: Selection

    def build_model(self) -> nn.Module:
        ...

    def train_batches(self, seed: int, rank: int, world_size: int, accumulate: int) -> BatchSource:
        ...

    def loss_view(self, model: nn.Module) -> nn.Module:
        ...

    def criterion(self, model: nn.Module) -> nn.Module:
        ...

    def validate(self, model: nn.Module, device: torch.device, precision: str) -> dict[str, Any]:
        ...

    def summary(self, batches: BatchSource) -> str:
        ...

    def prepared_summary(self) -> str:
        ...


def prepare_on_rank_0(run: RunDir, ctx: DistributedContext, make: Callable[[], Prepared],
                      read: Callable[[], Prepared]) -> Prepared:
    """What a task prepares (vocabulary, encoded data): rank 0 makes it in the run folder
    (`make`), the other ranks wait for it, then open the same files (`read`)."""
    if ctx.is_main:
        run.root.mkdir(parents=True, exist_ok=True)
        made = make()
    barrier(ctx)
    return made if ctx.is_main else read()


def with_vocab_sizes(cfg: Config, run: RunDir, ctx: DistributedContext, source: int, target: int) -> Config:
    """The task's config, its vocabulary sizes filled in; a new run's config.yaml is written
    now (rank 0), last, once everything before it succeeded."""
    cfg = replace(cfg, model=replace(cfg.model, src_vocab_size=source, tgt_vocab_size=target))
    if ctx.is_main and not run.config.is_file():
        run.write_config(cfg)
    return cfg
