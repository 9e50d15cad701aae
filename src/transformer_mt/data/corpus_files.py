"""From a `data` config to the corpus files of each split: the config's own files, or a
built-in toy corpus (data.task) generated into the run once. data/vocabulary.py trains
the tokenizer on them, prepare.py then encodes them with it."""

from __future__ import annotations

import re
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


def guess_languages(cfg: DataConfig) -> tuple[str, str] | None:
    """(source, target) from training file names such as train.de.gz / train.en.gz."""
    pattern = re.compile(r"\.([a-z]{2,3}(?:[_-][A-Za-z]{2,4})?)(?:\.gz)?$")
    found = [pattern.search(Path(name).name) for name in (cfg.train_src, cfg.train_tgt)]
    if all(found) and found[0].group(1) != found[1].group(1):
        return found[0].group(1), found[1].group(1)
    return None


# The tokenization WMT and sacreBLEU score each of these target languages with: 13a would split
# a sentence without spaces into a few long "words".
BLEU_TOKENIZE_OF = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}


def bleu_tokenize_hint(cfg: DataConfig) -> str | None:
    """One line where the training files name a Chinese, Japanese or Korean target (train.zh, ...)
    and data.bleu_tokenize is still 13a; None otherwise."""
    languages = guess_languages(cfg)
    language = languages[1].replace("_", "-").split("-")[0].lower() if languages else ""
    wanted = BLEU_TOKENIZE_OF.get(language)
    if wanted is None or cfg.bleu_tokenize != "13a":
        return None
    return (f"{cfg.train_tgt}: the target looks {language}, but BLEU would split it with 13a (spaces and "
            f"punctuation); --data.bleu_tokenize={wanted} scores it as WMT does")
