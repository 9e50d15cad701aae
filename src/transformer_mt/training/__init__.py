"""Training: loss, schedule, checkpoints, the Trainer and `fit` (config -> run directory)."""

from __future__ import annotations

import logging
from pathlib import Path

from transformer_mt.config import Config, ConfigError, load_config, replace, save_config
from transformer_mt.data.corpus import read_parallel
from transformer_mt.data.dataset import corpus_paths, encode_data, load_or_train_tokenizer
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.model.transformer import build_model
from transformer_mt.run import RunDir
from transformer_mt.training.distributed import barrier, cleanup, setup_distributed
from transformer_mt.training.trainer import Trainer, seed_everything

log = logging.getLogger("transformer_mt")


def resolve_run_config(cfg: Config | None, run: RunDir) -> Config:
    """A new run uses `cfg`; an existing run resumes with the config it was started with."""
    if run.config.is_file():
        saved = load_config(run.config)
        sizes = dict(src_vocab_size=saved.model.src_vocab_size, tgt_vocab_size=saved.model.tgt_vocab_size)
        if cfg is not None and replace(cfg, model=replace(cfg.model, **sizes)) != saved:
            log.warning("%s already exists: resuming with its saved config.yaml, not the one given", run.root)
        return saved
    if cfg is None:
        raise ConfigError(f"{run.config}: missing; give a config to start a new run")
    return cfg


def prepare(cfg: Config, run: RunDir, is_main: bool, ctx) -> tuple[Config, Tokenizer, object]:
    """Corpus, tokenizer and encoded data; rank 0 creates files, the others wait and read."""
    if is_main:
        run.root.mkdir(parents=True, exist_ok=True)
        paths = corpus_paths(cfg.data, run.data, cfg.train.seed)
        train_text = read_parallel(*paths.train)
        tokenizer = load_or_train_tokenizer(cfg.data, train_text, run.tokenizer, cfg.train.seed)
    barrier(ctx)
    if not is_main:
        paths = corpus_paths(cfg.data, run.data, cfg.train.seed)
        train_text = read_parallel(*paths.train)
        tokenizer = Tokenizer.load(run.tokenizer)
    vocab = len(tokenizer)
    cfg = replace(cfg, model=replace(cfg.model, src_vocab_size=vocab, tgt_vocab_size=vocab))
    if is_main and not run.config.is_file():
        save_config(cfg, run.config)
    return cfg, tokenizer, encode_data(cfg.data, paths, tokenizer, train_text)


def fit(cfg: Config | None, run_dir: str | Path, progress: bool = True) -> Trainer:
    """Train a model as `cfg` says into run_dir, resuming if run_dir holds checkpoints.
    Returns the Trainer (its `cfg`, `model` and `state`) after training."""
    run = RunDir(Path(run_dir))
    cfg = resolve_run_config(cfg, run)
    ctx, device = setup_distributed(cfg.train.device)
    try:
        cfg, tokenizer, data = prepare(cfg, run, ctx.is_main, ctx)
        seed_everything(cfg.train.seed)
        model = build_model(cfg.model)
        trainer = Trainer(cfg, run, model, tokenizer, data, device, ctx.rank, ctx.world_size, progress)
        if ctx.is_main:
            log.info("training on %d pairs (%d filtered), %d batches per epoch, %.1f%% padding, %s on %s",
                     len(data.train_src), data.filtered, len(trainer.batches),
                     100 * trainer.batches.padding_fraction(), trainer.precision, device)
        if trainer.resume():
            log.info("resumed %s at step %d", run.root, trainer.state.step)
        trainer.train()
        return trainer
    finally:
        cleanup(ctx)
