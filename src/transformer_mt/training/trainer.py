"""The training loop (paper section 5), one for every task (training/task.py): batches of
~N tokens, Adam with an explicit learning-rate schedule, gradient accumulation, bf16
autocast, validation at intervals, early stopping on the task's selection metric,
checkpoints that resume exactly, in one process or many (DDP)."""

from __future__ import annotations

import json
import logging
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from transformer_mt.config import Config
from transformer_mt.device import autocast, resolve_precision
from transformer_mt.errors import TrainingDiverged
from transformer_mt.runs import (
    RunDir, drop_metrics_after, latest_checkpoint, load_model_state, prune_checkpoints, save_checkpoint, save_weights,
)
from transformer_mt.training.distributed import (
    all_reduce_sum, broadcast_object, gather_objects, rank_seed, threads_of_waiting_ranks,
)
from transformer_mt.training.hooks import Hook
from transformer_mt.training.loss import perplexity, with_scale
from transformer_mt.training.schedule import Progress, Schedule, make_optimizer, make_schedule, set_lr
from transformer_mt.training.task import Task

log = logging.getLogger("transformer_mt")


@dataclass
class TrainState:
    """What, besides weights and optimizer, a resumed run must continue from."""

    step: int = 0
    train_seconds: float = 0.0  # in optimizer steps (what train.max_seconds counts)
    elapsed: float = 0.0  # rank 0's wall clock since the first step, validation points included
    warmup_elapsed: float = 0.0  # `elapsed` at the end of the warmup (where a budget's decay starts)
    validation_seconds: float = 0.0  # what the last validation point took on rank 0
    best: float | None = None  # the best value of the selection metric so far
    best_metric: str = ""  # which metric `best` is
    bad_validations: int = 0


class Pace(Protocol):
    """When the loop validates, keeps a snapshot for averaging, and stops. Each answer is
    asked after a step, of the state every rank agrees on; `since` is `state.elapsed` as it
    was before that step."""

    total_steps: int | None  # known in advance, or None

    def validate_now(self, state: TrainState, since: float) -> bool: ...

    def snapshot_now(self, state: TrainState, since: float) -> bool: ...

    def finished(self, state: TrainState, since: float) -> bool: ...


@dataclass(frozen=True)
class StepPace:
    """Validation every train.valid_every steps, snapshots every train.average_every (0: at
    the validation points), the end at train.max_steps."""

    valid_every: int
    average_every: int
    total_steps: int

    def validate_now(self, state: TrainState, since: float) -> bool:
        return state.step % self.valid_every == 0

    def snapshot_now(self, state: TrainState, since: float) -> bool:
        return state.step % (self.average_every or self.valid_every) == 0

    def finished(self, state: TrainState, since: float) -> bool:
        return state.step >= self.total_steps


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


