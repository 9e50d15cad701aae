"""Where and in what precision the model runs: device choice, bf16 detection, autocast,
and the allocator setting that speeds up training on glibc."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from contextlib import AbstractContextManager, nullcontext

import torch

from transformer_mt.common.errors import UserError

log = logging.getLogger("transformer_mt")


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda when available, else cpu; anything else as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a device name; use auto, cpu, cuda or cuda:N") from None


def has_fast_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products run natively: CUDA GPUs that support bf16, CPUs whose
    oneDNN has bf16 kernels (AVX-512 BF16 / AMX). Elsewhere bf16 is emulated, and on an
    AVX2-only CPU a bf16 matmul is hundreds of times slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    # The CPU's own feature flags: oneDNN's _is_mkldnn_bf16_supported() also says yes on
    # AVX-512 CPUs without BF16 (Skylake to Ice Lake), where bf16 matmuls are ~3x slower.
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def resolve_precision(precision: str, device: torch.device) -> str:
    """'auto' -> 'bf16' where the device has fast bf16, else 'fp32'; warns when bf16 is
    asked for on a device that would run it slowly."""
    if precision == "auto":
        return "bf16" if has_fast_bf16(device) else "fp32"
    if precision == "bf16" and not has_fast_bf16(device):
        log.warning("precision bf16 on %s without native bf16: expect it to be far slower than fp32 "
                    "(precision auto picks the faster one)", device)
    return precision


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """bf16 autocast for precision 'bf16' (matrix products in bf16, reductions in fp32),
    nothing for 'fp32'. `precision` is already resolved (not 'auto')."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


PRIMITIVE_CACHE = "32"  # oneDNN primitives kept (its default, 1024, held GBs; see below)


def reuse_freed_memory() -> None:
    """Memory settings for training and batch decoding on the CPU (the train, demo,
    translate and evaluate commands, the benchmarks; not `serve` or `plot`).

    glibc keeps freed memory for reuse: a training step allocates and frees the same
    large activation buffers every time; by default glibc serves blocks over 32 MB with
    fresh mmap()s and returns freed heap tops, so every step would page-fault its memory
    in again. M_MMAP_MAX = 0 serves every block from the heap; M_TRIM_THRESHOLD keeps up
    to 1 GB of freed heap top, not all of it.

    oneDNN keeps at most PRIMITIVE_CACHE compiled primitives (unless the user set
    ONEDNN_PRIMITIVE_CACHE_CAPACITY): bf16 matrix products of every new batch shape make
    a new primitive, and its default of 1024 lets a bf16 training process grow by GBs
    while 32 trains as fast (docs/benchmarks.md). Set before oneDNN makes its first
    primitive. Linux/glibc only for the malloc part."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", PRIMITIVE_CACHE)
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return
    m_trim_threshold, m_mmap_max = -1, -4
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 1 << 30)
