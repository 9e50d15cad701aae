"""A learner's own Transformer trained here (`train PRESET --model FILE[:NAME]`, model.file).

Their file is imported and their builder called by the loader `check` uses (learner/), at the
preset's sizes and the run's vocabularies. Before the first step the quick check runs on their
model as built: a failure that makes training meaningless stops the run in one line, the other
findings are printed and training goes on (the notes' code as written is a lesson, not an
error). The run keeps a copy of their file (runs/directory.py), so that it translates, serves
and resumes with the original moved or deleted; everything else (data, schedule, label
smoothing, precision, averaging, validation, resume, torchrun) is the toolkit's, unchanged."""

from __future__ import annotations

import inspect
import logging
import math
import types
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from transformer_mt.check.behaviour import output_kind
from transformer_mt.check.report import prepare, run_checks
from transformer_mt.check.result import FAIL
from transformer_mt.check.subject import Subject, subject_of
from transformer_mt.common.config import Config
from transformer_mt.common.device import autocast, resolve_precision
from transformer_mt.common.errors import UserError
from transformer_mt.learner.building import Sizes, size_of
from transformer_mt.learner.faults import EVAL_RANDOM, EVAL_RANDOM_FIX, unregistered_state
from transformer_mt.learner.loading import load_file, split_target, their_imports
from transformer_mt.learner.model import (LearnerModel, LearnerSource, build_learner, longest_run, output_fits,
                                          raised_message, sizes_for)
from transformer_mt.model.language_model import build_any_model
from transformer_mt.runs.directory import RunDir, keep_learner_file, learner_source, sha256_of
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.task import Task

log = logging.getLogger("transformer_mt")

# The checks whose failure makes training meaningless: the model would learn to copy the next
# token, read padding, translate without the source, leave weights untrained, or give no
# distribution over the target vocabulary to learn (see trainable_output for logits).
FATAL = ("causal", "padding", "source_used", "gradients", "output")


def trainable_output(subject: Subject) -> bool:
    """Whether their output, failing `output`, is logits over the target vocabulary (a generator
    without its log_softmax): the toolkit's loss and decoders normalise scores themselves, so
    training is the same. Probabilities, a wrong width or another axis are not."""
    with torch.no_grad():
        out = subject.forward(subject.src, subject.tgt).float()
    return out.shape[-1] == subject.sizes.tgt_vocab and output_kind(out) == output_kind(out, 1) == "logits"


@dataclass
class LearnerFile:
    """Their file imported: the module, where it was read from (`source`: their file, or the
    copy of the run it resumes or fine-tunes, `kept`), and the file they named."""

    module: types.ModuleType
    source: LearnerSource
    original: Path
    kept: RunDir | None = None


def open_learner_file(cfg: Config, run: RunDir) -> LearnerFile:
    """Import the model file of `cfg`: a run that has its copy (a resume) imports that copy,
    a fine-tuned run (train.init_from) the copy of the run it starts from, a new run the file
    it names. Done before the data is prepared: a file that does not import stops at once."""
    path, name = split_target(cfg.model.file)
    for kept in (run, RunDir(Path(cfg.train.init_from)) if cfg.train.init_from else None):
        if kept is not None and kept.learner_record.is_file():
            source = learner_source(kept)
            if path.is_file() and sha256_of(path.read_bytes()) != sha256_of(source.path.read_bytes()):
                log.warning("%s differs from %s, the copy %s was trained with: training goes on with that copy",
                            path, source.path, kept.root)
            return LearnerFile(load_file(source.path, beside=source.beside), source, path, kept)
    return LearnerFile(load_file(path), LearnerSource(path, name), path)


LARGER = 3.0  # a model this many times the preset's own parameter count gets a warning


def untrainable(model: LearnerModel, path: Path, sizes: Sizes) -> str | None:
    """One line when their model as built cannot be trained right, whatever the checks say: state
    outside its state_dict, a padding id of its own, a backward pass that fails, an eval mode that
    is not deterministic with dropout off, other vocabularies than the run's; else None."""
    if problem := unregistered_state(model.learner, path) or model.masks.pad_problem or model.backward_problem():
        return problem
    if model.eval_random:
        return f"{path}: {EVAL_RANDOM}: its translations could not be deterministic; {EVAL_RANDOM_FIX}"
    if (model.sizes.src_vocab, model.sizes.tgt_vocab) != (sizes.src_vocab, sizes.tgt_vocab):
        one = any(size_of(name) == "vocab" for name in inspect.signature(model.builder).parameters)
        why = (f"{model.name} takes one vocabulary size" if one else
               f"{model.name} raised with two ({'; '.join(model.notes)})")
        return (f"{path}: {why}, and this run has two vocabularies, {sizes.src_vocab:,} source and {sizes.tgt_vocab:,} "
                "target tokens: train with one vocabulary for both sides (--data.joint_vocab=true) or give "
                f"{model.name} a source and a target vocabulary size (src_vocab, tgt_vocab)")
    return None


