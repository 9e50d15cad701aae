"""Checkpoints that survive crashes: atomic writes, safe loading, keep-last-K, averaging.

A checkpoint is written to a temporary file in the same directory, flushed to disk, then
renamed over its final name: a process killed mid-save leaves the old files intact and at
worst a stray *.tmp that nothing loads. Loading uses `torch.load(weights_only=True)` (and
safetensors for bare weights), so opening a checkpoint never executes code."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from transformer_mt.errors import UserError

STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def atomic_torch_save(obj: Any, path: Path) -> None:
    """torch.save to path via a temporary file + fsync + rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by `atomic_torch_save`, without unpickling code."""
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except Exception as err:  # any unreadable or foreign file
        raise UserError(f"{path}: not a readable checkpoint ({type(err).__name__}: {err})") from None


def list_checkpoints(directory: str | Path) -> list[Path]:
    """checkpoints/step_N.pt files, oldest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := STEP_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def prune_checkpoints(directory: str | Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints."""
    for path in list_checkpoints(directory)[:-keep_last]:
        path.unlink(missing_ok=True)


def save_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Model weights only, as safetensors (tied weights stored once), atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_model(model, str(tmp))
    os.replace(tmp, path)


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load safetensors weights into `model`; a shape or name mismatch is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such weights file")
    try:
        load_model(model, str(path), device=str(next(model.parameters()).device))
    except (RuntimeError, OSError, ValueError) as err:
        raise UserError(f"{path}: does not match the model in config.yaml ({str(err).splitlines()[0]})") from None


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of model state dicts (the paper averages the last 5 checkpoints)."""
    if not states:
        raise ValueError("nothing to average")
    averaged = {}
    for key, first in states[0].items():
        if first.is_floating_point():
            averaged[key] = sum(s[key].double() for s in states).div(len(states)).to(first.dtype)
        else:
            averaged[key] = first.clone()
    return averaged


def average_checkpoints(run, last: int) -> list[Path]:
    """Average the model weights of the run's last `last` checkpoints into
    average.safetensors; returns the checkpoints used."""
    from transformer_mt.config import load_config
    from transformer_mt.model.transformer import build_model

    found = list_checkpoints(run.checkpoints)[-last:]
    if not found:
        raise UserError(f"{run.checkpoints}: no step_N.pt checkpoints to average")
    model = build_model(load_config(run.config).model)
    states = [load_checkpoint(path)["model"] for path in found]
    try:
        model.load_state_dict(average_state_dicts(states))
    except RuntimeError as err:
        raise UserError(f"{found[-1]}: does not match {run.config} ({str(err).splitlines()[0]})") from None
    save_weights(model, run.average)
    return found
