"""Budgeted training: `train.budget_minutes: M` trains the best model that M minutes of
wall-clock allow, validation and checkpointing included.

Before the first step the run measures itself on a copy of the model (a few optimizer
steps on the run's own first batches, one validation, one checkpoint write): a budget
that cannot fit the warmup is refused then, in one line. The run then trains its first
CALIBRATION_STEPS steps (at most its warmup, whose learning rates do not depend on the
run's length) and times the second half of them (plus SLOWDOWN): a few steps on a copy
ran ~25% faster than a long run's average on a 2-core CPU (a 60-minute Multi30k plan took
66.8 minutes), the run's own steps much less so. Then it fixes its plan: how many steps
fit, validation points that take at most a tenth of the budget, the linear-decay schedule
that reaches (almost) zero at the last step, and model-only snapshots over the last tenth
of the steps, averaged at the end (the average becomes the default model only if it wins on
validation: training/hooks.py). Two machines of different speed each get a plan that fits
their own speed.

150 steps are a noisy clock: on a 2-core CPU their mean was 6% below a 60-minute run's in
bf16 and 4% above it in fp32 (where SLOWDOWN then left 8 of 60 minutes unused), and 17% below
the next 400 steps' in a 30-minute bf16 run. So at each validation point after the first,
before the averaged snapshots begin, the run re-fixes its last step on the
mean step time since the calibration and on what its validation points really cost
(Replan); the learning rate goes on from the rate it has, in a straight line down to ~0 at
the new last step (schedule.LinearDecaySchedule), so it never jumps.

The plan, with its re-plans, is written to the run (plan.json) before the checkpoint of the
step it changes, and logged. A resumed run reads it back instead of measuring again (no
checkpoint is written before the plan exists) and follows it without re-planning, so it
ends bit-identical to an uninterrupted run that made the same plan. The copy's steps
consume random numbers (dropout); the random states are restored after the measurement,
so the copy changes nothing the run computes."""

from __future__ import annotations

import copy
import json
import logging
import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from transformer_mt.config import Config, replace
from transformer_mt.errors import UserError
from transformer_mt.files import atomic_write_text
from transformer_mt.runs import RunDir, save_checkpoint
from transformer_mt.training.distributed import DistributedContext, broadcast_object, threads_of_waiting_ranks
from transformer_mt.training.hooks import Hook, make_hooks
from transformer_mt.training.schedule import Schedule, make_schedule
from transformer_mt.training.task import Task
from transformer_mt.training.trainer import Trainer, rng_state, set_rng_state

log = logging.getLogger("transformer_mt")

WARMUP_CALLS = 2  # untimed first steps (memory allocation, kernel selection)
TIMED_STEPS = 10  # steps on the copy whose mean time checks the budget before training
CALIBRATION_STEPS = 300  # real steps (at most the warmup) after which the plan is fixed
# Steps keep slowing a little after the calibration: on a 2-core CPU the 30-minute Multi30k
# run timed 0.430 s per step over steps 150-300 and averaged 0.458 s over the whole run.
SLOWDOWN = 1.06  # the plan counts each remaining step as this many times the timed one
VALIDATION_SHARE = 0.1  # at most this share of the budget goes to validation points
MAX_VALIDATIONS = 10
AVERAGED = 5  # snapshots averaged at the end, spread over the last AVERAGE_SPAN of the steps
AVERAGE_SPAN = 0.1
REPLAN_MARGIN = 1.02  # a re-plan counts each remaining step as this many times the mean step so far


