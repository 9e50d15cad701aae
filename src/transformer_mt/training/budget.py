"""Budgeted training: `train.budget_minutes: M` trains the best model that M minutes of
wall-clock allow, validation and checkpointing included.

Before the first step the run measures itself on a copy of the model (a few optimizer
steps on the run's own first batches, one validation, one checkpoint write), then fixes
its plan: how many steps fit, validation points that take at most a tenth of the budget,
the linear-decay schedule that reaches (almost) zero at the last step, and model-only
snapshots over the last tenth of the steps, averaged at the end (the average becomes the
default model only if it wins on validation: training/hooks.py). The plan is written to
the run (plan.json) and logged; a resumed run reads it back instead of measuring again,
so it continues the same plan and ends bit-identical to an uninterrupted run. Two
machines of different speed each get a plan that fits their own speed.

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
from transformer_mt.training.distributed import DistributedContext, broadcast_object
from transformer_mt.training.task import Task
from transformer_mt.training.trainer import Trainer, rng_state, set_rng_state

log = logging.getLogger("transformer_mt")

WARMUP_CALLS = 2  # untimed first steps (memory allocation, kernel selection)
TIMED_STEPS = 10  # steps whose mean time plans the run
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
              spent: float = 0.0) -> Plan:
    """The plan for a budget of which `spent` seconds (the measurement) are gone, given the
    measured cost of a step and of a validation point. Validation points take at most
    VALIDATION_SHARE of the budget (at least one, at most MAX_VALIDATIONS), one more is
    kept for validating the average at the end, and the rest is steps. A budget that
    cannot fit the warmup is a UserError."""
    asked, budget_seconds = budget_seconds, budget_seconds - spent
    validations = min(max(math.floor(VALIDATION_SHARE * budget_seconds / validation_seconds), 1), MAX_VALIDATIONS)
    train_seconds = budget_seconds - (validations + 1) * validation_seconds
    total = math.floor(train_seconds / seconds_per_step) if train_seconds > 0 else 0
    if total < warmup_steps:
        # validation points take at most VALIDATION_SHARE of the budget plus one more point
        need = math.ceil((spent + (warmup_steps * seconds_per_step + validation_seconds) / (1 - VALIDATION_SHARE))
                         / 6) / 10
        raise UserError(f"train.budget_minutes={asked / 60:g}: fits {total} steps on this machine "
                        f"({seconds_per_step:.3f} s each, {validation_seconds:.1f} s per validation), fewer than "
                        f"train.warmup_steps={warmup_steps}; give at least {need:.1f} minutes or lower warmup_steps")
    return Plan(budget_seconds, seconds_per_step, validation_seconds, total, math.ceil(total / validations),
                AVERAGED, max(1, round(AVERAGE_SPAN * total / AVERAGED)))


def measure(cfg: Config, run: RunDir, task: Task, model: nn.Module, device: torch.device) -> tuple[float, float]:
    """Seconds per optimizer step and per validation point, measured on a copy of
    `model` in one process; the random states are put back afterwards."""
    saved = rng_state()
    trial = Trainer(cfg, run, task, copy.deepcopy(model), device, progress=False)
    for _ in range(WARMUP_CALLS):
        trial.train_step()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        trial.train_step()
    per_step = (time.perf_counter() - start) / TIMED_STEPS
    start = time.perf_counter()
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
                   ctx: DistributedContext) -> Config:
    """`cfg` with the run's budget plan applied: read from plan.json, or measured now,
    agreed by all ranks (rank 0's measurement) and written."""
    if run.plan.is_file():
        plan = Plan(**json.loads(run.plan.read_text(encoding="utf-8")))
    else:
        plan = broadcast_object(new_plan(cfg, run, task, model, device) if ctx.is_main else None, ctx.world_size)
        if isinstance(plan, str):  # every rank stops with rank 0's error
            raise UserError(plan)
        if ctx.is_main:
            atomic_write_text(run.plan, json.dumps(asdict(plan), indent=1) + "\n")
    if ctx.is_main:
        log.info(plan.describe())
    return plan.apply(cfg)
