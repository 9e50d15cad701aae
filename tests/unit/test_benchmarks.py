"""Every benchmark script still imports: a renamed or removed function breaks them
silently otherwise, since the suite never runs them (they take minutes)."""

from __future__ import annotations

import pytest

from benchmark_loader import BENCHMARKS, load_benchmark

SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("*.py") if not path.stem.startswith("_"))  # _*.py: shared helpers


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_imports(name: str) -> None:
    assert callable(getattr(load_benchmark(name), "main", None)), f"{name}.py has no main()"


def test_the_unknown_word_share_by_hand() -> None:
    """benchmarks/notes_bugs.py: a vocabulary of 'a b' and 'c' misses 'd' (1 of 4 test words,
    in 1 of 2 test sentences)."""
    assert load_benchmark("notes_bugs").unknown_share(["a b", "c"], ["a d", "c c"]) == (0.25, 0.5, 3)


@pytest.mark.parametrize("impl", ["ours", "nn.Transformer"])
def test_train_speed_steps_both_models_at_the_same_small_learning_rate(impl: str) -> None:
    """benchmarks/train_speed.py: Adam's first step moves every parameter by at most its
    learning rate (m / sqrt(v) = sign(g) after bias correction), so each model's largest
    change is LR. The trainer's optimizer alone has lr 1.0 until the schedule sets it: timed
    that way, our model's logits blew up within steps and made its loss several times slower."""
    import torch

    from transformer_mt.common.config import load_config, replace

    bench = load_benchmark("train_speed")
    full = load_config("small")
    cfg = replace(full.model, n_layers=1, d_model=16, d_ff=32, n_heads=2, src_vocab_size=bench.VOCAB,
                  tgt_vocab_size=bench.VOCAB)
    torch.manual_seed(0)
    model = (bench.Ours(replace(full, model=cfg)) if impl == "ours" else
             bench.TorchTransformer(cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, 0.0, cfg.norm_first))
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = bench.make_benchmark_optimizer(model)
    model.loss(bench.make_batches(1, target_tokens=200)[0], torch.autocast("cpu", enabled=False)).backward()
    optimizer.step()
    largest = max(float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before))
    assert bench.LR * 0.5 < largest <= bench.LR * 1.001


def test_train_speed_profile_counts_the_matrix_products_and_only_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """--profile's matmul seconds: a step of k 512 x 512 products and a 50 ms sleep (work that
    is not a product) is charged the products' time and not the sleep: the seconds charged are
    at most the profiled steps' wall clock less their sleeps (however slow the host: the sleeps
    and the products do not overlap), and three times the products are about three times the
    seconds (compared within one profiler, the least of three measurements, which a busy host
    makes noisy); the bound is nn.Transformer's step over ours' products."""
    import time

    import torch
    from torch import nn

    bench = load_benchmark("train_speed")
    sleep, steps = 0.05, 3  # seconds a step sleeps; steps profiled (after 1 warmup step)

    class Batch:
        def to(self, device):
            return self

    class Products(nn.Module):
        def __init__(self, k: int) -> None:
            super().__init__()
            self.k = k
            self.weight = nn.Parameter(torch.randn(512, 512) / 512)

        def loss(self, batch, autocast) -> torch.Tensor:
            time.sleep(sleep)
            # each product: forward mm; backward: mm for the weight's gradient only
            return sum((torch.randn(512, 512) @ self.weight).sum() for _ in range(self.k))

    walls = []  # the wall clock of each profiled run of steps, measured inside the profiler
    profile = bench.seconds_in_products

    def clocked_profile(work):
        def clocked_work():
            start = time.perf_counter()
            work()
            walls.append(time.perf_counter() - start)
        return profile(clocked_work)

    monkeypatch.setattr(bench, "seconds_in_products", clocked_profile)
    torch.manual_seed(0)
    charged = {k: [bench.matmul_seconds(Products(k), [Batch()] * (1 + steps), "fp32", warmup=1) for _ in range(3)]
               for k in (1, 3)}
    assert len(walls) == 6
    for (k, seconds), wall in zip([(k, s) for k in (1, 3) for s in charged[k]], walls):
        assert 0 < seconds <= wall - steps * sleep, f"k={k}: {seconds:.4f} s charged of {wall:.4f} s, " \
                                                    f"{steps * sleep:.2f} s of it asleep"
    # the least of three measurements of 3 steps each: a busy host only ever adds time
    seconds = {k: min(charged[k]) / steps for k in (1, 3)}
    assert seconds[1] < seconds[3]
    assert 1.5 < seconds[3] / seconds[1] < 6

    rows = [{"impl": "ours", "preset": "small", "dtype": "bf16", "tokens_per_s": 3000.0, "step_ms": 800.0,
             "matmul_ms": 500.0},
            {"impl": "nn.Transformer", "preset": "small", "dtype": "bf16", "tokens_per_s": 2000.0, "step_ms": 1200.0,
             "matmul_ms": 600.0}]
    (line,) = bench.matmul_bounds(rows)
    assert rows[0]["bound"] == pytest.approx(2.4) and "2.40x at most" in line and "measured 1.50x" in line


