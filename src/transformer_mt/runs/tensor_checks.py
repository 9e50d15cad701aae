"""What every reader and writer of weight files checks (runs/directory.py, interop/hub_folder.py):
no NaN or infinity goes in or out, and an unreadable file gets a one-line reason.

A weight that is NaN or infinite makes every output of the model NaN: a translation of
rows of unknown pieces, a language model that repeats one token. Such a file is damaged
(a bad disk, a copy cut short, bytes overwritten) or comes from a run that diverged; it
is refused when it is loaded, naming the file and the tensor, and never written.

`torch.load(weights_only=True)` refuses a file that would run code when unpickled, and
its message then advises loading it with weights_only=False: that is the unsafe cure
(it runs whatever the file holds), so `unreadable_reason` keeps only what is wrong."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import torch

from transformer_mt.common.errors import UserError

UNPICKLER_REASON = re.compile(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n|$)", re.DOTALL)


def first_non_finite(tensors: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first floating-point tensor that holds a NaN or an infinity, or None."""
    for name, tensor in tensors:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def refuse_non_finite_load(tensors: Iterable[tuple[str, torch.Tensor]], path: Path, what_to_do: str = "") -> None:
    """UserError naming `path` and the tensor when a loaded weight is NaN or infinite."""
    name = first_non_finite(tensors)
    if name is not None:
        raise UserError(f"{path}: the weight {name} holds NaN or infinite values (the file is damaged, or the "
                        "training that wrote it diverged)" + (f"; {what_to_do}" if what_to_do else ""))


def refuse_non_finite_save(tensors: Iterable[tuple[str, torch.Tensor]], path: Path) -> None:
    """UserError before `path` is written when a weight is NaN or infinite (the old file stays)."""
    name = first_non_finite(tensors)
    if name is not None:
        raise UserError(f"{path}: not written: the weight {name} holds NaN or infinite values; lower "
                        "train.lr_scale or set train.clip_norm and train again")


def unreadable_reason(err: BaseException) -> str:
    """One short line on why torch.load (or safetensors) could not read a file, without
    PyTorch's advice to load it with weights_only=False."""
    text = str(err).strip()
    if "weights_only" in text or "WeightsUnpickler" in text:
        found = UNPICKLER_REASON.search(text)
        detail = f" ({found.group(1).strip()[:160]})" if found else ""
        return f"not a file of tensors that loads without running code{detail}"
    first = (text.splitlines() or [""])[0]
    first = first.split(". ")[0].rstrip(".")[:200]
    return f"{type(err).__name__}: {first}" if first else f"{type(err).__name__}: truncated"
