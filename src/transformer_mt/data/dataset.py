"""From a `data` config to what the trainer needs: corpus files (generated for a
built-in task), the joint tokenizer, and encoded, filtered training pairs.

Only training data is filtered (pairs longer than data.max_len subwords or with a
length ratio above data.max_len_ratio are dropped and counted); validation pairs are all
kept, and those longer than the model's positional table allows are truncated to it
with a warning that counts them (as `translate` truncates long inputs)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.config import TASK_NAMES, ConfigError, DataConfig
from transformer_mt.data.corpus import Corpus, CorpusError, read_parallel
from transformer_mt.data.tasks import task_paths, write_task
from transformer_mt.data.tokenizer import Tokenizer

log = logging.getLogger("transformer_mt")

PathPair = tuple[Path, Path]


@dataclass(frozen=True)
class CorpusPaths:
    """(source, target) files of each split; valid and test may be absent."""

    train: PathPair
    valid: PathPair | None
    test: PathPair | None


@dataclass
class EncodedData:
    """Subword ids of the training pairs (filtered) and of the validation pairs (not),
    plus the validation text that BLEU is computed against."""

    train_src: list[list[int]]
    train_tgt: list[list[int]]
    valid_src: list[list[int]]
    valid_tgt: list[list[int]]
    valid: Corpus | None
    filtered: int


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
        paths = task_paths(task_dir)
        if not all(p.is_file() for pair in paths.values() for p in pair):
            paths = write_task(cfg.task, task_dir, cfg.task_size, seed)
        return CorpusPaths(paths["train"], paths["valid"], paths["test"])
    train = _pair(cfg, "train")
    if train is None:
        raise ConfigError("data.train_src, data.train_tgt: set both (or data.task to a built-in task: numbers, copy)")
    return CorpusPaths(train, _pair(cfg, "valid"), _pair(cfg, "test"))


def load_or_train_tokenizer(cfg: DataConfig, train_text: Corpus, path: Path, seed: int) -> Tokenizer:
    """The run's tokenizer: loaded if the run has one, else trained on both sides of
    the training text (one joint vocabulary) and saved at `path`."""
    if path.is_file():
        return Tokenizer.load(path)
    log.info("training a %d-piece %s vocabulary on %d sentence pairs", cfg.vocab_size, cfg.vocab_type, len(train_text))
    return Tokenizer.train(train_text.src + train_text.tgt, path, cfg.vocab_size, cfg.vocab_type, seed)


def filter_pairs(
    src: list[list[int]], tgt: list[list[int]], max_len: int, max_ratio: float
) -> tuple[list[list[int]], list[list[int]], int]:
    """Drop pairs with a side longer than max_len or a long/short length ratio above
    max_ratio; returns (kept sources, kept targets, number dropped)."""
    keep = [
        i for i, (s, t) in enumerate(zip(src, tgt))
        if max(len(s), len(t)) <= max_len and max(len(s), len(t)) <= max_ratio * max(min(len(s), len(t)), 1)
    ]
    return [src[i] for i in keep], [tgt[i] for i in keep], len(src) - len(keep)


def truncate_long(seqs: list[list[int]], longest: int, name: str) -> list[list[int]]:
    """Cut sequences to `longest` ids, with one warning that counts the cut ones."""
    cut = sum(len(seq) > longest for seq in seqs)
    if cut:
        log.warning("%s: %d line(s) longer than %d subwords (model.max_positions - 1) truncated for validation",
                    name, cut, longest)
    return [seq[:longest] for seq in seqs]


def encode_data(
    cfg: DataConfig, paths: CorpusPaths, tokenizer: Tokenizer, train_text: Corpus, max_positions: int
) -> EncodedData:
    """Encode the training pairs (then filter them) and the validation pairs (each side
    cut to max_positions - 1 subwords, the room left by eos or bos)."""
    train_src, train_tgt, dropped = filter_pairs(
        tokenizer.encode(train_text.src), tokenizer.encode(train_text.tgt), cfg.max_len, cfg.max_len_ratio
    )
    if not train_src:
        raise CorpusError(f"{paths.train[0]}: every training pair was dropped by data.max_len={cfg.max_len} "
                          f"or data.max_len_ratio={cfg.max_len_ratio}; raise them")
    if dropped:
        log.warning("dropped %d training pair(s) longer than %d subwords or with a length ratio above %g",
                    dropped, cfg.max_len, cfg.max_len_ratio)
    valid = read_parallel(*paths.valid) if paths.valid else None
    longest = max_positions - 1
    valid_src = truncate_long(tokenizer.encode(valid.src), longest, str(paths.valid[0])) if valid else []
    valid_tgt = truncate_long(tokenizer.encode(valid.tgt), longest, str(paths.valid[1])) if valid else []
    return EncodedData(train_src, train_tgt, valid_src, valid_tgt, valid, dropped)
