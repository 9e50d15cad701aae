"""The run's vocabulary: loaded if the run has one, else trained on a sample of the
training text, streamed from the corpus files: one joint sentencepiece model, or separate
source and target models (data.joint_vocab: false)."""

from __future__ import annotations

import logging
from itertools import chain
from pathlib import Path
from typing import Iterator

import numpy as np

from transformer_mt.common.config import DataConfig
from transformer_mt.data.corpus import decode_line, iter_raw_lines, iter_raw_pairs, no_pairs_left, usable_pair
from transformer_mt.data.corpus_files import PathPair
from transformer_mt.data.tokenizers.separate import SeparateTokenizer
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import load_tokenizer, vocab_sizes

log = logging.getLogger("transformer_mt")


def load_or_train_tokenizer(cfg: DataConfig, train: PathPair, path: Path, seed: int) -> Tokenizer:
    """The tokenizer named by `path` (a run's: RunDir.tokenizer_file): loaded if it exists,
    else trained on the training text: one joint vocabulary of both sides saved at `path`
    or, with data.joint_vocab false, one of each side saved beside it (source.model,
    target.model). A corpus of more than data.vocab_sample sentences is sampled (pairs
    drawn from the seed, streamed from the files): the vocabulary of 2M sentences is as
    good as that of 9M, at a fraction of the memory."""
    if path.is_file():  # tokenizer.model, source.model, or an imported run's vocab.json
        return load_tokenizer(path)
    kept = nonempty_pairs(train)
    if cfg.train_pairs:  # only the pairs training will see (prepare.first_usable keeps the same)
        kept = kept[: cfg.train_pairs]
    chosen = kept
    if 2 * len(kept) > cfg.vocab_sample:
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(kept, size=max(cfg.vocab_sample // 2, 1), replace=False))
    kind = "joint" if cfg.joint_vocab else "source and a target"
    log.info("training a %s %d-piece %s vocabulary on %d of %d sentence pairs", kind, cfg.vocab_size, cfg.vocab_type,
             len(chosen), len(kept))
    if not cfg.joint_vocab:
        tokenizer = SeparateTokenizer.train(sampled_lines(train[0], chosen), sampled_lines(train[1], chosen),
                                            path.parent / SeparateTokenizer.file_name, cfg.vocab_size, cfg.vocab_type,
                                            seed)
    else:
        sentences = chain(sampled_lines(train[0], chosen), sampled_lines(train[1], chosen))
        tokenizer = SentencePieceTokenizer.train(sentences, path, cfg.vocab_size, cfg.vocab_type, seed)
    say_if_smaller(tokenizer, cfg.vocab_size)
    return tokenizer


def say_if_smaller(tokenizer: Tokenizer, asked: int) -> None:
    """One line where the corpus gave fewer pieces than data.vocab_size asked for (a small corpus
    has fewer words and merges than that): the size reached, which the model's embeddings take."""
    reached = vocab_sizes(tokenizer)
    if min(reached) < asked:
        sizes = " and ".join(str(size) for size in dict.fromkeys(reached))
        log.info("the corpus gave a vocabulary of %s pieces, fewer than data.vocab_size=%d asked for", sizes, asked)


def nonempty_pairs(pair: PathPair) -> np.ndarray:
    """Indices (from 0) of the lines where neither side is empty; validates both files
    (UTF-8, equal line counts) as it streams them."""
    def usable() -> Iterator[int]:
        for number, (src, tgt) in enumerate(iter_raw_pairs(*pair), start=1):
            if usable_pair(decode_line(src, number, str(pair[0])), decode_line(tgt, number, str(pair[1]))):
                yield number - 1

    kept = np.fromiter(usable(), dtype=np.int64)
    if len(kept) == 0:
        raise no_pairs_left(*pair, sum(1 for _ in iter_raw_lines(pair[0])))
    return kept


def sampled_lines(path: Path, chosen: np.ndarray) -> Iterator[str]:
    """The lines of `path` whose indices (from 0, sorted) are in `chosen`, streaming."""
    wanted = iter(chosen.tolist())
    target = next(wanted, None)
    for index, raw in enumerate(iter_raw_lines(path)):
        if index == target:
            yield decode_line(raw, index + 1, str(path))
            target = next(wanted, None)
            if target is None:
                return
