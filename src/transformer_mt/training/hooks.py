"""Hooks: what happens beside the training loop at fixed points of it, without the loop
knowing what. The Trainer calls every hook after each optimizer step, at the end of training,
and after a resume.

`Averaging` is the paper's checkpoint averaging (section 6.1: "averaging the last 5
checkpoints, which were written at 10-minute intervals"), done as training goes: it keeps
model-only snapshots (weights, no optimizer state) where the run's plan says (at its
validation points, or by time in a budget), the last `last` of them, and at the end
averages them into average.safetensors. The `average` command
averages the same files after the fact (runs.average_checkpoints). `PreferAverage` then
makes the average the run's default model (best.safetensors, what translate, evaluate,
serve and export load) when it beats the best checkpoint on validation."""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

from transformer_mt.runs import (
    RunDir, average_weight_files, drop_snapshots_after, list_snapshots, load_weights, save_snapshot, save_weights,
)

from transformer_mt.training.plan import Decision

if TYPE_CHECKING:
    from transformer_mt.training.trainer import Trainer

log = logging.getLogger("transformer_mt")


class Hook:
    """Does nothing at every point; a hook overrides the points it needs."""

    def after_step(self, trainer: "Trainer", decision: Decision) -> None:
        pass

    def at_end(self, trainer: "Trainer") -> None:
        pass

    def on_resume(self, trainer: "Trainer") -> None:
        pass


class Averaging(Hook):
    """Snapshots of the weights where the plan decides (and at the last step), the
    newest `last` kept in run/snapshots/; their element-wise mean becomes average.safetensors
    at the end of training. Only rank 0 writes."""

    def __init__(self, run: RunDir, last: int) -> None:
        if last < 1:
            raise ValueError(f"need last >= 1, got last={last}")
        self.run, self.last, self.newest = run, last, -1

    def _snapshot(self, trainer: "Trainer") -> None:
        save_snapshot(trainer.model, self.run.snapshots, trainer.state.step, keep_last=self.last)
        self.newest = trainer.state.step

    def after_step(self, trainer: "Trainer", decision: Decision) -> None:
        if trainer.rank == 0 and decision.snapshot:
            self._snapshot(trainer)

    def on_resume(self, trainer: "Trainer") -> None:
        """Snapshots newer than the checkpoint resumed from belong to the steps that the
        resumed run takes again: drop them, as metrics.jsonl drops those steps' events."""
        if trainer.rank == 0:
            drop_snapshots_after(self.run.snapshots, trainer.state.step)

    def at_end(self, trainer: "Trainer") -> None:
        if trainer.rank != 0:
            return
        if self.newest != trainer.state.step:
            self._snapshot(trainer)
        used = list_snapshots(self.run.snapshots)[-self.last:]
        average_weight_files(copy.deepcopy(trainer.model), used, self.run.average, self.run.config)
        log.info("averaged the weights of steps %s into %s",
                 ", ".join(p.stem.removeprefix("step_") for p in used), self.run.average)


class PreferAverage(Hook):
    """At the end of training, validate average.safetensors; if it beats the best
    validated checkpoint on the task's selection metric, it becomes best.safetensors.
    Logged as an "average" event. Runs after `Averaging` (rank 0 only)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run

    def at_end(self, trainer: "Trainer") -> None:
        if trainer.rank != 0 or not self.run.average.is_file() or trainer.state.best is None:
            return
        model = copy.deepcopy(trainer.model)
        load_weights(model, self.run.average)
        result = trainer.task.validate(model, trainer.device, trainer.precision)
        metric, best = trainer.task.selection.metric, trainer.state.best
        wins = trainer.task.selection.better(result[metric], best)
        trainer.log({"event": "average", "step": trainer.state.step, **result, "best": wins})
        if wins:
            save_weights(model, self.run.best)
            trainer.state.best = result[metric]
        log.info("validation %s: average %.4g, best checkpoint %.4g; best.safetensors holds the %s",
                 metric, result[metric], best, "average" if wins else "checkpoint")


def make_hooks(run: RunDir, average_last: int) -> list[Hook]:
    """Weight averaging of the last `average_last` snapshots (none: 0), the average then
    preferred as the default model where it wins on validation."""
    if average_last == 0:
        return []
    return [Averaging(run, average_last), PreferAverage(run)]
