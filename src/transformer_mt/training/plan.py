"""The plan a training run follows: the learning rate of each step, and after each step
whether to validate, keep a snapshot for averaging, or stop.

The loop (training/trainer.py) asks its plan two questions and decides nothing else:

    lr_at(progress)            the learning rate of the step about to be taken
    after_step(state, since)   a Decision: validate, snapshot, stop

Two plans answer them. `StepPlan` (here) counts steps: train.schedule's rate, validation
every train.valid_every steps, the end at train.max_steps or after train.max_seconds of
the run's clock. `Budget` (training/budget.py) counts minutes: train.budget_minutes. Both
read the same clock, TrainState.elapsed: rank 0's wall-clock seconds since the first step,
validation points included, agreed by every rank after each step and saved with every
checkpoint, so every rank takes the same decisions and a resumed run continues its plan."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

from transformer_mt.config import TrainConfig
from transformer_mt.training.schedule import Progress, Schedule, make_schedule


@dataclass
class TrainState:
    """What, besides weights and optimizer, a resumed run must continue from."""

    step: int = 0
    elapsed: float = 0.0  # rank 0's wall clock since the first step, validation points included
    warmup_elapsed: float = 0.0  # `elapsed` at the end of the warmup (where a budget's decay starts)
    validation_seconds: float = 0.0  # what the last validation point took
    best: float | None = None  # the best value of the task's selection metric so far
    bad_validations: int = 0  # validation points since the best (early stopping: train.patience)

    @classmethod
    def from_checkpoint(cls, saved: dict) -> "TrainState":
        """The state a checkpoint recorded; keys this version no longer keeps are left out."""
        known = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in saved.items() if key in known})


@dataclass(frozen=True)
class Decision:
    """What the loop does after a step."""

    validate: bool = False  # validate, keep the best weights, checkpoint
    snapshot: bool = False  # keep the weights for averaging (training/hooks.py)
    stop: bool = False  # this was the last step


class Plan(Protocol):
    """The learning rate and the decisions of a run (this module's docstring)."""

    total_steps: int | None  # known in advance (a progress bar's length), or None
    averaged: int  # snapshots averaged at the end (0: none)

    def describe(self) -> str: ...

    def lr_at(self, progress: Progress) -> float: ...

    def after_step(self, state: TrainState, since: float) -> Decision: ...


@dataclass(frozen=True)
class StepPlan:
    """train.schedule's rate; validation and a snapshot every `valid_every` steps; the end at
    `total_steps`, or once `max_seconds` (> 0) of the run's clock have passed."""

    schedule: Schedule
    total_steps: int
    valid_every: int
    max_seconds: float
    averaged: int

    @classmethod
    def of(cls, train: TrainConfig, d_model: int) -> "StepPlan":
        return cls(make_schedule(train, d_model), train.max_steps, train.valid_every, train.max_seconds,
                   train.average_last)

    def describe(self) -> str:
        limit = f" or {self.max_seconds:g} s" if self.max_seconds > 0 else ""
        return f"{self.total_steps} steps{limit}, validation every {self.valid_every}"

    def lr_at(self, progress: Progress) -> float:
        return self.schedule.lr_at(progress)

    def after_step(self, state: TrainState, since: float) -> Decision:
        validate = state.step % self.valid_every == 0
        out_of_time = 0 < self.max_seconds <= state.elapsed
        return Decision(validate=validate, snapshot=validate, stop=state.step >= self.total_steps or out_of_time)
