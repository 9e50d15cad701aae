"""The plan a training run follows: the learning rate of each step, and after each step
whether to validate, keep a snapshot for averaging, or stop. Everything a run's length and
pace depend on is here; the loop (training/trainer.py) asks its plan two questions and
decides nothing else:

    lr_at(progress)            the learning rate of the step about to be taken
    after_step(state, since)   a Decision: validate, snapshot, stop

Two plans answer them, both reading one clock, TrainState.elapsed: rank 0's wall-clock seconds
since the first step, validation points included, agreed by every rank after each step and
saved with every checkpoint, so every rank takes the same decisions and a resumed run
continues its plan.

`StepPlan` counts steps: train.schedule's rate (a schedule below), validation and a snapshot
every train.valid_every steps, the end at train.max_steps or once train.max_seconds of the
run's clock have passed (a hard stop: whatever the schedule's rate then is).

`Budget` counts minutes: `train.budget_minutes: M` fits training, validation and averaging
into M minutes of wall clock and ends on an annealed, averaged model. With B the budget in
seconds and t the run's clock:

    learning rate  the paper's warmup by steps, to its peak at warmup_steps (equation 3),
                   then a straight line down to zero at B:
                       lrate = peak * (B - t) / (B - t_w)     t_w: t at the end of the warmup
                   (Li et al. 2020, "Budgeted training": linear decay to zero is the best of
                   the simple schedules when the length is fixed in advance)
    validation     each time t passes a tenth of B, and after the last step
    averaging      a snapshot each time t passes a fiftieth of B in the last tenth; the last
                   AVERAGED snapshots are averaged at the end, and the average becomes the
                   default model if it wins on validation (Trainer.average)
    stop           when one more step (as long as the last one) and the validations that
                   close the run (the last step's and the average's, as long as the last
                   validation point) would pass B
    refusal        a budget whose warmup alone takes longer than B, at the speed of the first
                   CHECK_STEPS steps, or that runs out before the warmup ends, is refused in one line
    set aside      the options of PLAN_KEYS that a budget decides itself, said at the start
                   when the config sets them

A faster or slower machine trains more or fewer steps of the same plan: nothing is measured
before training and nothing is re-planned. `train.max_seconds` (a hard stop of a step plan)
and `train.budget_minutes` (a plan fitted to the time) are two options on purpose.

The schedules, explicit functions of the progress, keep no state: a resumed run, which knows
its step and its elapsed time, continues with exactly the rates of an uninterrupted one.

    paper      lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3)
    constant   lrate = lr  (plain Adam, as most tutorials train)
    warmup_constant  lrate = lr * min(1, step / warmup_steps): the same rate after a linear
               warmup (a tutorial's Adam with the paper's warmup, and nothing else of its schedule)
    linear     the paper's warmup to its peak, then a straight line down to (almost) zero
               at train.max_steps (a budget does the same in time)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Protocol

from transformer_mt.common.config import TrainConfig
from transformer_mt.common.errors import UserError
from transformer_mt.common.paper_equations import rate

log = logging.getLogger("transformer_mt")

# The train options that make the plan: (a resumed run may change it, a budget decides it itself).
PLAN_KEYS = {
    "schedule": (False, True),
    "max_steps": (True, True),
    "max_seconds": (True, True),
    "valid_every": (True, True),
    "average_last": (False, True),
    "budget_minutes": (True, False),
    "patience": (True, False),
}
RESUMABLE = tuple(key for key, (resumable, _) in PLAN_KEYS.items() if resumable)
SET_ASIDE_BY_BUDGET = tuple(key for key, (_, by_budget) in PLAN_KEYS.items() if by_budget)

VALIDATIONS = 10  # a budget's validation points, one each tenth of it
AVERAGED = 5  # a budget's snapshots averaged at the end, spread over the last AVERAGE_SPAN of it
AVERAGE_SPAN = 0.1
CHECK_STEPS = 20  # steps after which a budget that cannot fit the warmup is refused


class BudgetTooShort(UserError):
    """The warmup alone would not fit the budget on this machine."""


# ---- the state the plan reads, the decision it gives ---------------------------------

@dataclass(frozen=True)
class Progress:
    """How far training is when a step starts: `step` is that step's number (from 1),
    `elapsed` the run's wall-clock seconds before it, `warmup_elapsed` those at the end of
    the warmup (TrainState). A schedule may use any of them."""

    step: int
    elapsed: float = 0.0
    warmup_elapsed: float = 0.0


class Schedule(Protocol):
    def lr_at(self, progress: Progress) -> float:
        """The learning rate of the step that starts at `progress`."""
        ...


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
    snapshot: bool = False  # keep the weights for averaging (Trainer.average)
    stop: bool = False  # this was the last step


class Plan(Protocol):
    """The learning rate and the decisions of a run (this module's docstring)."""

    total_steps: int | None  # known in advance (a progress bar's length), or None
    averaged: int  # snapshots averaged at the end (0: none)

    def describe(self) -> str: ...

    def lr_at(self, progress: Progress) -> float: ...

    def after_step(self, state: TrainState, since: float) -> Decision: ...


# ---- the learning-rate schedules of a step plan ----------------------------------------
@dataclass(frozen=True)
class PaperSchedule:
    """Section 5.3: linear warmup, then inverse-square-root decay (`common.paper_equations.rate`)."""

    d_model: int
    warmup_steps: int
    scale: float = 1.0

    def lr_at(self, progress: Progress) -> float:
        return rate(progress.step, self.d_model, self.warmup_steps, self.scale)


@dataclass(frozen=True)
class ConstantSchedule:
    """The same learning rate at every step after `warmup_steps` steps of linear warmup
    (none by default)."""

    lr: float
    warmup_steps: int = 0

    def lr_at(self, progress: Progress) -> float:
        return self.lr * min(1.0, max(progress.step, 1) / max(self.warmup_steps, 1))


@dataclass(frozen=True)
class LinearDecaySchedule:
    """Linear warmup to `peak` over `warmup_steps`, then linear decay that would reach 0
    at step total_steps + 1, so the last step still learns a little. A run that knows its
    length anneals fully instead of stopping at a high rate, as the inverse square root
    does (Li et al. 2020, "Budgeted training": linear decay to zero is the best of the
    simple schedules when the number of steps is fixed in advance)."""

    peak: float
    warmup_steps: int
    total_steps: int

    def lr_at(self, progress: Progress) -> float:
        step = max(progress.step, 1)
        if step <= self.warmup_steps:
            return self.peak * step / self.warmup_steps
        remaining = max(self.total_steps + 1 - step, 0)
        return self.peak * remaining / max(self.total_steps + 1 - self.warmup_steps, 1)


def warmup_peak(cfg: TrainConfig, d_model: int) -> float:
    """The paper's rate at the end of the warmup (equation 3 at step = warmup_steps): where
    the linear schedules, and a budget, turn from warming up to decaying."""
    return rate(cfg.warmup_steps, d_model, cfg.warmup_steps, cfg.lr_scale)


def make_schedule(cfg: TrainConfig, d_model: int) -> Schedule:
    """The schedule train.schedule names: `paper` (scaled by train.lr_scale), `constant`
    (train.lr), `warmup_constant` (up to train.lr over warmup_steps, then train.lr), or `linear`
    (to the paper's peak at warmup_steps, then down to ~0 at max_steps)."""
    if cfg.schedule == "constant":
        return ConstantSchedule(cfg.lr)
    if cfg.schedule == "warmup_constant":
        return ConstantSchedule(cfg.lr, cfg.warmup_steps)
    if cfg.schedule == "linear":
        return LinearDecaySchedule(warmup_peak(cfg, d_model), cfg.warmup_steps, cfg.max_steps)
    return PaperSchedule(d_model, cfg.warmup_steps, cfg.lr_scale)


# ---- the two plans ----------------------------------------------------------------------
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


def crossed(since: float, now: float, every: float) -> bool:
    """Whether a multiple of `every` seconds lies in (since, now]."""
    return int(now // every) > int(since // every)


@dataclass(frozen=True)
class Budget:
    """The plan of a run of `seconds` wall-clock seconds (the module docstring)."""

    seconds: float
    warmup_steps: int
    peak: float
    total_steps = None  # unknown in advance: the machine's speed decides
    averaged = AVERAGED

    @classmethod
    def of(cls, train: TrainConfig, d_model: int) -> "Budget":
        """The budget train.budget_minutes names, peaking where train.schedule: paper would."""
        return cls(train.budget_minutes * 60, train.warmup_steps, warmup_peak(train, d_model))

    def describe(self) -> str:
        minutes = self.seconds / 60
        return (f"budget of {minutes:g} minutes: warmup over {self.warmup_steps} steps to {self.peak:.2e}, then "
                f"down to 0 at {minutes:g} minutes; validation every {minutes / VALIDATIONS:.2g} minutes; "
                f"{AVERAGED} snapshots of the last {AVERAGE_SPAN * minutes:.2g} minutes averaged")

    def lr_at(self, progress: Progress) -> float:
        """The rate of the step about to be taken (the module docstring's formula)."""
        if progress.step <= self.warmup_steps:
            return self.peak * progress.step / self.warmup_steps
        left = max(self.seconds - progress.elapsed, 0.0)
        return self.peak * left / max(self.seconds - progress.warmup_elapsed, 1e-9)

    def after_step(self, state: TrainState, since: float) -> Decision:
        """Validate after the step in which a tenth of the budget passed; snapshot after the step
        in which a fiftieth passed, in its last tenth; stop when one more step (as long as this
        one) and the two closing validation points (the last step's and the average's, each as
        long as the last one) would pass the budget. Records where the warmup ended (t_w)."""
        if state.step == self.warmup_steps:
            state.warmup_elapsed = state.elapsed
        closing = 2 * state.validation_seconds
        stop = state.elapsed + (state.elapsed - since) + closing > self.seconds
        self.refuse_if_too_short(state, stop)
        snapshot = (state.elapsed >= (1 - AVERAGE_SPAN) * self.seconds
                    and crossed(since, state.elapsed, AVERAGE_SPAN * self.seconds / AVERAGED))
        return Decision(validate=crossed(since, state.elapsed, self.seconds / VALIDATIONS), snapshot=snapshot,
                        stop=stop)

    def refuse_if_too_short(self, state: TrainState, stopping: bool) -> None:
        """BudgetTooShort when the warmup, at the mean speed of the steps so far, would not fit the
        budget: checked after CHECK_STEPS steps, and whenever the budget ends inside the warmup."""
        if state.step >= self.warmup_steps or not (stopping or state.step == CHECK_STEPS):
            return
        per_step = state.elapsed / state.step
        need = self.warmup_steps * per_step
        if stopping or need >= self.seconds:
            raise BudgetTooShort(
                f"train.budget_minutes={self.seconds / 60:g}: the warmup's {self.warmup_steps} steps take about "
                f"{need / 60:.1f} minutes here ({per_step:.3f} s a step over the first {state.step}); give more "
                f"than {need / 60:.1f} minutes or lower train.warmup_steps")


def make_plan(train: TrainConfig, d_model: int, announce: bool = True) -> Plan:
    """The plan the config names, its budget or its steps; with `announce` (rank 0), logged
    in one line, and a budget says in one more which options set in the config it sets aside."""
    plan = Budget.of(train, d_model) if train.budget_minutes > 0 else StepPlan.of(train, d_model)
    if not announce:
        return plan
    log.info(plan.describe())
    defaults = {field.name: field.default for field in fields(TrainConfig)}
    set_aside = [f"train.{key}={getattr(train, key)}" for key in SET_ASIDE_BY_BUDGET if getattr(train, key) != defaults[key]]
    if train.budget_minutes > 0 and set_aside:
        log.warning("train.budget_minutes=%g sets the learning rate, validation, averaging and the end itself: "
                    "%s not used", train.budget_minutes, ", ".join(set_aside))
    return plan
