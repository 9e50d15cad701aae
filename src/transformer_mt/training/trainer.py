"""The training loop (paper section 5): batches of ~N tokens, Adam with warmup and
inverse-square-root decay, label smoothing, gradient accumulation, bf16 autocast,
validation with BLEU, early stopping and checkpoints that resume exactly."""

from __future__ import annotations

import json
import logging
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from transformer_mt.config import Config
from transformer_mt.data.batching import Batch, BatchStream
from transformer_mt.data.prepare import PreparedData
from transformer_mt.data.tokenizer import PAD_ID, Tokenizer
from transformer_mt.device import autocast, resolve_precision
from transformer_mt.errors import TrainingDiverged
from transformer_mt.evaluation import perplexity, score
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder
from transformer_mt.runs import (
    RunDir, drop_metrics_after, latest_checkpoint, load_model_state, prune_checkpoints, save_checkpoint, save_weights,
)
from transformer_mt.training.loss import LabelSmoothingLoss
from transformer_mt.training.distributed import all_reduce_sum, broadcast_object, gather_objects, rank_seed
from transformer_mt.training.schedule import make_optimizer, make_scheduler
from transformer_mt.translator import Translator

log = logging.getLogger("transformer_mt")


@dataclass
class TrainState:
    """What, besides weights and optimizer, a resumed run must continue from."""

    step: int = 0
    train_seconds: float = 0.0
    best: float | None = None
    bad_validations: int = 0
    history: list[dict] = field(default_factory=list)


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


