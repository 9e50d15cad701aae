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
validation: training/hooks.py). The plan is written to the run (plan.json) and logged;
a resumed run reads it back instead of measuring again (no checkpoint is written before
the plan exists), so it continues the same plan and ends bit-identical to an
uninterrupted run. Two machines of different speed each get a plan that fits their own
speed.

The copy's steps consume random numbers (dropout); the random states are restored after
the measurement, so a budgeted run computes exactly what a run with its planned config
(train.max_steps = the plan's steps, ...) computes."""

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
from transformer_mt.training.schedule import make_schedule
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

    def apply(self, cfg: Config) -> Config:
        """`cfg` with the plan's steps, schedule, validation points and averaging."""
        train = replace(cfg.train, max_steps=self.total_steps, valid_every=self.valid_every, schedule="linear",
                        average_last=self.average_last, average_every=self.average_every)
        return replace(cfg, train=train)

    def describe(self) -> str:
        return (f"budget plan: {self.total_steps} steps at {self.seconds_per_step:.3f} s/step, validation every "
                f"{self.valid_every} steps ({self.validation_seconds:.1f} s each), the last {self.average_last} "
                f"snapshots {self.average_every} steps apart averaged, in {self.budget_seconds / 60:.1f} minutes")


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
                AVERAGED, max(1, round(AVERAGE_SPAN * total / AVERAGED)), done)


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
                   ctx: DistributedContext) -> tuple[Config, list[Hook]]:
    """`cfg` and its hooks for a budgeted run: the plan of plan.json when the run has one;
    else the copy's check (a budget too small is refused before training, on every rank)
    and a Calibration hook that fixes the plan on the run's own first steps."""
    if run.plan.is_file():
        plan = Plan(**json.loads(run.plan.read_text(encoding="utf-8")))
        if ctx.is_main:
            log.info(plan.describe())
        planned = plan.apply(cfg)
        return planned, make_hooks(planned, run)
    started = time.perf_counter()
    check = broadcast_object(new_plan(cfg, run, task, model, device) if ctx.is_main else None, ctx.world_size)
    if isinstance(check, str):  # every rank stops with rank 0's error
        raise UserError(check)
    steps = max(1, min(cfg.train.warmup_steps, CALIBRATION_STEPS, check.total_steps))
    # until the plan: the warmup's rates (the same whatever the length), no validation point
    provisional = replace(cfg.train, schedule="linear", max_steps=check.total_steps,
                          valid_every=check.total_steps + 1, average_last=0)
    calibration = Calibration(run, ctx, cfg.train.budget_minutes * 60, check.validation_seconds, steps, started)
    return replace(cfg, train=provisional), [calibration]


class Calibration(Hook):
    """Times the second half of the run's first `steps` steps, then fixes the plan: writes
    plan.json, and gives the trainer the planned config, schedule and hooks."""

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
            atomic_write_text(self.run.plan, json.dumps(asdict(plan), indent=1) + "\n")
            log.info(plan.describe())
        plan = broadcast_object(plan, self.ctx.world_size)
        trainer.cfg = plan.apply(trainer.cfg)
        trainer.schedule = make_schedule(trainer.cfg.train, trainer.cfg.model.d_model)
        trainer.hooks.remove(self)
        trainer.hooks.extend(make_hooks(trainer.cfg, self.run))
