"""The training loop (paper section 5), one for every task (training/task.py): batches of
~N tokens, Adam with an explicit learning-rate schedule, gradient accumulation, bf16
autocast, validation at intervals, early stopping on the task's selection metric,
checkpoints that resume exactly, in one process or many (DDP)."""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer_mt.common.config import Config, TrainConfig
from transformer_mt.common.device import autocast, resolve_precision
from transformer_mt.common.errors import TrainingDiverged
from transformer_mt.runs.directory import (
    RunDir, average_weight_files, drop_metrics_after, drop_snapshots_after, latest_checkpoint, list_snapshots,
    load_model_state, load_weights, prune_checkpoints, save_checkpoint, save_snapshot, save_weights,
)
from transformer_mt.training.distributed import (
    all_reduce_sum, broadcast_object, gather_objects, rank_seed, threads_of_waiting_ranks,
)
from transformer_mt.training.loss import perplexity
from transformer_mt.training.plan import Decision, Plan, Progress, TrainState
from transformer_mt.training.task import Task

log = logging.getLogger("transformer_mt")


@dataclass(frozen=True)
class RunContext:
    """What a run trains: its config and folder, the task and its model, on which device, as
    which of how many processes (DDP)."""

    cfg: Config
    run: RunDir
    task: Task
    model: nn.Module
    device: torch.device
    rank: int = 0
    world_size: int = 1


def rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_as_python_state(state["python"]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _numpy_state() -> tuple:
    """NumPy's RNG state as plain Python values (loadable with weights_only=True)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return name, keys.tolist(), int(pos), int(has_gauss), float(gauss)


def _as_python_state(state) -> tuple:
    """random.setstate needs tuples; a checkpoint may give lists back."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam(beta1=0.9, beta2=0.98, eps=1e-9 in the paper, section 5.3); the plan sets the lr of
    every step. With train.weight_decay > 0 it is AdamW (Loshchilov and Hutter, 2019): every
    matrix shrinks by lr * weight_decay each step, apart from the gradient's update; biases and
    LayerNorm gains (the 1-dimensional parameters) do not decay.

    PyTorch's fused implementation updates every parameter in one kernel instead of a loop
    over tensors: the same update within floating-point rounding
    (tests/unit/test_schedule_loss.py), several times faster on a CPU."""
    options = {"lr": 1.0, "betas": cfg.adam_betas, "eps": cfg.adam_eps, "fused": True}
    if cfg.weight_decay == 0:
        return torch.optim.Adam(params, **options)
    params = list(params)
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], **options)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Make `lr` the learning rate of the optimizer's next step."""
    for group in optimizer.param_groups:
        group["lr"] = lr


# What a validation line shows of a task's result, in this order: (key, label, decimals).
SHOWN = (("valid_loss", "loss", 3), ("valid_ppl", "perplexity", 2), ("bleu", "BLEU", 2), ("chrf", "chrF", 2),
         ("valid_bpc", "bits per character", 3))


def validation_line(step: int, result: dict[str, Any], best: bool) -> str:
    """The terminal's line for one validation point, e.g. `step 400: validation loss 1.234, BLEU
    12.34, chrF 45.67 (best so far)`; perplexity only where there is no BLEU (a language model)."""
    shown = [(key, label, digits) for key, label, digits in SHOWN
             if key in result and not (key == "valid_ppl" and "bleu" in result)]
    values = ", ".join(f"{label} {result[key]:.{digits}f}" for key, label, digits in shown)
    return f"step {step}: validation {values}" + (" (best so far)" if best else "")


class Trainer:
    """Trains a task's model and writes a run directory (see training/task.py for what a
    task provides; the loop knows nothing of translation), following a plan
    (training/plan.py: the learning rate, and when to validate, snapshot and stop).

    Under DDP (N processes) every optimizer step is the one a single process with
    `accumulate: N * k` would take on the same batches: the loss is divided by the
    step's target tokens summed over all ranks. Each rank draws its own dropout
    (seeded by `rank_seed`) and its random states are saved as its own. Every rank takes
    rank 0's clock with each step's loss, so all take the plan's decisions together and none
    waits alone in an all-reduce. Only rank 0 writes files and validates; it hands its result
    to the other ranks, so all reach the same early-stopping decisions. Where the plan averages
    (plan.averaged > 0), the loop keeps snapshots at the plan's points and averages them at the
    end (the averaging section below); `clock` (seconds) is rank 0's time source for
    TrainState.elapsed."""

    def __init__(self, context: RunContext, plan: Plan, progress: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.cfg, self.run, self.task, self.device = context.cfg, context.run, context.task, context.device
        self.rank, self.world_size = context.rank, context.world_size
        self.model = context.model.to(self.device)
        self.precision = resolve_precision(self.cfg.train.precision, self.device)
        self.wrapped: nn.Module = self.task.loss_view(self.model)  # forward(batch) -> (logits, targets)
        if self.world_size > 1:
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.wrapped, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.optimizer = make_optimizer(self.model.parameters(), self.cfg.train)
        self.criterion = self.task.criterion(self.model)  # loss(logits, target, scale)
        self.batches = self.task.train_batches(self.cfg.train.seed, self.rank, self.world_size,
                                               self.cfg.train.accumulate)
        self.plan, self.clock = plan, clock
        self.newest_snapshot = -1  # the step of the last snapshot taken (averaging)
        self.state = TrainState()
        if self.rank > 0:  # after the model is built: every rank starts from the same weights
            seed_everything(rank_seed(self.cfg.train.seed, self.rank))
        self.progress = progress and self.rank == 0
        self._writer = None

    def release_process_group(self) -> None:
        """Unwrap DDP once training is over. Its Reducer holds the process group, so without this
        destroy_process_group (distributed.cleanup) could not free the group and join gloo's
        threads while Python still runs (see distributed.import_before_the_group)."""
        if isinstance(self.wrapped, nn.parallel.DistributedDataParallel):
            self.wrapped = self.wrapped.module

    # ---- one optimizer step -------------------------------------------------------
    def autocast(self):
        return autocast(self.device, self.precision)

    def train_step(self) -> dict[str, float]:
        """Forward/backward `accumulate` batches, then one Adam step at the schedule's
        rate. The loss is summed over tokens and divided by the target tokens of the
        whole step (all accumulated batches of all ranks), so the update equals one big
        batch's. DDP averages the ranks' gradients, hence the factor world_size."""
        self.wrapped.train()
        batches = [next(self.batches).to(self.device) for _ in range(self.cfg.train.accumulate)]
        local_tokens = sum(b.n_tokens for b in batches)
        n_tokens = int(all_reduce_sum([local_tokens], self.world_size)[0])
        scale = self.world_size / n_tokens
        total = 0.0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            sync = nullcontext() if last or self.world_size == 1 else self.wrapped.no_sync()
            with sync:
                with self.autocast():
                    logits, target = self.wrapped(batch)
                loss = self.criterion(logits, target, scale)
                loss.backward()
            total += loss.item() / self.world_size
        grad_norm = 0.0
        if self.cfg.train.clip_norm > 0:
            grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip_norm))
        lr = self.plan.lr_at(Progress(self.state.step + 1, self.state.elapsed, self.state.warmup_elapsed))
        set_lr(self.optimizer, lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": total, "lr": lr, "tokens": n_tokens, "grad_norm": grad_norm}

    def agree(self, loss: float, now: float) -> tuple[float, float]:
        """The step's loss summed over the ranks, and rank 0's clock (`now`): one all-reduce, so
        every rank asks the plan about the same time and takes the same decision."""
        total, elapsed = all_reduce_sum([loss, now if self.rank == 0 else 0.0], self.world_size)
        return total, elapsed

    # ---- validation ---------------------------------------------------------------
    def _improved(self, result: dict[str, Any]) -> bool:
        """Whether the task's selection metric beat the best so far (and count the
        validations without improvement, for early stopping)."""
        selection = self.task.selection
        value = result[selection.metric]
        if selection.better(value, self.state.best):
            self.state.best, self.state.bad_validations = value, 0
            return True
        self.state.bad_validations += 1
        return False

    def _validation_point(self, origin: float) -> None:
        """Validate (on rank 0 only: the others get its result, so every rank takes the
        same early-stopping decision), keep the best weights, checkpoint. A task without
        validation data has nothing to select on: best.safetensors is then the newest
        weights. The clock moves on by what this took, on rank 0's clock for every rank."""
        result = None
        if self.rank == 0:
            with threads_of_waiting_ranks(self.device):
                result = self.task.validate(self.model, self.device, self.precision)
        result = broadcast_object(result, self.world_size)
        if result:
            improved = self._improved(result)
            self.log({"event": "valid", "step": self.state.step, **result, "best": improved})
            if self.rank == 0:
                log.info(validation_line(self.state.step, result, improved))
            if improved and self.rank == 0:
                save_weights(self.model, self.run.best)
        elif self.rank == 0:
            save_weights(self.model, self.run.best)
        now = self.clock() - origin if self.rank == 0 else 0.0
        now = broadcast_object(now, self.world_size)  # the checkpoint records the time with this point's
        self.state.validation_seconds, self.state.elapsed = now - self.state.elapsed, now
        self.save()

    # ---- files (rank 0 only) ------------------------------------------------------
    def log(self, event: dict) -> None:
        if self.rank != 0:
            return
        self.run.root.mkdir(parents=True, exist_ok=True)
        with open(self.run.metrics, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            # events after the step a resumed run starts from are superseded, not doubled
            self._writer = SummaryWriter(str(self.run.tensorboard), purge_step=self.state.step + 1)
        for key, value in event.items():
            if key not in ("step", "event") and isinstance(value, (int, float)):
                self._writer.add_scalar(f"{event['event']}/{key}", value, event["step"])
        self._writer.flush()

    def checkpoint_state(self, rng_states: list[dict]) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "batches": self.batches.state_dict(),
            "rng": rng_states,  # one per rank, in rank order
            "trainer": self.state.__dict__,
        }

    def save(self) -> None:
        """Every rank hands in its random states; rank 0 writes the checkpoint."""
        rng_states = gather_objects(rng_state(), self.world_size)
        if self.rank != 0:
            return
        path = self.run.checkpoints / f"step_{self.state.step}.pt"
        save_checkpoint(self.checkpoint_state(rng_states), path)
        prune_checkpoints(self.run.checkpoints, self.cfg.train.keep_last)

    def check_finite(self, loss: float) -> None:
        """Stop with TrainingDiverged when the loss or a weight is NaN or infinite; called
        before anything of the step is logged or saved, so the newest checkpoint stays
        the last good one and a resume starts from it."""
        bad = not math.isfinite(loss) or not all(bool(p.isfinite().all()) for p in self.model.parameters())
        if bad:
            what = f"the loss became {loss}" if not math.isfinite(loss) else "a weight became NaN or infinite"
            raise TrainingDiverged(
                f"{what} at step {self.state.step}; nothing of that step was saved. Lower train.lr_scale "
                f"(now {self.cfg.train.lr_scale:g}) or set train.clip_norm (e.g. 1.0), then resume or restart")

    def resume(self) -> bool:
        """Continue from the newest readable checkpoint of the run, if there is one;
        metrics logged after it (by the run that crashed) are dropped."""
        found = latest_checkpoint(self.run.checkpoints)
        if found is None:
            return False
        path, state = found
        load_model_state(self.model, state["model"], path, self.run.config)
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.load_state_dict(state["batches"])
        self.state = TrainState.from_checkpoint(state["trainer"])
        self._restore_rng(state["rng"], path)
        if self.rank == 0:
            drop_metrics_after(self.run.metrics, self.state.step)
        if self.plan.averaged and self.rank == 0:
            # snapshots newer than the checkpoint belong to steps the resumed run takes again
            drop_snapshots_after(self.run.snapshots, self.state.step)
        return True

    def _restore_rng(self, states: list[dict], path) -> None:
        """This rank's random states from a checkpoint (one per rank that wrote it)."""
        if len(states) != self.world_size:
            log.warning("%s was written by %d process(es), resumed with %d: random states start afresh "
                        "where they differ, so the run is not bit-identical to an uninterrupted one",
                        path, len(states), self.world_size)
        if self.rank < len(states):
            set_rng_state(states[self.rank])
        else:
            seed_everything(rank_seed(self.cfg.train.seed + self.state.step, self.rank))

    # ---- averaging (paper section 6.1), where the plan asks for it (rank 0 writes) ----
    def snapshot(self) -> None:
        """Keep the weights (no optimizer state) for averaging, the newest plan.averaged kept
        in run/snapshots/."""
        if self.rank == 0:
            save_snapshot(self.model, self.run.snapshots, self.state.step, keep_last=self.plan.averaged)
            self.newest_snapshot = self.state.step

    def average(self) -> None:
        """The paper's checkpoint averaging ("averaging the last 5 checkpoints, which were written
        at 10-minute intervals"), done as training goes: the element-wise mean of the last
        plan.averaged snapshots, the final step's included, becomes average.safetensors. The
        `average` command averages the same files after the fact."""
        if self.rank != 0:
            return
        if self.newest_snapshot != self.state.step:
            self.snapshot()
        used = list_snapshots(self.run.snapshots)[-self.plan.averaged:]
        average_weight_files(copy.deepcopy(self.model), used, self.run.average, self.run.config)
        log.info("averaged the weights of steps %s into %s",
                 ", ".join(p.stem.removeprefix("step_") for p in used), self.run.average)

    def prefer_average(self) -> None:
        """Validate average.safetensors; where it beats the best validated checkpoint on the
        task's selection metric, it becomes best.safetensors, the run's default model (what
        translate, evaluate, serve and export load). Logged as an "average" event."""
        if self.rank != 0 or not self.run.average.is_file() or self.state.best is None:
            return
        model = copy.deepcopy(self.model)
        load_weights(model, self.run.average)
        result = self.task.validate(model, self.device, self.precision)
        metric, best = self.task.selection.metric, self.state.best
        wins = self.task.selection.better(result[metric], best)
        self.log({"event": "average", "step": self.state.step, **result, "best": wins})
        if wins:
            save_weights(model, self.run.best)
            self.state.best = result[metric]
        log.info("validation %s: average %.4g, best checkpoint %.4g; best.safetensors holds the %s",
                 metric, result[metric], best, "average" if wins else "checkpoint")

    # ---- the loop -----------------------------------------------------------------
    def _out_of_patience(self) -> bool:
        patience = self.cfg.train.patience
        return patience > 0 and self.state.bad_validations >= patience

    def train(self) -> TrainState:
        """Train until the plan says stop (max_steps, max_seconds or a budget) or early
        stopping; return the final state."""
        bar = tqdm(total=self.plan.total_steps, initial=self.state.step, disable=not self.progress,
                   desc="train", unit="step", dynamic_ncols=True)
        with logging_redirect_tqdm(loggers=[log]) if self.progress else nullcontext():  # lines above the bar
            self._loop(bar)
        bar.close()
        if self._writer is not None:
            self._writer.close()
        return self.state

    def _loop(self, bar: tqdm) -> None:
        """The steps, validation points and averaging of `train`."""
        t = self.cfg.train
        window_tokens, window_start = 0, time.perf_counter()
        origin = self.clock() - self.state.elapsed  # elapsed = clock() - origin, on rank 0
        # a resumed run may have reached its plan's end: asked of a copy, since asking may record
        decision = Decision(stop=self.state.step > 0 and self.plan.after_step(replace(self.state),
                                                                               self.state.elapsed).stop)
        validated = self.state.step  # the step of the last validation point
        while not (decision.stop or self._out_of_patience()):
            since = self.state.elapsed
            stats = self.train_step()
            self.state.step += 1
            stats["loss"], self.state.elapsed = self.agree(stats["loss"], self.clock() - origin)
            decision = self.plan.after_step(self.state, since)
            if not math.isfinite(stats["loss"]) or decision.validate:
                self.check_finite(stats["loss"])
            window_tokens += stats["tokens"]
            bar.update(1)
            if self.state.step % t.log_every == 0 or self.state.step == 1:
                tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{tok_s:.0f}")
                self.log({"event": "train", "step": self.state.step, "loss": stats["loss"],
                          "ppl": perplexity(stats["loss"]), "lr": stats["lr"], "tokens_per_s": tok_s,
                          "elapsed": self.state.elapsed})
                window_tokens, window_start = 0, time.perf_counter()
            if decision.snapshot and self.plan.averaged:
                self.snapshot()
            if decision.validate:
                self._validation_point(origin)
                validated = self.state.step
                window_start = time.perf_counter()
        if self.state.step != validated:
            self.check_finite(stats["loss"])
            self._validation_point(origin)
        if self.plan.averaged:
            self.average()
            self.prefer_average()