@dataclass(frozen=True)
class Plan:
    """What a budget allows on this machine, fixed before the first step."""

    budget_seconds: float
    seconds_per_step: float
    validation_seconds: float  # one validation point: validation plus a checkpoint write
    total_steps: int
    valid_every: int
    average_last: int
    average_every: int
    calibration_steps: int = 0  # real steps timed before the plan was fixed (0: the copy's steps)
    first_total_steps: int = 0  # the first plan's last step, where re-plans moved it (0: total_steps)
    replans: tuple[tuple[int, int], ...] = ()  # (step, total_steps from then on) of every re-plan

    def __post_init__(self) -> None:
        object.__setattr__(self, "replans", tuple(tuple(pair) for pair in self.replans))  # JSON gives lists

    def apply(self, cfg: Config) -> Config:
        """`cfg` with the plan's steps, schedule, validation points and averaging."""
        train = replace(cfg.train, max_steps=self.total_steps, valid_every=self.valid_every, schedule="linear",
                        average_last=self.average_last, average_every=self.average_every)
        return replace(cfg, train=train)

    def schedule(self, cfg: Config) -> Schedule:
        """The linear decay to ~0 at the first plan's last step, re-aimed at each re-plan."""
        first = replace(cfg.train, schedule="linear", max_steps=self.first_total_steps or self.total_steps)
        return replace(make_schedule(first, cfg.model.d_model), replans=self.replans)

    def replanned(self, step: int, total_steps: int) -> "Plan":
        """This plan with its last step moved to `total_steps` after `step` (the snapshots
        spread over the new last tenth; validation points stay where they were)."""
        return replace(self, total_steps=total_steps, first_total_steps=self.first_total_steps or self.total_steps,
                       replans=(*self.replans, (step, total_steps)), average_every=snapshot_spacing(total_steps))

    def write(self, run: RunDir) -> None:
        """Record the plan as the run's plan.json (whole or not at all), and log it."""
        atomic_write_text(run.plan, json.dumps(asdict(self), indent=1) + "\n")
        log.info(self.describe())

    def follow(self, trainer: Trainer, replan: "Replan") -> None:
        """Give `trainer` this plan's config, schedule and hooks, `replan` first."""
        trainer.cfg = self.apply(trainer.cfg)
        trainer.schedule = self.schedule(trainer.cfg)
        trainer.hooks = [replan, *make_hooks(trainer.cfg, replan.run)]

    def describe(self) -> str:
        return (f"budget plan: {self.total_steps} steps at {self.seconds_per_step:.3f} s/step, validation every "
                f"{self.valid_every} steps ({self.validation_seconds:.1f} s each), the last {self.average_last} "
                f"snapshots {self.average_every} steps apart averaged, in {self.budget_seconds / 60:.1f} minutes")


def snapshot_spacing(total_steps: int) -> int:
    """Steps between the AVERAGED snapshots, spread over the last AVERAGE_SPAN of the steps."""
    return max(1, round(AVERAGE_SPAN * total_steps / AVERAGED))


def make_plan(budget_seconds: float, seconds_per_step: float, validation_seconds: float, warmup_steps: int,
              spent: float = 0.0, done: int = 0) -> Plan:
    """The plan for a budget of which `spent` seconds (the measurement, and the `done`
    steps already trained) are gone, given the measured cost of a step and of a
    validation point. Validation points take at most
    VALIDATION_SHARE of the budget (at least one, at most MAX_VALIDATIONS), one more is
    kept for validating the average at the end, and the rest is steps. A budget that
    cannot fit the warmup is a UserError."""
    asked, budget_seconds = budget_seconds, budget_seconds - spent
    validations = min(max(math.floor(VALIDATION_SHARE * budget_seconds / validation_seconds), 1), MAX_VALIDATIONS)
    train_seconds = budget_seconds - (validations + 1) * validation_seconds
    total = done + (math.floor(train_seconds / seconds_per_step) if train_seconds > 0 else 0)
    if total < warmup_steps:
        # validation points take at most VALIDATION_SHARE of the budget plus one more point
        need = math.ceil((spent + (warmup_steps * seconds_per_step + validation_seconds) / (1 - VALIDATION_SHARE))
                         / 6) / 10
        raise UserError(f"train.budget_minutes={asked / 60:g}: fits {total} steps on this machine "
                        f"({seconds_per_step:.3f} s each, {validation_seconds:.1f} s per validation), fewer than "
                        f"train.warmup_steps={warmup_steps}; give at least {need:.1f} minutes or lower warmup_steps")
    return Plan(budget_seconds, seconds_per_step, validation_seconds, total, math.ceil(total / validations),
                AVERAGED, snapshot_spacing(total), done)


