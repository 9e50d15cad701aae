"""Training speed: target tokens/s and useful GFLOP/s of our Transformer and of
torch.nn.Transformer of the same sizes, on identical length-bucketed batches.

    python benchmarks/train_speed.py [--quick] [--compile] [--profile] [--json]

One "step" is forward + label-smoothed loss + backward + Adam update on one batch of
about 4000 real target tokens (random token ids, Multi30k-like lengths, grouped by length).

Useful FLOPs count only real (non-padding) tokens, 3x the forward matmul FLOPs (forward +
backward), with d = d_model, f = d_ff, N layers, V vocabulary, S/T real source/target
tokens of a sentence:
    encoder    N * S * (2 * (4 d^2 + 2 d f) + 4 S d)
    decoder    N * T * (2 * (6 d^2 + 2 d f) + 2 T d + 4 S d) + N * S * 2 * 2 d^2   (cross K, V)
    generator  T * 2 d V
    useful = 3 * (encoder + decoder + generator)

Ours is timed with the trainer's optimizer (make_optimizer: fused Adam), nn.Transformer with
torch.optim.Adam's default, as a PyTorch user writes it; both at learning rate LR (1e-4).
nn.Transformer has one dropout for everything; it gets the preset's model.dropout (the
multi30k recipe drops only sub-layer outputs, so there it also drops attention weights and FFN
activations, which costs it time).

Both step at LR, not at make_optimizer's placeholder rate of 1.0 (the trainer's schedule sets
the real one every step): at 1.0 the weights are wrecked within a few steps, the logits grow
large and the loss's softmax gets slower, so the ratio would understate ours.

--profile adds each row's ms per step and the ms its matrix products take (the profiler's self
time of mm, addmm and bmm over the same steps of a fresh model), and prints nn.Transformer's step
over ours' products: the most the ratio can be if everything but the products took no time.
--compile times torch.compile'd models too.

The tables, what they mean, what made our step faster and what was tried and not kept:
docs/benchmarks.md#training-speed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from transformer_mt.common.config import load_config, replace
from transformer_mt.data.batching import batch_indices, collate
from transformer_mt.model import build_model
from transformer_mt.model.embeddings import PositionalEncoding
from transformer_mt.common.device import has_fast_bf16, reuse_freed_memory
from transformer_mt.training.loss import LabelSmoothingLoss
from transformer_mt.training.trainer import make_optimizer, set_lr
from transformer_mt.training.translation import TeacherForcing

from _timing import matmul_peaks, now, seconds_in_products  # benchmarks/_timing.py

VOCAB, PAD = 8000, 0
LR = 1e-4  # both models' learning rate: small steps keep the logits in a trained model's range


def make_batches(n_batches: int, target_tokens: int = 4000, seed: int = 0) -> list:
    """Length-bucketed batches of random ids with Multi30k-like lengths (mean ~16 subwords)."""
    rng = random.Random(seed)
    src_len = [max(3, min(60, int(rng.gauss(16, 6)))) for _ in range(40000)]
    tgt_len = [max(3, min(60, int(s * rng.uniform(0.9, 1.3)))) for s in src_len]
    buckets = batch_indices(src_len, tgt_len, max_tokens=6000, seed=seed)
    batches = []
    for bucket in buckets:
        real = sum(tgt_len[i] + 1 for i in bucket)
        scale = target_tokens / max(real, 1)
        chosen = bucket[: max(1, int(len(bucket) * scale))]
        src = [[rng.randrange(4, VOCAB) for _ in range(src_len[i])] for i in chosen]
        tgt = [[rng.randrange(4, VOCAB) for _ in range(tgt_len[i])] for i in chosen]
        batches.append(collate(src, tgt))
        if len(batches) == n_batches:
            break
    return batches


def useful_flops(batch, d: int, f: int, n: int, vocab: int) -> float:
    src_lens = (batch.src != PAD).sum(1).tolist()
    tgt_lens = (batch.tgt_out != PAD).sum(1).tolist()
    total = 0.0
    for s, t in zip(src_lens, tgt_lens):
        enc = n * s * (2 * (4 * d * d + 2 * d * f) + 4 * s * d)
        dec = n * t * (2 * (6 * d * d + 2 * d * f) + 2 * t * d + 4 * s * d) + n * s * 4 * d * d
        total += enc + dec + t * 2 * d * vocab
    return 3 * total


class TorchTransformer(nn.Module):
    """nn.Transformer with embeddings, positional encoding and a tied generator; the loss
    is what a PyTorch user writes: F.cross_entropy with label_smoothing on every position."""

    def __init__(self, n: int, d: int, f: int, h: int, dropout: float, norm_first: bool, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        nn.init.xavier_uniform_(self.embed.weight)
        self.positional = PositionalEncoding(d, dropout)
        self.transformer = nn.Transformer(d, h, n, n, f, dropout, batch_first=True, norm_first=norm_first)
        self.scale = math.sqrt(d)

    def forward(self, src, tgt_in):
        pad_src, pad_tgt = src == PAD, tgt_in == PAD
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=tgt_in.device, dtype=torch.bool)
        out = self.transformer(
            self.positional(self.embed(src) * self.scale), self.positional(self.embed(tgt_in) * self.scale),
            tgt_mask=causal, src_key_padding_mask=pad_src, tgt_key_padding_mask=pad_tgt,
            memory_key_padding_mask=pad_src, tgt_is_causal=True,
        )
        return F.linear(out, self.embed.weight)

    def loss(self, batch, autocast) -> torch.Tensor:
        with autocast:
            logits = self(batch.src, batch.tgt_in)
        return F.cross_entropy(logits.float().flatten(0, 1), batch.tgt_out.flatten(),
                               ignore_index=PAD, label_smoothing=0.1)


class Ours(nn.Module):
    """Our model and the trainer's loss (logits of real tokens only, fused smoothed loss)."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.model = build_model(cfg.model)
        self.train_cfg = cfg.train
        self.teacher_forcing = TeacherForcing(self.model)  # what the trainer's forward is
        self.criterion = LabelSmoothingLoss(cfg.model.tgt_vocab_size, PAD, 0.1)

    def forward(self, batch):
        return self.teacher_forcing(batch)

    def loss(self, batch, autocast) -> torch.Tensor:
        with autocast:
            logits, target = self(batch)
        return self.criterion(logits, target, 1.0 / batch.n_tokens)

    def optimizer(self) -> torch.optim.Optimizer:
        """The trainer's Adam (fused: one kernel for every parameter), at nn.Transformer's
        learning rate (the trainer's schedule would set it each step)."""
        optimizer = make_optimizer(self.parameters(), self.train_cfg)
        set_lr(optimizer, LR)
        return optimizer


