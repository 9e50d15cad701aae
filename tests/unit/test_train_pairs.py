"""data.train_pairs: training (and its vocabulary) sees only the first N usable pairs of the
training files, as the study notes' `select(range(N))`; N is part of what the prepared
data records, so changing it prepares again, or is refused once training has started."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import sentencepiece as spm

from transformer_mt.common.config import load_config
from transformer_mt.data.corpus_files import CorpusPaths
from transformer_mt.data.prepare import PairLimits, open_prepared, prepare_corpus
from transformer_mt.data.vocabulary import load_or_train_tokenizer
from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir
from transformer_mt.training import prepare_run

WORDS = "the a red dog cat runs over small big house green tree man woman sees".split()
EMPTY_LINE = 4  # index of a pair whose source is empty: not usable, so not counted


def write_corpus(folder: Path, pairs: int = 50) -> tuple[Path, Path]:
    """`pairs` distinct sentence pairs; the source of pair EMPTY_LINE is empty, and only
    pairs from index 30 on hold the letter "ж" (so a vocabulary of the first 20 lacks it)."""
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = [], []
    for i in range(pairs):
        words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + i % 6)]
        extra = " жук" if i >= 30 else ""
        src.append("" if i == EMPTY_LINE else " ".join(words) + extra)
        tgt.append(" ".join(reversed(words)) + f" {i}" + extra)
    (folder / "train.src").write_text("".join(line + "\n" for line in src), encoding="utf-8")
    (folder / "train.tgt").write_text("".join(line + "\n" for line in tgt), encoding="utf-8")
    return folder / "train.src", folder / "train.tgt"


def first_usable_lines(path_src: Path, path_tgt: Path, n: int) -> tuple[list[str], list[str]]:
    """The first n pairs with no empty side, read with plain Python."""
    pairs = [(s, t) for s, t in zip(path_src.read_text(encoding="utf-8").splitlines(),
                                    path_tgt.read_text(encoding="utf-8").splitlines()) if s.strip() and t.strip()]
    return [s for s, _ in pairs[:n]], [t for _, t in pairs[:n]]


@pytest.fixture
def subset_run(tmp_path: Path) -> tuple[RunDir, tuple[Path, Path]]:
    """A run prepared (vocabulary and arrays) from a 50-pair corpus with data.train_pairs 20."""
    train = write_corpus(tmp_path / "corpus")
    cfg = load_config("tiny", ["--data.task=", f"--data.train_src={train[0]}", f"--data.train_tgt={train[1]}",
                               "--data.train_pairs=20", "--data.vocab_size=60"])
    run = RunDir(tmp_path / "run")
    prepare_run(cfg, run.root, progress=False)
    return run, train


def test_the_run_trains_on_exactly_the_first_n_usable_pairs(subset_run) -> None:
    run, train = subset_run
    data = json.loads((run.prepared / "manifest.json").read_text())
    assert data["limits"]["train_pairs"] == 20
    sp = spm.SentencePieceProcessor(model_file=str(run.tokenizer_file))
    src, tgt = first_usable_lines(*train, 20)
    assert len(src) == 20 and src[EMPTY_LINE] != ""  # line EMPTY_LINE + 1 was skipped, line 21 came in
    prepared = open_prepared(run.prepared, CorpusPaths(train, None, None))
    assert prepared.train_src.tolist() == sp.encode(src)
    assert prepared.train_tgt.tolist() == sp.encode(tgt)


def test_the_vocabulary_is_built_from_those_pairs_only(subset_run, tmp_path: Path) -> None:
    run, train = subset_run
    sp = spm.SentencePieceProcessor(model_file=str(run.tokenizer_file))
    assert all(sp.PieceToId(piece) == sp.unk_id() for piece in ("ж", "у", "к", "▁жук"))
    data = load_config("tiny", ["--data.vocab_size=60"]).data  # train_pairs 0: the whole corpus has "ж"
    everything = load_or_train_tokenizer(data, train, tmp_path / "all.model", seed=1)
    assert everything.piece_to_id("ж") != sp.unk_id()


def test_changing_n_prepares_again_or_is_refused_once_training_started(subset_run, caplog) -> None:
    run, train = subset_run
    paths = CorpusPaths(train, None, None)
    sp = spm.SentencePieceProcessor(model_file=str(run.tokenizer_file))
    limits = PairLimits(250, 3.0, 255, train_pairs=30)
    with pytest.raises(UserError, match=r"prepared with other settings.*new --run"):
        prepare_corpus(paths, run.tokenizer_file, len(sp), run.prepared, limits, may_rebuild=False)
    data = prepare_corpus(paths, run.tokenizer_file, len(sp), run.prepared, limits)
    assert data.train_src.tolist() == sp.encode(first_usable_lines(*train, 30)[0])
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        every = prepare_corpus(paths, run.tokenizer_file, len(sp), run.prepared, PairLimits(250, 3.0, 255, train_pairs=500))
    assert len(every.train_src) == 49  # all 50 pairs but the one with an empty source
    assert "data.train_pairs is 500 but the corpus has only 49 usable pairs" in caplog.text
    assert prepare_corpus(paths, run.tokenizer_file, len(sp), run.prepared, PairLimits(250, 3.0, 255)).train_src.tolist() \
        == every.train_src.tolist()  # 0 = all
