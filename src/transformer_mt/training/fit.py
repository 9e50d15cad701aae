"""`fit`: a config in, a trained run directory out (new, or resumed where it stopped).

A run directory becomes a run only once its inputs were validated: the corpus is read,
the vocabulary trained and the data encoded before config.yaml is written, and a start
that fails removes what it wrote, so running again with corrected arguments starts
afresh instead of "resuming" a run that never was."""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn

from transformer_mt.common.config import SECTIONS, Config, ConfigError, ModelConfig, replace
from transformer_mt.data.corpus_files import corpus_paths
from transformer_mt.data.text_stream import load_or_train_text_tokenizer, text_paths
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.vocabulary import load_or_train_tokenizer
from transformer_mt.common.device import reuse_freed_memory
from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir, load_run_weights
from transformer_mt.training.distributed import DistributedContext, barrier, cleanup, setup_distributed
from transformer_mt.training.language_model import LanguageModelTask
from transformer_mt.training.learner import LearnerFile, first_loss_finite, learner_model, open_learner_file
from transformer_mt.training.plan import RESUMABLE, BudgetTooShort, make_plan
from transformer_mt.training.trainer import RunContext, Trainer, seed_everything
from transformer_mt.training.translation import TranslationTask

log = logging.getLogger("transformer_mt")


def config_changes(given: Config, saved: Config) -> dict[str, tuple[object, object]]:
    """Every `section.key` whose value differs: (saved, given). The vocabulary sizes, which
    a run fills in from its data, are not compared."""
    sizes = dict(src_vocab_size=saved.model.src_vocab_size, tgt_vocab_size=saved.model.tgt_vocab_size)
    given = replace(given, model=replace(given.model, **sizes))
    return {f"{section}.{field.name}": (getattr(getattr(saved, section), field.name),
                                        getattr(getattr(given, section), field.name))
            for section in SECTIONS for field in fields(getattr(saved, section))
            if getattr(getattr(saved, section), field.name) != getattr(getattr(given, section), field.name)}


def resolve_run_config(cfg: Config | None, run: RunDir) -> Config:
    """A new run uses `cfg`; an existing run resumes with the config it was started with.
    Given with a config of its own, a resumed run takes from it what its plan may change
    (plan.RESUMABLE: how long it trains, how often it validates), one line each, old -> new; any
    other difference (the model, the data, the learning rate) is refused: the checkpoint
    was trained with the saved values."""
    run.check_writable()
    if not run.config.is_file():
        if cfg is None:
            raise ConfigError(f"{run.config}: missing; give a config to start a new run")
        return cfg
    saved = run.read_config()
    if cfg is None:
        return saved
    changes = config_changes(cfg, saved)
    refused = [f"{key}={new} (trained with {old})" for key, (old, new) in changes.items()
               if key.removeprefix("train.") not in RESUMABLE]
    if refused:
        raise UserError(f"{run.root}: a resumed run keeps its config.yaml, so {', '.join(refused)} cannot apply; "
                        f"to train its weights with new settings, start a new --run with --init-from {run.root}")
    for key, (old, new) in changes.items():
        log.info("%s: %s %s -> %s", run.root, key, old, new)
    return cfg


@contextmanager
def removed_on_failure(run: RunDir, active: bool) -> Iterator[None]:
    """Remove what the block added to the run directory (the directory itself if it
    did not exist) when the block fails, so a failed start leaves no half-made run."""
    existed = run.root.is_dir()
    before = set(run.root.iterdir()) if existed else set()
    try:
        yield
    except BaseException:
        if active:
            if not existed:
                shutil.rmtree(run.root, ignore_errors=True)
            elif run.root.is_dir():
                for path in set(run.root.iterdir()) - before:
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        raise


def train_vocabulary(cfg: Config, run: RunDir) -> Tokenizer:
    """Train the run's sentencepiece vocabulary, joint or one per side as data.joint_vocab
    says (what `transformer-mt vocab` does)."""
    run.check_writable()
    if run.tokenizer_file.is_file():
        raise UserError(f"{run.tokenizer_file}: exists already; a run keeps its vocabulary (use a new --run)")
    with removed_on_failure(run, active=True):
        run.root.mkdir(parents=True, exist_ok=True)
        if cfg.model.arch == "decoder_only":
            text = text_paths(cfg.data, run.data, cfg.train.seed)
            return load_or_train_text_tokenizer(cfg.data, text.train, run.tokenizer, cfg.train.seed)
        paths = corpus_paths(cfg.data, run.data, cfg.train.seed)
        return load_or_train_tokenizer(cfg.data, paths.train, run.tokenizer, cfg.train.seed)


def make_task(cfg: Config, run: RunDir, ctx: DistributedContext,
              progress: bool = False) -> TranslationTask | LanguageModelTask:
    """The task `cfg` trains, its data prepared: translation (model.arch: encoder_decoder)
    or a language model (decoder_only)."""
    kind = LanguageModelTask if cfg.model.arch == "decoder_only" else TranslationTask
    return kind.prepare(cfg, run, ctx, progress)


