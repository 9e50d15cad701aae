"""What a check reports: a `Finding`, with the measured value, the limit it crossed, what
the cause cost where docs/ablations.md measured it, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

COSTS = "docs/ablations.md#the-cost-of-each-choice"  # the table of what each of the notes' choices cost

# Test BLEU each change gained from the notes' recipe (docs/ablations.md's rows, the mean over
# seeds in benchmarks/results/ablations_seeds.jsonl; tests/integration/test_ablations.py
# checks them against that file): row -> (what changed, BLEU).
MEASURED = {
    "+xavier": ("Xavier initialisation", 8.7),
    "+unscaled_embedding": ("embeddings not multiplied by sqrt(d_model)", 7.2),
    "+all_pairs": ("all 29,000 pairs instead of 5,000", 4.8),
    "+bpe": ("one joint BPE vocabulary", 2.3),
    "+no_dropout": ("no dropout", -4.1),
    "+tied": ("the output layer tied to N(0, 1) embeddings", -10.2),
}


def cost(*rows: str) -> str:
    """What the rows' changes did to the notes' model, with the link to the table."""
    parts = [f"{MEASURED[row][0]} {MEASURED[row][1]:+.1f} BLEU (`{row}`)" for row in rows]
    return f"in the notes' recipe, {', '.join(parts)}: {COSTS}"


@dataclass(frozen=True)
class Finding:
    """id: the check's stable name; value and limit: what was measured and the limit it
    crossed (thresholds.py); message: what it means for this model; fix: a config override
    or an action; cost: what the cause cost in the notes' recipe, with the link, or None
    where it was not measured; follows_from: the findings of this report it may be a symptom
    of (report.FOLLOWS): fix those first."""

    id: str
    value: float | str
    limit: float | str
    message: str
    fix: str
    cost: str | None = None
    follows_from: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
