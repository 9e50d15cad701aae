"""What the speed benchmarks share (train_speed.py, lm_speed.py, decode_speed.py): the host's
measured matrix-product peak, printed beside every table so numbers from different days and
hosts can be read against what the hardware did at the time; a clock that waits for the
device; and the seconds some work spends in matrix products, the time it cannot go below.

Not a benchmark itself (no main()); the scripts import it from their own folder."""

from __future__ import annotations

import functools
import math
import time
from typing import Callable

import torch

from transformer_mt.common.device import has_fast_bf16


def matmul_peak(dtype: torch.dtype, device: torch.device) -> float:
    """Measured GFLOP/s of a square matrix product in `dtype` (the best of several timings).
    Emulated bf16 (a CPU without native bf16) is hundreds of times slower: then 512 x 512."""
    size, repeats = (8192, 20) if device.type == "cuda" else (2048, 8)
    if dtype == torch.bfloat16 and not has_fast_bf16(device):
        size, repeats = 512, 2
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    best = math.inf
    for _ in range(repeats):
        start = now(device)
        a @ b
        best = min(best, now(device) - start)
    return 2 * size**3 / best / 1e9


@functools.cache
def matmul_peaks(device: torch.device) -> dict[str, float]:
    """{"fp32": GFLOP/s, "bf16": GFLOP/s} of `device` (matmul_peak of each), measured once per
    process (~1 s on a CPU): a script's records share it, and so do the tests that call its main()."""
    return {"fp32": matmul_peak(torch.float32, device), "bf16": matmul_peak(torch.bfloat16, device)}


def now(device: torch.device) -> float:
    """Wall-clock seconds, after the device has finished what it was given."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# The matrix products as the CPU profiler names them (Linear: addmm or mm; attention: bmm).
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")


def seconds_in_products(work: Callable[[], object]) -> float:
    """Seconds `work()` spends in matrix products on the CPU: the profiler's self time of
    MATMUL_OPS (the BLAS and oneDNN kernels every implementation calls alike). However fast
    everything else became, `work` cannot take less."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    return sum(event.self_cpu_time_total for event in prof.key_averages() if event.key in MATMUL_OPS) / 1e6
