"""From a `data` config to the corpus files of each split: the config's own files, or a
built-in toy corpus (data.task) generated into the run once. data/vocabulary.py trains
the tokenizer on them, prepare.py then encodes them with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformer_mt.common.config import TASK_NAMES, ConfigError, DataConfig
from transformer_mt.data.toy_corpora import toy_corpus_paths, write_toy_corpus

PathPair = tuple[Path, Path]


@dataclass(frozen=True)
class CorpusPaths:
    """(source, target) files of each split; valid and test may be absent."""

    train: PathPair
    valid: PathPair | None
    test: PathPair | None


def _pair(cfg: DataConfig, split: str) -> PathPair | None:
    src, tgt = getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")
    if bool(src) != bool(tgt):
        raise ConfigError(f"data.{split}_src and data.{split}_tgt: give both files or neither")
    return (Path(src), Path(tgt)) if src else None


def corpus_paths(cfg: DataConfig, task_dir: Path, seed: int) -> CorpusPaths:
    """The files to read. A built-in task (data.task) is generated into `task_dir`
    once; later calls (resume, other DDP ranks) reuse the files written there."""
    if cfg.task:
        if cfg.task not in TASK_NAMES:
            raise ConfigError(f"data.task: must be '' or one of {', '.join(TASK_NAMES)}")
        paths = toy_corpus_paths(task_dir)
        if not all(p.is_file() for pair in paths.values() for p in pair):
            paths = write_toy_corpus(cfg.task, task_dir, cfg.task_size, seed)
        return CorpusPaths(paths["train"], paths["valid"], paths["test"])
    train = _pair(cfg, "train")
    if train is None:
        raise ConfigError("data.train_src, data.train_tgt: set both (or data.task to a built-in task: numbers, copy)")
    return CorpusPaths(train, _pair(cfg, "valid"), _pair(cfg, "test"))
