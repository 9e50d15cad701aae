"""`diagnose`: every check on one case, in a stable order; and its report, as text or as
the JSON object `doctor --json` prints: {"findings": [...], "checked": [...], "not_checked": {...}}."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from transformer_mt.diagnosis import metrics, outputs, text, thresholds, weights
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.finding import Finding

# id -> check, root causes first. The ids are stable: users and scripts rely on them.
CHECKS: dict[str, Callable[[Case], Finding | None]] = {
    "embedding_scale": weights.embedding_scale,
    "cloned_init": weights.cloned_init,
    "tied_scale": weights.tied_scale,
    "misaligned_pairs": text.misaligned_pairs,
    "unknown_words": text.unknown_words,
    "truncation": text.truncation,
    "schedule": metrics.schedule,
    "memorization": metrics.memorization,
    "undertrained": metrics.undertrained,
    "source_ignored": outputs.source_ignored,
    "length": outputs.length,
    "repetition": outputs.repetition,
}

# A cause -> the findings that may follow from it. Where a cause and one of these fire together,
# the report marks the second as following from the first: fixing the cause is the first step.
FOLLOWS: dict[str, tuple[str, ...]] = {
    "embedding_scale": ("schedule", "memorization", "undertrained", "source_ignored", "length", "repetition"),
    "cloned_init": ("schedule", "undertrained", "source_ignored", "length", "repetition"),
    "tied_scale": ("schedule", "undertrained", "source_ignored", "length", "repetition"),
    "misaligned_pairs": ("truncation", "schedule", "memorization", "undertrained", "source_ignored", "length",
                         "repetition"),
    "unknown_words": ("source_ignored", "length", "repetition"),
    "truncation": ("memorization", "length"),
    "schedule": ("memorization", "undertrained", "source_ignored", "length", "repetition"),
    "memorization": ("source_ignored", "length", "repetition"),
    "undertrained": ("source_ignored", "length", "repetition"),
}


def with_causes(findings: list[Finding]) -> list[Finding]:
    """`findings` (in CHECKS order: causes first), each marked with the causes among them it may
    follow from, its message ending with how sure it is (thresholds.HEALTHY)."""
    fired = [f.id for f in findings]
    return [replace(f, follows_from=tuple(cause for cause in fired if f.id in FOLLOWS.get(cause, ())),
                    message=f"{f.message} ({sureness(f)})") for f in findings]


def sureness(finding: Finding) -> str:
    """The evidence in one clause: the value against its limit, and what the doctor's zoo measured
    on healthy runs (docs/doctor.md), so that a learner can weigh a finding near its limit."""
    healthy = thresholds.HEALTHY.get(finding.id)
    return f"{finding.value} against the limit {finding.limit}" + (f"; healthy runs of the doctor's zoo: {healthy}"
                                                                   if healthy else "")


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
            follows = f", which may follow from {' and '.join(f.follows_from)}: fix that first" if f.follows_from else ""
            lines.append(f"\n{f.id}: {f.value} (limit {f.limit}){follows}")
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
    report.findings = with_causes(report.findings)
    return report