def compiled(model: nn.Module) -> nn.Module:
    """The model with its forward replaced by torch.compile's (dynamic shapes: batches differ)."""
    model.forward = torch.compile(model.forward, dynamic=True)
    return model


def make_benchmark_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Adam at learning rate LR for either model: ours the trainer's (fused), nn.Transformer
    PyTorch's default implementation, as a PyTorch user writes it."""
    if isinstance(model, Ours):
        return model.optimizer()
    return torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-9)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch, dtype: str, device: torch.device) -> None:
    """Forward, loss, backward and Adam update on one batch."""
    batch = batch.to(device)
    context = torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()
    model.loss(batch, context).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def time_steps(model: nn.Module, batches: list, dtype: str, warmup: int, device: torch.device) -> tuple[float, int]:
    """Seconds and target tokens of len(batches) - warmup timed training steps."""
    model.to(device).train()
    optimizer = make_benchmark_optimizer(model)
    seconds, tokens = 0.0, 0
    if device.type == "cuda":  # kernels and attention plans are chosen per shape: see every batch once
        batches = batches + batches
        warmup = len(batches) // 2 + warmup
    for i, batch in enumerate(batches):
        start = now(device)
        train_step(model, optimizer, batch, dtype, device)
        if i >= warmup:
            seconds += now(device) - start
            tokens += batch.n_tokens
    return seconds, tokens


def matmul_seconds(model: nn.Module, batches: list, dtype: str, warmup: int) -> float:
    """Seconds that len(batches) - warmup CPU training steps spend in matrix products
    (seconds_in_products: oneDNN's kernels, which ours and nn.Transformer share). However fast
    everything else became, a step cannot take less: nn.Transformer's step over ours' matmul
    seconds bounds the ratio this benchmark reports."""
    device = torch.device("cpu")
    model.to(device).train()
    optimizer = make_benchmark_optimizer(model)
    for batch in batches[:warmup]:
        train_step(model, optimizer, batch, dtype, device)
    return seconds_in_products(lambda: [train_step(model, optimizer, batch, dtype, device) for batch in batches[warmup:]])