def say_size(model: LearnerModel, cfg: Config, path: Path) -> None:
    """A warning before the first step when their model is far larger than the preset's own at the
    same sizes (a builder that ignores them): a step then takes that much longer."""
    with torch.device("meta"):
        ours = sum(p.numel() for p in build_any_model(cfg.model).parameters())
    theirs = sum(p.numel() for p in model.learner.parameters())
    if theirs > LARGER * ours:
        log.warning("%s: your model has %s parameters and the preset's own model has %s at the same sizes (%.0fx): "
                    "if %s ignores the sizes it is given (%s), each step takes about that much longer", path,
                    f"{theirs:,}", f"{ours:,}", theirs / ours, model.name, model.call)


def check_before_training(learner: LearnerFile, sizes: Sizes, checks: bool) -> str | None:
    """The quick check on their model as built at the run's sizes (`checks` False: only the
    mask encoding their attention reads), after what no check may let through (`untrainable`).
    Returns that encoding for the kit's masks (None where their file makes its own masks)."""
    source = learner.source
    subject = subject_of(learner.module, source.path, source.name, sizes)
    if problem := untrainable(subject.built, learner.original, sizes):
        raise UserError(problem)
    for note in subject.notes:
        log.warning("%s: %s", learner.original, note)
    if not checks:
        prepare(subject)
    else:
        failed = [result for result in run_checks(subject, quick=True).results if result.status == FAIL]
        fatal = [result for result in failed if result.id in FATAL
                 and not (result.id == "output" and trainable_output(subject))]
        if fatal:
            first = fatal[0]
            raise UserError(f"{learner.original}: fails check {first.id} ({first.section}): {first.message}; training "
                            f"it would be meaningless: `transformer-mt check {learner.original}` gives the whole "
                            "report (train --no-check trains it all the same)")
        for result in failed:
            log.warning("check %s failed (training goes on; `transformer-mt check %s` says how to fix it): %s",
                        result.id, learner.original, result.message)
        if not failed:
            log.info("check --quick: %s passes every check of the paper that runs before training", learner.original)
    return None if subject.masks.functions else subject.masks.encoding


def learner_model(learner: LearnerFile, cfg: Config, run: RunDir, is_main: bool, data_longest: int) -> LearnerModel:
    """Their model built at the run's sizes, its draws from train.seed (every process the
    same). Their file is checked before a new run's first step; a new or fine-tuned run finds
    the longest sentence their model takes (refused if the data holds longer ones) and keeps a
    copy of their file, and of the files of theirs it imports. `data_longest`: the longest
    sequence of the data as the model reads it (eos or bos included). fit's make_model then
    checks the loss of the first training batch (first_loss_finite)."""
    sizes = sizes_for(cfg.model)
    source = learner.source
    if learner.kept is None:  # their file itself: a new run
        source = replace(source, encoding=check_before_training(learner, sizes, cfg.train.check_model))
    model = build_learner(learner.module, source, sizes, cfg.train.seed)
    output_fits(model, learner.original)
    if learner.kept is None and is_main:
        say_size(model, cfg, learner.original)
    if learner.kept != run:  # a new run, fresh or fine-tuned from the run `kept`
        longest = longest_run(model, sizes.max_len)
        if longest < data_longest:
            raise UserError(f"{learner.original}: the model runs on sentences of at most {longest} tokens (a table of "
                            f"positions that long?), and the data holds sentences of {data_longest} (eos included): "
                            f"give it a longer table (max_len), or keep shorter pairs: --data.max_len={longest - 1}")
        model.source = source = replace(source, longest=longest)
        model.max_positions = min(sizes.max_len, longest)
        if is_main:
            original = learner.original if learner.kept is None else source.path
            keep_learner_file(run, source, original, their_imports(learner.module))
    return model


@torch.no_grad()
def first_loss(model: LearnerModel, task: Task, cfg: Config, ctx: DistributedContext, device: torch.device) -> float:
    """The loss per token of the first training batch before any step, on the run's device and in
    its precision, in eval mode (no dropout draws): the batches come from a stream of their own,
    the run's is untouched."""
    batch = next(task.train_batches(cfg.train.seed, ctx.rank, ctx.world_size, 1)).to(device)
    model.to(device).eval()
    try:
        with autocast(device, resolve_precision(cfg.train.precision, device)):
            logits, target = task.loss_view(model)(batch)
        return float(task.criterion(model)(logits, target, 1.0 / max(batch.n_tokens, 1)))
    finally:
        model.train()


def first_loss_finite(model: LearnerModel, task: Task, cfg: Config, ctx: DistributedContext, device: torch.device,
                      path: Path) -> None:
    """UserError when their model raises on the first training batch (a batch of many
    sentences, on the run's device and precision, which the probe batch before it was not) or
    its loss, before any step, is NaN or infinite."""
    where = f"{resolve_precision(cfg.train.precision, device)} on {device}"
    try:
        value = first_loss(model, task, cfg, ctx, device)
    except Exception as err:  # noqa: BLE001 (their code: what it raises is theirs)
        raise UserError(raised_message(err, path, f"on the first training batch ({where})",
                                       "run your model on a batch of several padded sentences")) from None
    if not math.isfinite(value):
        raise UserError(f"{path}: the loss of the first training batch is {value} before any step: the model's "
                        "output holds NaN or infinite values (a row of attention scores hidden entirely by -inf gives "
                        "NaN: hide with a large negative number such as -1e9; a log of 0 gives -inf)")