class Trainer:
    """Trains a task's model and writes a run directory (see training/task.py for what a
    task provides; the loop knows nothing of translation).

    Under DDP (N processes) every optimizer step is the one a single process with
    `accumulate: N * k` would take on the same batches: the loss is divided by the
    step's target tokens summed over all ranks. Each rank draws its own dropout
    (seeded by `rank_seed`) and its random states are saved as its own. Stop decisions
    (time cap, non-finite loss) are agreed by all ranks, so none waits alone in an
    all-reduce. Only rank 0 writes files and validates; it hands its result to the other
    ranks, so all reach the same early-stopping decisions. `hooks` are told of each
    step, the end and a resume (training/hooks.py). `schedule` and `pace` replace the
    learning rate and the step counts cfg.train names (a budget: training/budget.py);
    `clock` (seconds) is rank 0's time source for TrainState.elapsed."""

    def __init__(
        self,
        cfg: Config,
        run: RunDir,
        task: Task,
        model: nn.Module,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
        progress: bool = True,
        hooks: Iterable[Hook] = (),
        schedule: Schedule | None = None,
        pace: Pace | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cfg, self.run, self.task = cfg, run, task
        self.device, self.rank, self.world_size = device, rank, world_size
        self.model = model.to(device)
        self.precision = resolve_precision(cfg.train.precision, device)
        self.wrapped: nn.Module = task.loss_view(self.model)  # forward(batch) -> (logits, targets)
        if world_size > 1:
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.wrapped, device_ids=[device.index] if device.type == "cuda" else None
            )
        self.optimizer = make_optimizer(self.model.parameters(), cfg.train)
        self.schedule = schedule if schedule is not None else make_schedule(cfg.train, cfg.model.d_model)
        t = cfg.train
        self.pace = pace if pace is not None else StepPace(t.valid_every, t.average_every, t.max_steps)
        self.clock, self.origin = clock, 0.0  # elapsed = clock() - origin (set when train() starts)
        self.since = 0.0  # state.elapsed before the last step (Pace's `since`)
        self.finished = False  # the pace's end reached
        self.criterion = with_scale(task.criterion(self.model))  # loss(logits, target, scale)
        self.batches = task.train_batches(cfg.train.seed, rank, world_size, cfg.train.accumulate)
        self.hooks = list(hooks)
        self.state = TrainState(best_metric=task.selection.metric)
        self.last_validation: dict[str, Any] = {}
        self.time_up = False
        if rank > 0:  # after the model is built: every rank starts from the same weights
            seed_everything(rank_seed(cfg.train.seed, rank))
        self.progress = progress and rank == 0
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
        lr = self.schedule.lr_at(Progress(self.state.step + 1, self.state.elapsed, self.state.warmup_elapsed))
        set_lr(self.optimizer, lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": total, "lr": lr, "tokens": n_tokens, "grad_norm": grad_norm}

    def agree(self, loss: float, time_up: bool, elapsed: float) -> tuple[float, bool]:
        """The step's loss over all ranks and whether any rank's clock passed
        train.max_seconds; every rank takes rank 0's clock (`elapsed` now, `since`, the cost of
        the last validation point). One all-reduce, so every rank takes the same decisions."""
        clock = [self.since, elapsed, self.state.validation_seconds] if self.rank == 0 else [0.0, 0.0, 0.0]
        total, late, self.since, self.state.elapsed, self.state.validation_seconds = all_reduce_sum(
            [loss, float(time_up), *clock], self.world_size)
        return total, late > 0

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

    def _validation_point(self) -> None:
        """Validate (on rank 0 only: the others get its result, so every rank takes the
        same early-stopping decision), keep the best weights, checkpoint. A task without
        validation data has nothing to select on: best.safetensors is then the newest
        weights."""
        result = None
        if self.rank == 0:
            with threads_of_waiting_ranks(self.device):
                result = self.task.validate(self.model, self.device, self.precision)
        result = broadcast_object(result, self.world_size)
        if result:
            improved = self._improved(result)
            event = {"event": "valid", "step": self.state.step, **result, "best": improved}
            self.last_validation = event
            self.log(event)
            if improved and self.rank == 0:
                save_weights(self.model, self.run.best)
        elif self.rank == 0:
            save_weights(self.model, self.run.best)
        if self.rank == 0:  # the checkpoint records the time with this validation point's
            now = self.clock() - self.origin
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
        self.state = TrainState(**state["trainer"])
        self._restore_rng(state["rng"], path)
        if self.rank == 0:
            drop_metrics_after(self.run.metrics, self.state.step)
        for hook in self.hooks:
            hook.on_resume(self)
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

    # ---- the loop -----------------------------------------------------------------
    def _should_stop(self) -> bool:
        t = self.cfg.train
        return self.finished or self.time_up or (t.patience > 0 and self.state.bad_validations >= t.patience)

    def train(self) -> TrainState:
        """Train until the pace's end (max_steps or a budget), max_seconds or early stopping;
        return the final state."""
        t = self.cfg.train
        bar = tqdm(total=self.pace.total_steps, initial=self.state.step, disable=not self.progress,
                   desc="train", unit="step", dynamic_ncols=True)
        window_tokens, window_start = 0, time.perf_counter()
        last_interval = self.state.step
        self.origin = self.clock() - self.state.elapsed
        self.time_up = self.agree(0.0, 0 < t.max_seconds <= self.state.train_seconds, self.state.elapsed)[1]
        self.since = self.state.elapsed
        self.finished = self.state.step > 0 and self.pace.finished(self.state, self.since)
        while not self._should_stop():
            start = time.perf_counter()
            self.since = self.state.elapsed
            stats = self.train_step()
            self.state.train_seconds += time.perf_counter() - start
            self.state.step += 1
            late = t.max_seconds > 0 and self.state.train_seconds >= t.max_seconds
            stats["loss"], self.time_up = self.agree(stats["loss"], late, self.clock() - self.origin)
            if self.state.step == t.warmup_steps:
                self.state.warmup_elapsed = self.state.elapsed
            validate = self.pace.validate_now(self.state, self.since)
            if not math.isfinite(stats["loss"]) or validate:
                self.check_finite(stats["loss"])
            self.finished = self.pace.finished(self.state, self.since)
            window_tokens += stats["tokens"]
            bar.update(1)
            if self.state.step % t.log_every == 0 or self.state.step == 1:
                tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{tok_s:.0f}")
                self.log({"event": "train", "step": self.state.step, "loss": stats["loss"],
                          "ppl": perplexity(stats["loss"]), "lr": stats["lr"], "tokens_per_s": tok_s,
                          "train_seconds": self.state.train_seconds, "elapsed": self.state.elapsed})
                window_tokens, window_start = 0, time.perf_counter()
            for hook in self.hooks:
                hook.after_step(self)
            if validate:
                self._validation_point()
                last_interval = self.state.step
                window_start = time.perf_counter()
        if self.state.step != last_interval:
            self.check_finite(stats["loss"])
            self._validation_point()
        for hook in self.hooks:
            hook.at_end(self)
        bar.close()
        if self._writer is not None:
            self._writer.close()
        return self.state
