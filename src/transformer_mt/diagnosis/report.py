"""`diagnose`: every check on one case, in a stable order; and its report, as text or as
the JSON object `doctor --json` prints: {"findings": [...], "checked": [...], "not_checked": {...}}."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

from transformer_mt.diagnosis import metrics, outputs, text, weights
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.finding import Finding

# id -> check. The ids are stable: users and scripts rely on them.
CHECKS: dict[str, Callable[[Case], Finding | None]] = {
    "embedding_scale": weights.embedding_scale,
    "cloned_init": weights.cloned_init,
    "tied_scale": weights.tied_scale,
    "unknown_words": text.unknown_words,
    "truncation": text.truncation,
    "memorization": metrics.memorization,
    "schedule": metrics.schedule,
    "undertrained": metrics.undertrained,
    "source_ignored": outputs.source_ignored,
    "length": outputs.length,
    "repetition": outputs.repetition,
}


@dataclass
class Report:
    """What the checks found on one case: findings, the ids that passed, and why the others
    could not be checked."""

    case: str
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "checked": self.checked,
                "not_checked": self.not_checked}

    def text(self) -> str:
        lines = [f"doctor {self.case}: {len(self.findings)} finding(s)"]
        for f in self.findings:
            lines.append(f"\n{f.id}: {f.value} (limit {f.limit})")
            for label, body in (("", f.message), ("fix: ", f.fix), ("cost: ", f.cost)):
                if body:
                    lines += textwrap.wrap(label + body, 100, initial_indent="  ", subsequent_indent="    ",
                                           break_long_words=False, break_on_hyphens=False)
        if self.checked:
            lines.append(f"\nchecked, nothing found: {', '.join(self.checked)}")
        for key, why in self.not_checked.items():
            lines.append(f"not checked: {key} ({why})")
        return "\n".join(lines)


def diagnose(case: Case, only: list[str] | None = None) -> Report:
    """Run every check (or the `only` ones) on `case`, in CHECKS order."""
    report = Report(case.name)
    for key, check in CHECKS.items():
        if only is not None and key not in only:
            continue
        try:
            found = check(case)
        except NotChecked as why:
            report.not_checked[key] = str(why)
            continue
        if found is None:
            report.checked.append(key)
        else:
            report.findings.append(found)
    return report