def profile_columns(row: dict, make, batches: list, dtype: str, warmup: int, step_seconds: float) -> str:
    """--profile: add the row's ms per step and the ms per step its matrix products take (a
    fresh model, the same batches, profiled) to `row`; the table's extra columns."""
    torch.manual_seed(0)
    row["step_ms"] = 1e3 * step_seconds
    row["matmul_ms"] = 1e3 * matmul_seconds(make(), batches, dtype, warmup) / (len(batches) - warmup)
    return f"{row['step_ms']:>9.0f}{row['matmul_ms']:>8.0f}"


def matmul_bounds(rows: list[dict]) -> list[str]:
    """For each preset and dtype profiled: nn.Transformer's step over ours' matrix products,
    the ratio ours would reach if nothing but its matrix products took time (stored in ours'
    row as "bound")."""
    lines = []
    for row in rows:
        if row["impl"] != "ours" or "matmul_ms" not in row:
            continue
        theirs = next(r for r in rows if r["impl"] == "nn.Transformer" and r["preset"] == row["preset"]
                      and r["dtype"] == row["dtype"])
        row["bound"] = theirs["step_ms"] / row["matmul_ms"]
        lines.append(f"{row['preset']} {row['dtype']}: nn.Transformer's step {theirs['step_ms']:.0f} ms / ours' "
                     f"matrix products {row['matmul_ms']:.0f} ms = {row['bound']:.2f}x at most "
                     f"(measured {row['tokens_per_s'] / theirs['tokens_per_s']:.2f}x)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small preset only, fewer steps (< 3 min)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (slow to compile)")
    parser.add_argument("--steps", type=int, default=0, help="timed steps per row (default 8, quick 4)")
    parser.add_argument("--profile", action="store_true", help="also profile each row's steps (CPU): seconds "
                        "in matrix products, and the ratio to nn.Transformer that ours could reach if all else took none")
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    parser.add_argument("--dtypes", default="auto",
                        help="fp32,bf16 or one of them (default auto: bf16 only where the CPU has it natively)")
    parser.add_argument("--presets", default="", help="comma-separated presets (default small,multi30k_en_de,base; quick small)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    reuse_freed_memory()
    torch.manual_seed(0)
    steps = args.steps or (4 if args.quick else 8)
    warmup = 2
    peaks = matmul_peaks(device)
    print(f"matmul peak: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s", file=sys.stderr)
    batches = make_batches(steps + warmup)
    presets = args.presets.split(",") if args.presets else ["small"] if args.quick else ["small", "multi30k_en_de", "base"]
    dtypes = args.dtypes.split(",") if args.dtypes != "auto" else ["fp32", "bf16"]
    if args.dtypes == "auto" and not has_fast_bf16(device):
        dtypes = ["fp32"]
        print("bf16 rows skipped: this CPU has no native bf16, a step would take minutes "
              "(--dtypes fp32,bf16 runs them anyway)", file=sys.stderr)
    rows = []
    profiled = args.profile and device.type == "cpu"
    print(f"{'impl':<24}{'preset':<16}{'dtype':<6}{'tok/s':>9}{'GFLOP/s':>9}{'% peak':>8}"
          + (f"{'ms/step':>9}{'matmul':>8}" if profiled else ""))
    for preset in presets:
        full = load_config(preset)
        cfg = replace(full.model, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
        impls = {
            "ours": lambda: Ours(replace(full, model=cfg)),
            "nn.Transformer": lambda: TorchTransformer(cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads,
                                                       cfg.dropout, cfg.norm_first),
        }
        if args.compile:
            impls["nn.Transformer+compile"] = lambda: compiled(impls["nn.Transformer"]())
            impls["ours+compile"] = lambda: compiled(impls["ours"]())
        flops = sum(useful_flops(b, cfg.d_model, cfg.d_ff, cfg.n_layers, VOCAB) for b in batches[warmup:])
        for dtype in dtypes:
            for name, make in impls.items():
                torch.manual_seed(0)
                seconds, tokens = time_steps(make(), batches, dtype, warmup, device)
                row = {"impl": name, "preset": preset, "dtype": dtype, "tokens_per_s": tokens / seconds,
                       "useful_gflops": flops / seconds / 1e9}
                rows.append(row)
                extra = ""
                if profiled:
                    extra = profile_columns(row, make, batches, dtype, warmup, seconds / steps)
                print(f"{name:<24}{preset:<16}{dtype:<6}{row['tokens_per_s']:>9.0f}{row['useful_gflops']:>9.1f}"
                      f"{100 * row['useful_gflops'] / peaks[dtype]:>7.0f}%{extra}", flush=True)
    for line in matmul_bounds(rows):
        print(line)
    if args.json:
        print(json.dumps({"peak_gflops": peaks, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