def steps_that_fit(step: int, seconds_left: float, seconds_per_step: float, validation_seconds: float,
                   valid_every: int) -> int:
    """The last step T of a plan re-fixed after `step` (a validation point, not yet made)
    with `seconds_left` of the budget: the steps after `step` at `seconds_per_step`, and the
    validation points from `step` to T (every `valid_every` steps, one more at T off that grid,
    one for the average) at `validation_seconds`, take at most seconds_left. At least step + 1."""
    def cost(total: int) -> float:
        points = total // valid_every - (step - 1) // valid_every + (total % valid_every != 0) + 1
        return (total - step) * seconds_per_step + points * validation_seconds

    per_step = seconds_per_step + validation_seconds / valid_every
    total = step + max(math.floor((seconds_left - 2 * validation_seconds) / per_step), 1)
    while total > step + 1 and cost(total) > seconds_left:
        total -= 1
    while cost(total + 1) <= seconds_left:
        total += 1
    return total


def measure(cfg: Config, run: RunDir, task: Task, model: nn.Module, device: torch.device) -> tuple[float, float]:
    """Seconds per optimizer step and per validation point, measured on a copy of
    `model` in one process (rank 0, validating as it will in the run); the random states
    are put back afterwards."""
    saved = rng_state()
    trial = Trainer(cfg, run, task, copy.deepcopy(model), device, progress=False)
    for _ in range(WARMUP_CALLS):
        trial.train_step()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        trial.train_step()
    per_step = (time.perf_counter() - start) / TIMED_STEPS
    start = time.perf_counter()
    with threads_of_waiting_ranks(device):
        trial.task.validate(trial.model, device, trial.precision)
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(trial.checkpoint_state([saved]), Path(tmp) / "step.pt")
    per_validation = time.perf_counter() - start
    set_rng_state(saved)
    return per_step, per_validation


def new_plan(cfg: Config, run: RunDir, task: Task, model: nn.Module, device: torch.device) -> Plan | str:
    """Measure, then plan what is left of the budget; a budget too small gives its error
    message instead (handed to every rank)."""
    start = time.perf_counter()
    per_step, per_validation = measure(cfg, run, task, model, device)
    spent = time.perf_counter() - start
    try:
        return make_plan(cfg.train.budget_minutes * 60, per_step, per_validation, cfg.train.warmup_steps, spent)
    except UserError as err:
        return str(err)


def planned_config(cfg: Config, run: RunDir, task: Task, model: nn.Module, device: torch.device,
                   ctx: DistributedContext) -> tuple[Config, list[Hook], Schedule | None]:
    """`cfg`, its hooks and its learning-rate schedule (None: cfg's) for a budgeted run:
    the plan of plan.json when the run has one; else the copy's check (a budget too small
    is refused before training, on every rank) and a Calibration hook that fixes the plan
    on the run's own first steps."""
    if run.plan.is_file():
        plan = Plan(**json.loads(run.plan.read_text(encoding="utf-8")))
        if ctx.is_main:
            log.info(plan.describe())
        planned = plan.apply(cfg)
        return planned, make_hooks(planned, run), plan.schedule(cfg)
    started = time.perf_counter()
    check = broadcast_object(new_plan(cfg, run, task, model, device) if ctx.is_main else None, ctx.world_size)
    if isinstance(check, str):  # every rank stops with rank 0's error
        raise UserError(check)
    steps = max(1, min(cfg.train.warmup_steps, CALIBRATION_STEPS, check.total_steps))
    # until the plan: the warmup's rates (the same whatever the length), no validation point
    provisional = replace(cfg.train, schedule="linear", max_steps=check.total_steps,
                          valid_every=check.total_steps + 1, average_last=0)
    calibration = Calibration(run, ctx, cfg.train.budget_minutes * 60, check.validation_seconds, steps, started)
    return replace(cfg, train=provisional), [calibration], None


