"""What a check says: pass, fail or not_checked, with a message and, for a failure, the fix
in one sentence; and the limits the checks judge by, each with its reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from transformer_mt.model.measures import EMBEDDING_TO_POSITION_LIMIT

PASS, FAIL, NOT_CHECKED = "pass", "fail", "not_checked"

# Two float32 passes of the same computation agree to ~1e-6 of their size; a slip of the
# paper's equations (a scale, an axis, a missing step) moves outputs by 1e-2 or more.
CLOSE = 1e-4
# Near copies in a model just built: deep copies never re-drawn correlate at exactly 1,
# independent draws of the checks' sizes at |r| < 0.1.
COPIES = 0.99
EMBEDDING_TO_POSITION = EMBEDDING_TO_POSITION_LIMIT  # model/measures.py, the doctor's limit too


class NotChecked(Exception):
    """A check that this model gives nothing to measure with: the reason."""


@dataclass(frozen=True)
class Outcome:
    status: str
    message: str
    fix: str | None = None


def passed(message: str) -> Outcome:
    return Outcome(PASS, message)


def failed(message: str, fix: str) -> Outcome:
    return Outcome(FAIL, message, fix)


@dataclass(frozen=True)
class Result:
    """One check's verdict: id (stable), status, the paper's section, message, fix."""

    id: str
    status: str
    section: str
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference of two tensors, relative to the size of the second."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / (1 + b.abs().max()))


def close(a: torch.Tensor, b: torch.Tensor, tolerance: float = CLOSE) -> bool:
    return a.shape == b.shape and difference(a, b) <= tolerance


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two passes that should agree exactly do not (masked entries weigh exactly 0)."""
    return a.shape != b.shape or difference(a, b) > 1e-5