def token_logits(model: EncoderDecoder, forward: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing: the logits (N, V) and reference ids (N,) of the batch's N real
    target tokens. `forward` is the model or its DDP wrapper. Padding positions never reach
    the generator, whose V-wide projection is the largest matrix product of a small model."""
    states = forward(batch.src, batch.tgt_in, padding_mask(batch.src, PAD_ID))  # (B, T, d_model)
    real = batch.tgt_out != PAD_ID
    return model.generator.logits(states[real]), batch.tgt_out[real]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Trains an EncoderDecoder on encoded data and writes a run directory.

    Under DDP (N processes) every optimizer step is the one a single process with
    `accumulate: N * k` would take on the same batches: the loss is divided by the
    step's real target tokens summed over all ranks. Each rank draws its own dropout
    (seeded by `rank_seed`) and its random states are saved as its own. Stop decisions
    (time cap, non-finite loss) are agreed by all ranks, so none waits alone in an
    all-reduce. Only rank 0 writes files and validates; it hands its result to the other
    ranks, so all reach the same early-stopping decisions."""

    def __init__(
        self,
        cfg: Config,
        run: RunDir,
        model: EncoderDecoder,
        tokenizer: Tokenizer,
        data: PreparedData,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
        progress: bool = True,
    ) -> None:
        self.cfg, self.run, self.tokenizer, self.data = cfg, run, tokenizer, data
        self.device, self.rank, self.world_size = device, rank, world_size
        self.model = model.to(device)
        self.precision = resolve_precision(cfg.train.precision, device)
        self.wrapped: nn.Module = self.model
        if world_size > 1:
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None
            )
        self.optimizer = make_optimizer(self.model.parameters(), cfg.train)
        self.scheduler = make_scheduler(self.optimizer, cfg.model.d_model, cfg.train)
        self.criterion = LabelSmoothingLoss(len(tokenizer), PAD_ID, cfg.train.label_smoothing,
                                            never=self.model.generator.never_emitted())
        self.batches = BatchStream(data.train_src, data.train_tgt, cfg.data.max_tokens,
                                   cfg.train.seed, rank, world_size, cfg.train.accumulate)
        self.state = TrainState()
        self.time_up = False
        if rank > 0:  # after the model is built: every rank starts from the same weights
            seed_everything(rank_seed(cfg.train.seed, rank))
        self.progress = progress and rank == 0
        self._writer = None

    # ---- one optimizer step -------------------------------------------------------
    def autocast(self):
        return autocast(self.device, self.precision)

    def train_step(self) -> dict[str, float]:
        """Forward/backward `accumulate` batches, then one Adam step. The loss is summed
        over tokens and divided by the real target tokens of the whole step (all
        accumulated batches of all ranks), so the update equals one big batch's.
        DDP averages the ranks' gradients, hence the factor world_size."""
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
                    logits, target = token_logits(self.model, self.wrapped, batch)
                loss = self.criterion(logits, target) * scale
                loss.backward()
            total += loss.item() / self.world_size
        grad_norm = 0.0
        if self.cfg.train.clip_norm > 0:
            grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip_norm))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": total, "lr": lr, "tokens": n_tokens, "grad_norm": grad_norm}

    def agree(self, loss: float, time_up: bool) -> tuple[float, bool]:
        """The step's loss over all ranks and whether any rank's clock passed
        train.max_seconds: one all-reduce, so every rank takes the same decisions."""
        total, late = all_reduce_sum([loss, float(time_up)], self.world_size)
        return total, late > 0

    # ---- validation ---------------------------------------------------------------
    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean unsmoothed cross entropy per target token (nats) on the validation set."""
        self.model.eval()
        total, tokens = 0.0, 0
        valid = BatchStream(self.data.valid_src, self.data.valid_tgt, self.cfg.data.max_tokens, 0)
        for _ in range(len(valid)):
            batch = next(valid).to(self.device)
            with self.autocast():
                logits, target = token_logits(self.model, self.model, batch)
            total += nn.functional.cross_entropy(logits.float(), target, reduction="sum").item()
            tokens += batch.n_tokens
        return total / max(tokens, 1)

    def validate(self) -> dict[str, float]:
        """Validation loss (teacher forcing, in the training precision) and BLEU/chrF of
        the decoded validation set: decoded by the same Translator call, with the same
        settings (decode.*, decode.precision included), as `evaluate` decodes it."""
        if self.data.valid is None:
            return {}
        loss = self.validation_loss()
        hypotheses = Translator(self.model, self.tokenizer, self.cfg.decode, self.device).translate(self.data.valid.src)
        scores = score(hypotheses, self.data.valid.tgt)
        self.model.train()
        return {"valid_loss": loss, "valid_ppl": perplexity(loss), "bleu": scores.bleu,
                "chrf": scores.chrf, "exact_match": scores.exact_match,
                "precision": resolve_precision(self.cfg.decode.precision, self.device)}

    def _improved(self, result: dict[str, float]) -> bool:
        metric = self.cfg.train.early_stop_metric
        value = result["valid_loss"] if metric == "loss" else result[metric]
        value = -value if metric == "loss" else value
        if self.state.best is None or value > self.state.best:
            self.state.best, self.state.bad_validations = value, 0
            return True
        self.state.bad_validations += 1
        return False

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
            "scheduler": self.scheduler.state_dict(),
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
        self.scheduler.load_state_dict(state["scheduler"])
        self.batches.load_state_dict(state["batches"])
        self.state = TrainState(**state["trainer"])
        self._restore_rng(state["rng"], path)
        if self.rank == 0:
            drop_metrics_after(self.run.metrics, self.state.step)
        return True

    def _restore_rng(self, saved: list[dict] | dict, path) -> None:
        """This rank's random states from a checkpoint (a single dict: one process wrote it)."""
        states = saved if isinstance(saved, list) else [saved]
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
        return (
            self.state.step >= t.max_steps
            or self.time_up
            or (t.patience > 0 and self.state.bad_validations >= t.patience)
        )

    def _end_of_interval(self) -> None:
        """Validate (on rank 0 only: the others get its result, so every rank takes the
        same early-stopping decision), keep the best weights, checkpoint."""
        result = broadcast_object(self.validate() if self.rank == 0 else None, self.world_size)
        if result:
            improved = self._improved(result)
            event = {"event": "valid", "step": self.state.step, **result, "best": improved}
            self.state.history.append(event)
            self.log(event)
            if improved and self.rank == 0:
                save_weights(self.model, self.run.best)
        elif self.rank == 0:
            save_weights(self.model, self.run.best)
        self.save()

    def train(self) -> TrainState:
        """Train until max_steps, max_seconds or early stopping; return the final state."""
        t = self.cfg.train
        bar = tqdm(total=t.max_steps, initial=self.state.step, disable=not self.progress,
                   desc="train", unit="step", dynamic_ncols=True)
        window_tokens, window_start = 0, time.perf_counter()
        last_interval = self.state.step
        self.time_up = self.agree(0.0, 0 < t.max_seconds <= self.state.train_seconds)[1]
        while not self._should_stop():
            start = time.perf_counter()
            stats = self.train_step()
            self.state.train_seconds += time.perf_counter() - start
            self.state.step += 1
            late = t.max_seconds > 0 and self.state.train_seconds >= t.max_seconds
            stats["loss"], self.time_up = self.agree(stats["loss"], late)
            if not math.isfinite(stats["loss"]) or self.state.step % t.valid_every == 0:
                self.check_finite(stats["loss"])
            window_tokens += stats["tokens"]
            bar.update(1)
            if self.state.step % t.log_every == 0 or self.state.step == 1:
                tok_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{tok_s:.0f}")
                self.log({"event": "train", "step": self.state.step, "loss": stats["loss"],
                          "ppl": perplexity(stats["loss"]), "lr": stats["lr"], "tokens_per_s": tok_s,
                          "train_seconds": self.state.train_seconds})
                window_tokens, window_start = 0, time.perf_counter()
            if self.state.step % t.valid_every == 0:
                self._end_of_interval()
                last_interval = self.state.step
                window_start = time.perf_counter()
        if self.state.step != last_interval:
            self.check_finite(stats["loss"])
            self._end_of_interval()
        bar.close()
        if self._writer is not None:
            self._writer.close()
        return self.state