def make_model(cfg: Config, run: RunDir, task: TranslationTask | LanguageModelTask, ctx: DistributedContext,
               device: torch.device, learner: LearnerFile | None) -> nn.Module:
    """The model `cfg` trains, whatever its source: ours (task.build_model, model.arch) or the
    learner's file (`learner`: built at the run's sizes and checked before a new run's first step),
    its weights from the run train.init_from names when fine-tuning (a resume then replaces them
    with its checkpoint's)."""
    model = learner_model(learner, cfg, run, ctx.is_main, task.longest()) if learner else task.build_model()
    if cfg.train.init_from:
        initialize_from(model, cfg)
    if learner and learner.kept != run:  # a new run of their model: its first loss before any step
        first_loss_finite(model, task, cfg, ctx, device, learner.original)
    return model


def initialize_from(model: nn.Module, cfg: Config) -> None:
    """Load the weights of the run train.init_from into `model` (fine-tuning starts
    there; its own optimizer, schedule and data). The model section must describe the
    same shapes: one line lists every difference."""
    source = RunDir(Path(cfg.train.init_from)).require()
    theirs = source.read_config().model
    differ = [f"model.{key} is {getattr(cfg.model, key)} here but {getattr(theirs, key)} in {source.config}"
              for key in ModelConfig.shape_keys() if getattr(cfg.model, key) != getattr(theirs, key)]
    if differ:
        raise UserError(f"train.init_from={cfg.train.init_from}: the weights do not fit this model ("
                        + "; ".join(differ) + "); copy its model section")
    path = load_run_weights(model, source, cfg.train.init_checkpoint)
    log.info("starting from the weights of %s", path)


def prepare_run(cfg: Config | None, run_dir: str | Path, progress: bool = True) -> str:
    """What `train` does before its first step, alone (`transformer-mt prepare`): the
    vocabulary, the prepared data and config.yaml of a new run, so that training (on one
    process or many) starts at once. On an existing run it checks the data is current.
    Returns one line on what was prepared."""
    run = RunDir(Path(run_dir))
    cfg = resolve_run_config(cfg, run)
    with removed_on_failure(run, active=not run.config.is_file()):
        return make_task(cfg, run, DistributedContext(), progress).prepared_summary()


def fit(cfg: Config | None, run_dir: str | Path, progress: bool = True,
        clock: Callable[[], float] = time.perf_counter) -> Trainer:
    """Train a model as `cfg` says into run_dir, resuming if run_dir holds checkpoints
    (`cfg` None: with its saved config; else what resolve_run_config lets it change).
    Returns the Trainer (its `cfg`, `model` and `state`) after training. Sets the
    allocator's settings for training (device.reuse_freed_memory) for the CLI and Python
    callers alike. `clock` times the run (a test may pass its own, for a budget)."""
    reuse_freed_memory()
    run = RunDir(Path(run_dir))
    cfg = resolve_run_config(cfg, run)
    new_run = not run.config.is_file()
    ctx, device = setup_distributed(cfg.train.device)
    trainer: Trainer | None = None
    try:
        with removed_on_failure(run, active=new_run and ctx.is_main):
            learner = open_learner_file(cfg, run) if cfg.model.file else None  # before the data: fails fast
            task = make_task(cfg, run, ctx, progress)
            cfg = task.cfg
            if ctx.is_main and not new_run and cfg != run.read_config():
                run.write_config(cfg)  # a resume's new plan, for the resumes after it
            seed_everything(cfg.train.seed)
            model = make_model(cfg, run, task, ctx, device, learner)
            plan = make_plan(cfg.train, cfg.model.d_model, announce=ctx.is_main)
            context = RunContext(cfg, run, task, model, device, ctx.rank, ctx.world_size)
            trainer = Trainer(context, plan, progress, clock)
        if ctx.is_main:
            t = cfg.train
            log.info("%s, %s on %s", task.summary(trainer.batches), trainer.precision, device)
            size = (f"{cfg.data.batch_sentences} sentences" if cfg.data.batch_sentences
                    else f"<= {cfg.data.max_tokens} tokens")
            log.info("a step takes %d batch(es) of %s: %d process(es) x train.accumulate %d "
                     "(to keep the batch per step when the process count changes, scale accumulate inversely)",
                     ctx.world_size * t.accumulate, size, ctx.world_size, t.accumulate)
        if trainer.resume():
            log.info("resumed %s at step %d", run.root, trainer.state.step)
        try:
            trainer.train()
        except BudgetTooShort:  # refused in its first steps: a new run leaves nothing behind
            if new_run and ctx.is_main:
                shutil.rmtree(run.root, ignore_errors=True)
            raise
        barrier(ctx)  # no rank tears the process group down while another still writes or reduces
        return trainer
    finally:
        if trainer is not None:
            trainer.release_process_group()
        cleanup(ctx)