@pytest.fixture(scope="module")
def gpu_speed():
    return load_benchmark("gpu_speed")


def test_gpu_speed_every_eager_configuration_trains_as_the_trainer_does(gpu_speed) -> None:
    """benchmarks/gpu_speed.py's parts compute today's training step: on the CPU, each part
    switched alone (fp32) and the whole fast path without compilation (fp32 and bf16) give
    today's eager fp32 losses within rounding, on a run whose loss falls by more than a nat
    (so a wrong gradient, mask or smoothing would show). torch.compile's configurations take
    minutes to compile here: `gpu_speed.py --device cpu --quick` checks them."""
    import dataclasses

    import torch

    eager = {name: parts for name, parts in gpu_speed.check_configurations().items() if not parts.compile}
    eager["fast-eager"] = dataclasses.replace(gpu_speed.FAST, compile=False)
    records = gpu_speed.check(torch.device("cpu"), eager)
    assert {r["config"] for r in records} >= {"fp32+loss", "fp32+positions", "fp32+sync", "fp32+adam",
                                             "fp32+attention", "fp32+shapes", "today", "fast-eager"}
    failed = [(r["config"], r["largest_relative_difference"]) for r in records if not r["passed"]]
    assert not failed
    losses = records[0]["losses"]
    assert losses[0] - min(losses) > 1.0


def test_gpu_speed_check_catches_a_fast_path_that_attends_to_padding(gpu_speed, monkeypatch) -> None:
    """The check is a claim too: a fast path whose padding mask lets queries attend to padding
    (the all-positions path builds its own mask) fails it."""
    import torch

    attends_to_padding = lambda src, pad: torch.ones_like(src, dtype=torch.bool)[:, None, None, :]  # noqa: E731
    monkeypatch.setattr(gpu_speed, "padding_mask", attends_to_padding)
    name = "fp32+positions"
    (record,) = gpu_speed.check(torch.device("cpu"), {name: gpu_speed.check_configurations()[name]})
    assert not record["passed"]


def test_gpu_speed_fixed_shapes_pad_the_same_micro_batches(gpu_speed) -> None:
    """Fixed shapes: every micro-batch is padded to one of FIXED_LENGTHS, holds the pairs of
    the length-bucketed micro-batch at the same place (the rest padding), and as many sentences
    as micro_tokens // length; so rows of either shapes train on the same target tokens."""
    pairs = gpu_speed.wmt_like_pairs(3000, 500, seed=0)
    steps = gpu_speed.make_steps(pairs, 2000, 2, 4)
    buckets, fixed = steps["buckets"], steps["fixed"]
    lengths = set()
    for flexible, padded in zip(sum(buckets, []), sum(fixed, [])):
        length = padded.src.size(1)
        lengths.add(length)
        assert length in gpu_speed.FIXED_LENGTHS and padded.tgt_in.shape == padded.tgt_out.shape == padded.src.shape
        assert padded.src.size(0) == 2000 // length and padded.n_tokens == flexible.n_tokens
        for name in ("src", "tgt_in", "tgt_out"):
            a, b = getattr(flexible, name), getattr(padded, name)
            assert a.size(1) <= length and (b[:, : a.size(1)] == a).all() and (b[:, a.size(1) :] == gpu_speed.PAD).all()
    assert len(lengths) > 1
