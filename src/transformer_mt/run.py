"""The run directory: one place that knows its file names (see design.md).

    runs/NAME/config.yaml          the resolved config
    runs/NAME/tokenizer.model      sentencepiece model (+ .vocab)
    runs/NAME/checkpoints/step_N.pt  full training state, atomic
    runs/NAME/best.safetensors     weights of the best validation checkpoint
    runs/NAME/average.safetensors  `transformer-mt average` output
    runs/NAME/metrics.jsonl        one JSON object per log / validation event
    runs/NAME/tensorboard/         event files
"""

from __future__ import annotations

import ctypes
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_mt.errors import UserError

log = logging.getLogger("transformer_mt")

CHECKPOINT_CHOICES = ("best", "last", "average")


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer.model"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def best(self) -> Path:
        return self.root / "best.safetensors"

    @property
    def average(self) -> Path:
        return self.root / "average.safetensors"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def require(self) -> "RunDir":
        """Check the files every consumer of a trained run needs."""
        if not self.root.is_dir():
            raise UserError(f"{self.root}: no such run directory")
        for path in (self.config, self.tokenizer):
            if not path.is_file():
                raise UserError(f"{path}: missing; is {self.root} a run directory written by `transformer-mt train`?")
        return self


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda when available, else cpu; anything else as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    return torch.device(name)


def has_fast_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products run natively: CUDA GPUs that support bf16, CPUs whose
    oneDNN has bf16 kernels (AVX-512 BF16 / AMX). Elsewhere bf16 is emulated, and on an
    AVX2-only CPU a bf16 matmul is hundreds of times slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_precision(precision: str, device: torch.device) -> str:
    """'auto' -> 'bf16' where the device has fast bf16, else 'fp32'; warns when bf16 is
    asked for on a device that would run it slowly."""
    if precision == "auto":
        return "bf16" if has_fast_bf16(device) else "fp32"
    if precision == "bf16" and not has_fast_bf16(device):
        log.warning("train.precision=bf16 on %s without native bf16: expect it to be far slower than fp32 "
                    "(train.precision=auto picks the faster one)", device)
    return precision


def reuse_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of handing it back to the system.

    A training step allocates and frees the same large activation buffers every time; by
    default glibc serves blocks over 32 MB with fresh mmap()s and returns freed heap tops,
    so every step page-faults its memory in again (measured: 10-25% of a CPU training step).
    M_MMAP_MAX = 0 serves every block from the heap, M_TRIM_THRESHOLD keeps what is freed.
    Linux/glibc only; elsewhere nothing changes. Called once by the CLI, train_speed and decode_speed."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return
    m_trim_threshold, m_mmap_max = -1, -4
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 2**31 - 1)
