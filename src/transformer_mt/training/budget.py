"""Budgeted training: `train.budget_minutes: M` trains for M minutes of wall clock,
validation and checkpoints included, and ends on an annealed, averaged model.

The whole plan is a function of the run's step and its elapsed time t: rank 0's wall clock
since the first step, validation points included (TrainState.elapsed). Every rank takes
rank 0's clock with each step's all-reduce, so all ranks take the same decisions, and every
checkpoint records it, so a resumed run continues the plan where it stopped. With B the
budget in seconds:

    learning rate  the paper's warmup by steps, to its peak at warmup_steps (equation 3),
                   then a straight line down to zero at B:
                       lrate = peak * (B - t) / (B - t_w)     t_w: t at the end of the warmup
                   (Li et al. 2020, "Budgeted training": linear decay to zero is the best of
                   the simple schedules when the length is fixed in advance)
    validation     each time t passes a tenth of B, and after the last step
    averaging      a snapshot each time t passes a fiftieth of B in the last tenth; the last
                   AVERAGED snapshots are averaged at the end, and the average becomes the
                   default model if it wins on validation (training/hooks.py)
    stop           when one more step (as long as the last one) and the validations that
                   close the run (the last step's and the average's, as long as the last
                   validation point) would pass B
    refusal        a budget whose warmup alone takes longer than B, at the speed of the first
                   CHECK_STEPS steps, or that runs out before the warmup ends, is refused in one line
    set aside      train.schedule, max_steps, max_seconds, valid_every and average_last: a budget
                   decides these itself, and says so at the start when the config sets them

A faster or slower machine trains more or fewer steps of the same plan: nothing is measured
before training and nothing is re-planned."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

from transformer_mt.config import TrainConfig
from transformer_mt.errors import UserError
from transformer_mt.training.plan import Decision, Plan, StepPlan, TrainState
from transformer_mt.training.schedule import Progress, warmup_peak

log = logging.getLogger("transformer_mt")

VALIDATIONS = 10  # validation points, one each tenth of the budget
AVERAGED = 5  # snapshots averaged at the end, spread over the last AVERAGE_SPAN of the budget
AVERAGE_SPAN = 0.1
CHECK_STEPS = 20  # steps after which a budget that cannot fit the warmup is refused
REPLACED = ("schedule", "max_steps", "max_seconds", "valid_every", "average_last")  # what a budget decides itself


class BudgetTooShort(UserError):
    """The warmup alone would not fit the budget on this machine."""


def crossed(since: float, now: float, every: float) -> bool:
    """Whether a multiple of `every` seconds lies in (since, now]."""
    return int(now // every) > int(since // every)


@dataclass(frozen=True)
class Budget:
    """The plan (training/plan.py) of a run of `seconds` wall-clock seconds."""

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
    set_aside = [f"train.{key}={getattr(train, key)}" for key in REPLACED if getattr(train, key) != defaults[key]]
    if train.budget_minutes > 0 and set_aside:
        log.warning("train.budget_minutes=%g sets the learning rate, validation, averaging and the end itself: "
                    "%s not used", train.budget_minutes, ", ".join(set_aside))
    return plan
