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

from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_mt.errors import UserError

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
