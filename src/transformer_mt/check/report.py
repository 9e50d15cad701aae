"""`run_checks`: every check on one subject, in a stable order; and the report, as text or as
the JSON object `transformer-mt check --json` prints:
{"model": {"convention", "sizes", "parameters"}, "checks": [{"id", "status", "section", "message", "fix"}]}."""

from __future__ import annotations

import contextlib
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch

from transformer_mt.check import attention, behaviour, copy_task, layers, positions, structure
from transformer_mt.learner.loading import described, line_in, located
from transformer_mt.learner.masks import masks_for
from transformer_mt.check.result import FAIL, NOT_CHECKED, PASS, NotChecked, Outcome, Result, failed
from transformer_mt.check.subject import Subject
from transformer_mt.learner.building import BATCH, SRC_LEN, TGT_LEN

Check = Callable[[Subject], Outcome]

# id -> (the paper's section, check). The ids are stable: learners and scripts rely on them.
CHECKS: dict[str, tuple[str, Check]] = {
    "mask": ("3.2.3", behaviour.mask),
    "causal": ("3.2.3", behaviour.causal),
    "padding": ("3.2.1", behaviour.padding),
    "attention": ("3.2.1, eq. 1", attention.attention),
    "heads": ("3.2.2", attention.heads),
    "positional_encoding": ("3.5", positions.positional_encoding),
    "embedding_scale": ("3.4", positions.embedding_scale),
    "layer_norm": ("3.1", layers.layer_norm),
    "residual": ("3.1", structure.residual),
    "feed_forward": ("3.3, eq. 2", layers.feed_forward),
    "dropout": ("5.4", behaviour.dropout),
    "shared_layers": ("3.1, 3.3", structure.shared_layers),
    "registered": ("5", structure.registered),
    "gradients": ("5", behaviour.gradients),
    "cloned_init": ("3.3", structure.cloned_init),
    "source_used": ("3.2.3", behaviour.source_used),
    "output": ("3.4", behaviour.output),
    "projections": ("3.2.2", attention.projections),
    "embedding_init": ("3.4, 3.5", positions.embedding_init),
    "parameter_count": ("3.1-3.4, Table 3", structure.parameter_count),
    "learns_copy": ("copy task", copy_task.learns_copy),
}
QUICK_SKIPS = ("learns_copy",)


@dataclass
class Report:
    """What the checks said of one subject."""

    subject: Subject
    results: list[Result] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(result.status == FAIL for result in self.results)

    def to_dict(self) -> dict[str, Any]:
        model = {"convention": self.subject.convention.name, "sizes": asdict(self.subject.sizes),
                 "parameters": parameter_total(self.subject)}
        return {"model": model, "checks": [result.to_dict() for result in self.results]}

    def text(self) -> str:
        subject = self.subject
        notes = "".join(f"; {note}" for note in subject.notes)
        head = [f"check {subject.path}:{subject.name}",
                f"  convention  {subject.convention.describe}",
                f"  built       {subject.call}: {parameter_total(subject):,} parameters{notes}",
                f"  masks       {subject.masks.describe}",
                f"  batch       {BATCH} sentences of {SRC_LEN} source and {TGT_LEN} target tokens, padding id 0", ""]
        lines = list(head)
        for result in self.results:
            first = f"{result.status.upper().replace('_', ' ')} {result.id} ({result.section}): {result.message}"
            lines += wrapped(first, "    ")
            if result.fix:
                lines += wrapped(f"fix: {result.fix}", "    ", "    ")
        counts = {status: sum(r.status == status for r in self.results) for status in (PASS, FAIL, NOT_CHECKED)}
        lines.append(f"\n{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NOT_CHECKED]} not checked")
        return "\n".join(lines)


def wrapped(text: str, indent: str, first: str = "") -> list[str]:
    return textwrap.wrap(text, 110, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def parameter_total(subject: Subject) -> int:
    return sum(p.numel() for p in subject.parameters().values() if p.requires_grad)


def prepare(subject: Subject) -> None:
    """Without a mask function in the file, the kit's masks take the encoding the model's
    attention reads (True = hidden, or added to the scores), and the report says so."""
    if subject.masks.functions:
        return
    with torch.no_grad():
        encoding = behaviour.model_encoding(subject)
    if encoding not in (None, "attend"):
        subject.built.masks = masks_for(subject.module, subject.sizes, encoding)


def run_one(subject: Subject, check: Check) -> Outcome:
    """One check on a model in eval mode, without gradients (the checks that train turn them
    on); whatever their code raises is a failure at their line, never a traceback."""
    subject.model.eval()
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            return check(subject)
    except NotChecked as why:
        return Outcome(NOT_CHECKED, str(why))
    except Exception as err:
        line = line_in(err, subject.path)
        if line is None:
            return Outcome(NOT_CHECKED, f"the check could not run the model: {described(err)}")
        return failed(f"{located(subject.path, line)} raised {described(err)} when the check ran the model",
                      f"run your model on a batch of {BATCH} sentences of {SRC_LEN} and {TGT_LEN} tokens and fix "
                      "that line")
    finally:
        subject.model.eval()
        subject.model.zero_grad(set_to_none=True)


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """While the checks run: one intra-op thread (their tensors are tiny, and a second thread
    only waits for the first: on a busy 2-core host, spinning costs 50 times the work), and
    no fused fast path for nn.TransformerEncoderLayer (it skips the submodules the checks watch)."""
    threads, fast_path = torch.get_num_threads(), torch.backends.mha.get_fastpath_enabled()
    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.mha.set_fastpath_enabled(fast_path)


def run_checks(subject: Subject, quick: bool = False, only: list[str] | None = None) -> Report:
    """Every check (or the `only` ones) in CHECKS order; `quick` skips learns_copy (not_checked)."""
    with settled():
        return checked(subject, quick, only)


def checked(subject: Subject, quick: bool, only: list[str] | None) -> Report:
    prepare(subject)
    report = Report(subject)
    for key, (section, check) in CHECKS.items():
        if only is not None and key not in only:
            continue
        skipped = quick and key in QUICK_SKIPS
        outcome = Outcome(NOT_CHECKED, "skipped: --quick") if skipped else run_one(subject, check)
        report.results.append(Result(key, outcome.status, section, outcome.message, outcome.fix))
    return report