class Calibration(Hook):
    """Times the second half of the run's first `steps` steps, then fixes the plan: writes
    plan.json, and gives the trainer the planned config, schedule and hooks, Replan first."""

    def __init__(self, run: RunDir, ctx: DistributedContext, budget_seconds: float, validation_seconds: float,
                 steps: int, started: float) -> None:
        self.run, self.ctx, self.steps, self.started = run, ctx, steps, started
        self.budget_seconds, self.validation_seconds = budget_seconds, validation_seconds
        self.timed_from, self.seconds_then = steps // 2, 0.0

    def after_step(self, trainer: Trainer) -> None:
        step = trainer.state.step
        if step == self.timed_from:
            self.seconds_then = trainer.state.train_seconds
        if step != self.steps:
            return
        plan = None
        if self.ctx.is_main:
            per_step = SLOWDOWN * (trainer.state.train_seconds - self.seconds_then) / (step - self.timed_from)
            # warmup_steps 0: a budget too small was refused before training; now the plan
            # takes what is left, however little
            plan = make_plan(self.budget_seconds, per_step, self.validation_seconds, 0,
                             time.perf_counter() - self.started, done=step)
            plan.write(self.run)
        plan = broadcast_object(plan, self.ctx.world_size)
        plan.follow(trainer, Replan(self.run, self.ctx, plan, self.budget_seconds, self.started, trainer))


class Replan(Hook):
    """At each validation point from the end of the warmup until the averaged snapshots
    begin, once a validation point has been made, re-fixes the plan's last step (rank 0
    decides, every rank follows): the steps since the calibration give the mean step time
    (times REPLAN_MARGIN), the time outside them the cost of a validation point, and
    steps_that_fit the rest of the budget. (The copy's validation, of an untrained model
    that decodes to the length limit, took 23-30 s where a trained model's took ~10: a
    30-minute run re-planned on it cut its plan by 11%, and put it back at the next point.)
    A changed plan is written to plan.json before the checkpoint of this step, and the
    trainer gets its config, schedule and hooks."""

    def __init__(self, run: RunDir, ctx: DistributedContext, plan: Plan, budget_seconds: float, started: float,
                 trainer: Trainer) -> None:
        self.run, self.ctx, self.plan, self.budget_seconds, self.started = run, ctx, plan, budget_seconds, started
        self.step_then, self.seconds_then, self.wall_then = (trainer.state.step, trainer.state.train_seconds,
                                                            time.perf_counter())

    def after_step(self, trainer: Trainer) -> None:
        step, plan = trainer.state.step, self.plan
        averaging_from = plan.total_steps - plan.average_last * plan.average_every
        if step % plan.valid_every or step < trainer.cfg.train.warmup_steps or step >= averaging_from:
            return
        new = self._new_plan(step, trainer.state.train_seconds) if self.ctx.is_main else None
        new = broadcast_object(new, self.ctx.world_size)
        if new is None:
            return
        self.plan = new
        new.follow(trainer, self)

    def _new_plan(self, step: int, train_seconds: float) -> Plan | None:
        """Rank 0's re-plan after `step`, written to plan.json and logged; None if the last step stays."""
        now, plan = time.perf_counter(), self.plan
        trained = train_seconds - self.seconds_then
        per_step = REPLAN_MARGIN * trained / (step - self.step_then)
        validations = (step - 1) // plan.valid_every - self.step_then // plan.valid_every  # made since the calibration
        if validations == 0:  # the copy's validation, untrained, decoded to the length limit: wait for a real one
            return None
        per_validation = (now - self.wall_then - trained) / validations
        total = steps_that_fit(step, self.budget_seconds - (now - self.started), per_step, per_validation,
                               plan.valid_every)
        if total == plan.total_steps:
            return None
        log.info("re-planned after step %d: %.3f s/step so far, %.1f s per validation point",
                 step, per_step / REPLAN_MARGIN, per_validation)
        new = plan.replanned(step, total)
        new.write(self.run)
        return new
