"""Paper-scale training steps on a GPU, and each part of a GPU fast path measured on and off.

    python benchmarks/gpu_speed.py --device cuda --out $OUT/gpu_speed.jsonl   # the one call of a GPU session
    python benchmarks/gpu_speed.py --device cpu --quick                        # the same code paths, small, on a CPU

On the lent GPU machine (its image's python3 and torch, the repository copied there):
    PYTHONPATH=src PYTHONUNBUFFERED=1 python3 benchmarks/gpu_speed.py --out $OUT/gpu_speed.jsonl
then append the records it sends back to benchmarks/results/gpu_speed.jsonl.

Each record is one JSON line of --out, written as soon as it is measured, so a call stopped at its
time limit keeps what it had. Rows run in the order below; a row that would start after --budget
seconds is recorded as skipped (--rows runs only the named ones, for a second call).

1. "device": the device's name, torch's version, the measured fp32 and bf16 matrix-product peaks.
2. "check": a tiny model trained CHECK_STEPS steps from one seed on the same batches, dropout 0,
   under each configuration: its losses against today's eager fp32 path, the largest relative
   difference. Apart from the dtype the parts only reorder rounding (CHECK_TOLERANCE). A failed
   check is reported (and the exit code is 1); the speed rows run all the same.
3. "speed": wmt14_en_de_base and wmt14_en_de_big (the paper's recipes: 37,000-token vocabulary,
   random ids of WMT-like lengths) at paper-scale steps: micro-batches of padded tokens accumulated
   to STEP_TOKENS a step, the largest micro-batch of STEP_TOKENS / k that fits. Each row: target
   tokens/s, useful TFLOP/s (train_speed.useful_flops), MFU (useful FLOP/s over the measured bf16
   peak), peak memory, the seconds spent before timing (the compilation) and the share of padded
   positions that are real tokens. Rows: ours as the trainer runs today, ours with every part of
   FAST on, FAST with each part turned off in turn (that part's effect), ours today in fp32, and
   torch.nn.Transformer at its best (bf16, fused Adam, the loss read back at log points; eager, and
   compiled on the fixed shapes).
4. "profile": the profiler's table (self device time by operator) of FAST's steps on each preset, and
   the share of the wall clock the device was busy.

The parts (`Parts`; the trainer has today's values, the others are written here, behind these
switches: a part that pays moves into the trainer with its tests, one that does not is dropped):
    loss       blocks: the trainer's SmoothedCrossEntropy, whose 64-row blocks fit a CPU core's cache
               (hundreds of small launches on a GPU); fused: F.cross_entropy with the same smoothing
    positions  real: the generator on the real target tokens only (a boolean index: the host waits
               for the device to count them); all: every position, the padding ignored by the loss
    sync       step: the loss read back after every micro-batch (Trainer.train_step's loss.item());
               log: kept on the device and read at log points only
    adam       fused (make_optimizer's) or foreach
    attention  sdpa (F.scaled_dot_product_attention: flash and memory-efficient kernels) or explicit
    shapes     buckets: a micro-batch padded to its longest sentence; fixed: to one of FIXED_LENGTHS,
               with a fixed number of sentences per length, so torch.compile makes a few graphs
    compile    torch.compile of the forward and the loss (static shapes with fixed lengths)
    graphs     CUDA graphs of the compiled forward and backward (mode "reduce-overhead"): not in FAST,
               a row of its own ("fast-with-graphs"), since a step's launches may be what is left
    pinned     micro-batches pinned in host memory and copied without waiting (CUDA only)
    dtype      bf16 autocast or fp32
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import DeviceType
from torch._dynamo.utils import counters

from transformer_mt.common.config import Config, load_config, replace
from transformer_mt.common.device import autocast, reuse_freed_memory
from transformer_mt.data.batching import Batch, collate
from transformer_mt.model import MultiHeadAttention, build_model
from transformer_mt.model.masks import padding_mask
from transformer_mt.training.loss import LabelSmoothingLoss
from transformer_mt.training.trainer import make_optimizer, set_lr
from transformer_mt.training.translation import TeacherForcing

from _timing import matmul_peaks, now  # benchmarks/_timing.py
from train_speed import LR, PAD, TorchTransformer, useful_flops  # benchmarks/train_speed.py

STEP_TOKENS = 25_000  # padded positions a side per step: the paper's ~25,000 (section 5.1)
FIXED_LENGTHS = (16, 32, 64, 128, 256)  # fixed shapes: at most 2x a sentence's length, five graphs
MAX_LENGTH = 250  # the longest sentence drawn, in subwords (eos or bos makes it 251 <= 256)
SMOOTHING = 0.1
CHECK_STEPS = 20
CHECK_LR = 3e-3
# The largest relative loss difference to today's fp32 path: a part that only reorders rounding starts
# ~1e-7 apart, and 20 Adam steps at CHECK_LR grow that to ~3e-5 on a CPU (GPU atomics add some);
# a path that attends to padding ends 4e-3 apart, one without label smoothing 5e-2.
CHECK_TOLERANCE = {"fp32": 3e-4, "bf16": 2e-2}


@dataclass(frozen=True)
class Parts:
    """One configuration of the training step; the defaults are what the trainer does today."""

    loss: str = "blocks"
    positions: str = "real"
    sync: str = "step"
    adam: str = "fused"
    attention: str = "sdpa"
    shapes: str = "buckets"
    compile: bool = False
    graphs: bool = False
    pinned: bool = False
    dtype: str = "bf16"


TODAY = Parts()
FAST = Parts(loss="fused", positions="all", sync="log", shapes="fixed", compile=True, pinned=True)
OFF = {"loss": "blocks", "positions": "real", "sync": "step", "adam": "foreach", "attention": "explicit",
       "shapes": "buckets", "compile": False, "pinned": False, "dtype": "fp32"}  # each part of FAST turned off


def without(name: str) -> Parts:
    """FAST with part `name` turned off: the row that measures what the part gives."""
    return dataclasses.replace(FAST, **{name: OFF[name]})


def check_configurations() -> dict[str, Parts]:
    """The check's configurations: today's path in fp32 with each part switched alone (only
    rounding may differ), then today's and FAST's in bf16."""
    reference = dataclasses.replace(TODAY, dtype="fp32")
    switched = {name: getattr(FAST, name) if getattr(FAST, name) != getattr(TODAY, name) else OFF[name]
                for name in OFF if name != "dtype"}
    alone = {f"fp32+{name}": dataclasses.replace(reference, **{name: value}) for name, value in switched.items()}
    return alone | {"fast-fp32": dataclasses.replace(FAST, dtype="fp32"), "today": TODAY, "fast": FAST,
                    "fast-with-graphs": dataclasses.replace(FAST, graphs=True)}


# ---- the data: random ids of WMT-like lengths, in micro-batches -----------------------------
def wmt_like_pairs(n: int, vocab: int, seed: int, max_length: int = MAX_LENGTH,
                   copy: bool = False) -> list[tuple[list[int], list[int]]]:
    """n pairs of random ids (4 .. vocab - 1) whose lengths look like WMT14 En-De in subwords:
    log-normal source lengths (median ~25, a tail to max_length), targets 0.9-1.3x as long.
    With `copy` each target is its source and the ids are Zipf-distributed (a tiny model's loss
    falls by nats within steps); otherwise uniform."""
    rng = random.Random(seed)
    ids = range(4, vocab)
    weights = [1.0 / rank for rank in range(1, len(ids) + 1)] if copy else None
    pairs = []
    for _ in range(n):
        s = max(3, min(max_length, int(rng.lognormvariate(3.2, 0.5))))
        t = max(3, min(max_length, int(s * rng.uniform(0.9, 1.3))))
        src = rng.choices(ids, weights, k=s)
        pairs.append((src, src if copy else rng.choices(ids, k=t)))
    return pairs


def fixed_length(src: list[int], tgt: list[int]) -> int:
    """The smallest of FIXED_LENGTHS that holds the pair with its eos / bos."""
    return next(length for length in FIXED_LENGTHS if length >= max(len(src), len(tgt)) + 1)


def micro_batches(pairs: list, micro_tokens: int, seed: int) -> list[tuple[int, list[int]]]:
    """(fixed length L, pair indices) of micro-batches of micro_tokens // L pairs of one fixed
    length, in a shuffled order; a length's last, smaller batch is left out."""
    by_length: dict[int, list[int]] = {}
    for i, (src, tgt) in enumerate(pairs):
        by_length.setdefault(fixed_length(src, tgt), []).append(i)
    batches = []
    for length, ids in sorted(by_length.items()):
        size = max(1, micro_tokens // length)
        batches += [(length, ids[k : k + size]) for k in range(0, len(ids) - size + 1, size)]
    random.Random(seed).shuffle(batches)
    return batches


def as_batch(pairs: list, ids: list[int], length: int | None) -> Batch:
    """The pairs as the trainer's Batch; with `length`, every tensor padded to that many positions."""
    batch = collate([pairs[i][0] for i in ids], [pairs[i][1] for i in ids])
    if length is None:
        return batch
    pad = lambda t: F.pad(t, (0, length - t.size(1)), value=PAD)  # noqa: E731
    return Batch(pad(batch.src), pad(batch.tgt_in), pad(batch.tgt_out), batch.n_tokens)


def make_steps(pairs: list, micro_tokens: int, accumulate: int, n_steps: int) -> dict[str, list[list[Batch]]]:
    """n_steps steps of `accumulate` micro-batches each, for either shapes ("buckets", "fixed"):
    the same pairs in both."""
    plan = micro_batches(pairs, micro_tokens, seed=0)[: n_steps * accumulate]
    if len(plan) < n_steps * accumulate:
        raise ValueError(f"{len(pairs)} pairs make {len(plan)} micro-batches, fewer than {n_steps * accumulate}")
    steps = {}
    for shapes in ("buckets", "fixed"):
        batches = [as_batch(pairs, ids, length if shapes == "fixed" else None) for length, ids in plan]
        steps[shapes] = [batches[i : i + accumulate] for i in range(0, len(batches), accumulate)]
    return steps


# ---- one training step under a configuration ------------------------------------------------
def maybe_compiled(fn: Callable, parts: Parts) -> Callable:
    """torch.compile'd `fn` when parts.compile: static shapes for fixed lengths, dynamic otherwise."""
    if not parts.compile:
        return fn
    return torch.compile(fn, dynamic=parts.shapes != "fixed", mode="reduce-overhead" if parts.graphs else None)


def ours(cfg: Config, parts: Parts, device: torch.device) -> tuple[nn.Module, Callable[[Batch, float], torch.Tensor]]:
    """Our model and its loss under `parts`: (model, loss(batch, 1 / step tokens))."""
    model = build_model(cfg.model).to(device).train()
    if parts.attention == "explicit":  # a weights hook makes every attention take the written-out path
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.register_weights_hook(lambda *args: None)
    teacher = TeacherForcing(model)
    criterion = LabelSmoothingLoss(cfg.model.tgt_vocab_size, PAD, SMOOTHING)

    def logits_of(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(device, parts.dtype):
            if parts.positions == "real":  # what the trainer does: TeacherForcing
                return teacher(Batch(src, tgt_in, tgt_out, 0))
            states = model(src, tgt_in, padding_mask(src, PAD))  # (B, T, d_model)
            return model.generator.logits(states).flatten(0, 1), tgt_out.flatten()  # (B*T, V), (B*T,)

    def summed_loss(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        logits, target = logits_of(src, tgt_in, tgt_out)
        return F.cross_entropy(logits.float(), target, ignore_index=PAD, label_smoothing=criterion.smoothing,
                               reduction="sum")

    if parts.loss == "fused":
        fused = maybe_compiled(summed_loss, parts)
        return model, lambda b, scale: fused(b.src, b.tgt_in, b.tgt_out) * scale
    logits_fn = maybe_compiled(logits_of, parts)  # the blocks' Python loop stays outside the graph
    return model, lambda b, scale: criterion(*logits_fn(b.src, b.tgt_in, b.tgt_out), scale)


def theirs(cfg: Config, parts: Parts, device: torch.device) -> tuple[nn.Module, Callable[[Batch, float], torch.Tensor]]:
    """torch.nn.Transformer of the same size (train_speed.TorchTransformer) and its summed loss."""
    m = cfg.model
    model = TorchTransformer(m.n_layers, m.d_model, m.d_ff, m.n_heads, m.dropout, m.norm_first,
                             m.tgt_vocab_size).to(device).train()

    def summed_loss(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        with autocast(device, parts.dtype):
            logits = model(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                               label_smoothing=SMOOTHING, reduction="sum")

    fused = maybe_compiled(summed_loss, parts)
    return model, lambda b, scale: fused(b.src, b.tgt_in, b.tgt_out) * scale


class Stepper:
    """Trainer.train_step's work under `parts`: each micro-batch forward and backward, its loss
    divided by the step's target tokens, one Adam step at LR (the trainer's schedule sets its
    rate every step; LR keeps the logits in a trained model's range, train_speed.LR)."""

    def __init__(self, make: Callable, cfg: Config, parts: Parts, device: torch.device, lr: float = LR) -> None:
        if parts.compile:  # each row compiles afresh (its warm-up seconds) within the recompile limit
            torch._dynamo.reset()
            torch._dynamo.config.recompile_limit = 64
        torch.manual_seed(0)
        self.model, self.loss = make(cfg, parts, device)
        self.parts, self.device = parts, device
        if parts.adam == "fused" and make is ours:
            self.optimizer = make_optimizer(self.model.parameters(), cfg.train)
            set_lr(self.optimizer, lr)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, betas=cfg.train.adam_betas,
                                              eps=cfg.train.adam_eps, fused=parts.adam == "fused",
                                              foreach=parts.adam == "foreach" or None)

    def to_device(self, batch: Batch) -> Batch:
        if self.parts.pinned and self.device.type == "cuda":
            batch = Batch(batch.src.pin_memory(), batch.tgt_in.pin_memory(), batch.tgt_out.pin_memory(),
                          batch.n_tokens)
        return batch.to(self.device)  # non_blocking: it waits only where the memory is not pinned

    def step(self, micro: list[Batch]) -> torch.Tensor | float:
        """One step; its loss as a float (sync "step") or a device tensor (sync "log")."""
        scale = 1.0 / sum(batch.n_tokens for batch in micro)
        total: torch.Tensor | float = 0.0
        for batch in micro:
            if self.parts.graphs:  # the graphs' outputs of the last micro-batch are no longer read
                torch.compiler.cudagraph_mark_step_begin()
            loss = self.loss(self.to_device(batch), scale)
            loss.backward()
            total = total + (loss.item() if self.parts.sync == "step" else loss.detach())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total


def step_losses(stepper: Stepper, steps: list[list[Batch]]) -> list[float]:
    """Each step's loss, read back after the last step (a log point)."""
    return [float(loss) for loss in [stepper.step(micro) for micro in steps]]


# ---- the phases ---------------------------------------------------------------------------
def check_config(vocab: int = 200) -> Config:
    """A tiny model of the base recipe, without dropout (so every configuration draws nothing)."""
    full = load_config("wmt14_en_de_base")
    model = replace(full.model, n_layers=2, d_model=64, d_ff=128, n_heads=4, dropout=0.0, src_vocab_size=vocab,
                    tgt_vocab_size=vocab)
    return replace(full, model=model)


def check(device: torch.device, configurations: dict[str, Parts]) -> list[dict]:
    """Each configuration's losses over CHECK_STEPS steps of the copy task against today's eager
    fp32 path's, at CHECK_LR: the loss falls by more than a nat, so a wrong gradient, mask or
    smoothing moves it (at the benchmark's LR it would stay near log V, where they barely show)."""
    cfg = check_config()
    steps = make_steps(wmt_like_pairs(600, cfg.model.tgt_vocab_size, seed=1, max_length=60, copy=True), 512, 2,
                       CHECK_STEPS)
    reference = step_losses(Stepper(ours, cfg, dataclasses.replace(TODAY, dtype="fp32"), device, CHECK_LR),
                            steps["buckets"])
    records = []
    for name, parts in configurations.items():
        losses = step_losses(Stepper(ours, cfg, parts, device, CHECK_LR), steps[parts.shapes])
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
        records.append({"record": "check", "config": name, "parts": dataclasses.asdict(parts),
                        "largest_relative_difference": worst, "tolerance": CHECK_TOLERANCE[parts.dtype],
                        "passed": worst <= CHECK_TOLERANCE[parts.dtype], "losses": losses})
    return records


def paper_config(preset: str, quick: bool) -> Config:
    """The preset at its vocabulary (quick: a 2-layer, 64-wide model of it on 1,000 ids)."""
    full = load_config(preset)
    vocab = 1000 if quick else full.data.vocab_size
    model = replace(full.model, src_vocab_size=vocab, tgt_vocab_size=vocab)
    if quick:
        model = replace(model, n_layers=2, d_model=64, d_ff=128, n_heads=4)
    return replace(full, model=model)


def micro_tokens_that_fit(cfg: Config, pairs: list, step_tokens: int, device: torch.device) -> int:
    """The largest of step_tokens / k (k = 1, 2, 3, ...) whose step of the longest micro-batches
    fits in memory, in fp32 today (the most memory any row takes)."""
    for k in (1, 2, 3, 4, 6, 8, 12, 16):
        micro = step_tokens // k
        longest = max(micro_batches(pairs, micro, seed=0), key=lambda plan: plan[0])
        try:
            Stepper(ours, cfg, dataclasses.replace(TODAY, dtype="fp32"), device).step(
                [as_batch(pairs, longest[1], None)])
            return micro
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
    raise RuntimeError(f"not even a micro-batch of {step_tokens // 16} tokens fits")


def time_row(make: Callable, cfg: Config, parts: Parts, steps: list[list[Batch]], device: torch.device,
             peaks: dict) -> dict:
    """Build, run every step once untimed (compilation, kernel choices), then time them again."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    counters.clear()
    start = now(device)
    stepper = Stepper(make, cfg, parts, device)
    step_losses(stepper, steps)
    warm = now(device) - start
    compiled = {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}
    start = now(device)
    losses = step_losses(stepper, steps)
    seconds = now(device) - start
    m = cfg.model
    batches = [batch for micro in steps for batch in micro]
    flops = sum(useful_flops(batch, m.d_model, m.d_ff, m.n_layers, m.tgt_vocab_size) for batch in batches)
    tokens = sum(batch.n_tokens for batch in batches)
    return {"tokens_per_s": tokens / seconds, "useful_tflops": flops / seconds / 1e12,
            "mfu": flops / seconds / 1e9 / peaks["bf16"], "step_ms": 1e3 * seconds / len(steps),
            "warm_s": warm, "loss": losses[-1], **(compiled if parts.compile else {}),
            "real_share": tokens / sum(batch.tgt_out.numel() for batch in batches),
            "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}


def profile_row(cfg: Config, parts: Parts, steps: list[list[Batch]], device: torch.device) -> dict:
    """The profiler's table of `steps` under `parts` (after running them once), by self device time."""
    from torch.profiler import ProfilerActivity, profile

    stepper = Stepper(ours, cfg, parts, device)
    step_losses(stepper, steps)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        start = now(device)
        step_losses(stepper, steps)
        wall = now(device) - start
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    # the device's own events (kernels, copies), as the table's "Self CUDA time total" sums them
    busy = sum(event.self_device_time_total for event in events if event.device_type != DeviceType.CPU) / 1e6
    return {"wall_s": wall, "busy_share": busy / wall if cuda else None,
            "table": events.table(sort_by=key, row_limit=25)}


def speed_rows(presets: list[str]) -> tuple[list, list]:
    """(preset, row, model maker, parts) of the headline rows of every preset, then of the rest
    (each part's row, then fp32), in the order they run."""
    first = [("ours-today", ours, TODAY), ("ours-fast", ours, FAST),
             ("torch-eager", theirs, Parts(loss="fused", positions="all", sync="log")),
             ("torch-compile", theirs, Parts(loss="fused", positions="all", sync="log", shapes="fixed", compile=True))]
    parts = [(f"fast-without-{name}", ours, without(name)) for name in OFF if name != "dtype"]
    parts.append(("fast-with-graphs", ours, dataclasses.replace(FAST, graphs=True)))
    last = [("fast-fp32", ours, without("dtype")), ("ours-today-fp32", ours, dataclasses.replace(TODAY, dtype="fp32"))]
    return ([(preset, *row) for preset in presets for row in first],
            [(preset, *row) for group in (parts, last) for preset in presets for row in group])


# ---- the run --------------------------------------------------------------------------------
class Records:
    """JSON lines to --out (flushed one by one) and the records kept for the table."""

    def __init__(self, path: str | None) -> None:
        self.handle = open(path, "a", encoding="utf-8") if path else None
        self.kept: list[dict] = []

    def add(self, record: dict) -> None:
        self.kept.append(record)
        if self.handle:
            self.handle.write(json.dumps(record) + "\n")
            self.handle.flush()


def run_speed(args, device: torch.device, peaks: dict, records: Records, started: float) -> None:
    """The headline rows of every preset, the profiles (unless --rows), then the other rows."""
    data: dict[str, tuple] = {}  # preset -> (config, micro-batch tokens, accumulate, steps by shapes)
    presets = ["wmt14_en_de_base"] if args.quick else ["wmt14_en_de_base", "wmt14_en_de_big"]
    headline, rest = speed_rows(presets)
    for row in headline:
        run_row(row, data, args, device, peaks, records, started)
    if not args.rows:
        run_profiles(data, device, records, started, args.budget)
    for row in rest:
        run_row(row, data, args, device, peaks, records, started)


def run_row(row: tuple, data: dict, args, device: torch.device, peaks: dict, records: Records, started: float) -> None:
    """Time one speed row (unless --rows leaves it out), building its preset's steps on first use."""
    preset, name, make, parts = row
    if args.rows and name not in args.rows.split(","):
        return
    record = {"record": "speed", "preset": preset, "row": name, "parts": dataclasses.asdict(parts)}
    if time.perf_counter() - started > args.budget:
        records.add(record | {"skipped": "budget"})
        return
    if preset not in data:
        step_tokens = 2000 if args.quick else STEP_TOKENS
        cfg = paper_config(preset, args.quick)
        pairs = wmt_like_pairs(4000 if args.quick else 60000, cfg.model.tgt_vocab_size, seed=0)
        micro = step_tokens if device.type == "cpu" else micro_tokens_that_fit(cfg, pairs, step_tokens, device)
        accumulate = step_tokens // micro
        data[preset] = (cfg, micro, accumulate, make_steps(pairs, micro, accumulate, args.steps))
    cfg, micro, accumulate, steps = data[preset]
    try:
        result = time_row(make, cfg, parts, steps[parts.shapes], device, peaks)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        result = {"skipped": "out of memory"}
    records.add(record | {"micro_tokens": micro, "accumulate": accumulate} | result)
    print(table_line(records.kept[-1]), flush=True)


def run_profiles(data: dict, device: torch.device, records: Records, started: float, budget: float) -> None:
    """FAST's profile on each preset, over the first 3 of its steps."""
    for preset, (cfg, _, _, steps) in data.items():
        if time.perf_counter() - started > budget:
            records.add({"record": "profile", "preset": preset, "skipped": "budget"})
            continue
        result = profile_row(cfg, FAST, steps[FAST.shapes][:3], device)
        records.add({"record": "profile", "preset": preset, "config": "fast"} | result)
        print(result["table"], flush=True)


def table_line(record: dict) -> str:
    if "skipped" in record:
        return f"{record['preset']:<18}{record['row']:<28}skipped: {record['skipped']}"
    memory = f"{record['peak_gib']:>8.1f}" if record["peak_gib"] is not None else f"{'-':>8}"
    graphs = f"{record['graphs']:>4}/{record['graph_breaks']}" if "graphs" in record else ""
    return (f"{record['preset']:<18}{record['row']:<28}{record['tokens_per_s']:>10.0f}{record['useful_tflops']:>9.2f}"
            f"{100 * record['mfu']:>6.1f}%{memory}{record['warm_s']:>8.1f}{record['real_share']:>6.2f}{graphs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="a 2-layer, 64-wide model of the base recipe, "
                        "steps of 2,000 tokens: every code path in a few minutes on a CPU")
    parser.add_argument("--steps", type=int, default=0, help="timed steps a row (default 6, quick 2)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds after which rows are skipped")
    parser.add_argument("--rows", default="", help="comma-separated speed rows to run (default: all)")
    parser.add_argument("--skip-check", action="store_true", help="leave out the losses' check")
    parser.add_argument("--out", default="", help="append each record to this JSON-lines file")
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object of every record")
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.quick else 6)
    device = torch.device(args.device)
    reuse_freed_memory()
    started = time.perf_counter()
    records = Records(args.out or None)
    peaks = matmul_peaks(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    records.add({"record": "device", "device": name, "torch": torch.__version__, "peak_gflops": peaks,
                 "date": time.strftime("%Y-%m-%d")})
    print(f"{name}, torch {torch.__version__}, matmul peaks fp32 {peaks['fp32']:.0f} / bf16 {peaks['bf16']:.0f} "
          "GFLOP/s")
    if not args.skip_check:
        for record in check(device, check_configurations()):
            records.add(record)
            print(f"check {record['config']:<22}{record['largest_relative_difference']:.2e} "
                  f"({'passed' if record['passed'] else 'FAILED'}, tolerance {record['tolerance']:g})", flush=True)
    print(f"{'preset':<18}{'row':<28}{'tok/s':>10}{'TFLOP/s':>9}{'MFU':>7}{'GiB':>8}{'warm s':>8}{'real':>6}"
          " graphs/breaks")
    run_speed(args, device, peaks, records, started)
    print("\n".join(table_line(r) for r in records.kept if r["record"] == "speed"))
    if args.json:
        print(json.dumps(records.kept))
    return 0 if all(r["passed"] for r in records.kept if r["record"] == "check") else 1


if __name__ == "__main__":
    sys.exit(main())
