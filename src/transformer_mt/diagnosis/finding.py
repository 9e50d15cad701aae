"""What a check reports: a `Finding`, with the measured value, the limit it crossed, what
the cause cost where docs/ablations.md measured it, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

COSTS = "docs/ablations.md#the-cost-of-each-choice"  # the table of what each of the notes' choices cost


@dataclass(frozen=True)
class Finding:
    """id: the check's stable name; value and limit: what was measured and the limit it
    crossed (limits.py); message: what it means for this model; fix: a config override
    or an action; cost: what the cause cost in the notes' recipe, with the link, or None
    where it was not measured."""

    id: str
    value: float | str
    limit: float | str
    message: str
    fix: str
    cost: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
