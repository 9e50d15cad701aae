"""Prepared data: the memory-mapped arrays hold exactly what encoding the text gives,
in one process or many, and stay tied to the corpus files and tokenizer they came from."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from transformer_mt.common.config import load_config, replace
from transformer_mt.data import prepare as prep
from transformer_mt.data.corpus import CorpusError
from transformer_mt.data.corpus_files import CorpusPaths
from transformer_mt.data.prepare import PairLimits, prepare_corpus
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.data.vocabulary import load_or_train_tokenizer
from transformer_mt.common.errors import UserError

WORDS = "the a red dog cat runs over small big house green tree man woman sees".split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_corpus(folder: Path, pairs: int, seed: int = 0, gz: bool = False) -> CorpusPaths:
    """A corpus with a few empty pairs, a few very long lines, and a valid split."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(pairs):
        n = 60 if i % 97 == 5 else rng.randint(1, 12)
        rows.append(("" if i % 50 == 7 else sentence(rng, n), sentence(rng, max(1, n + rng.randint(-2, 2)))))
    valid = [(sentence(rng, 70 if i == 3 else 5), sentence(rng, 6)) for i in range(20)]

    def dump(name: str, lines: list[str]) -> Path:
        path = folder / (name + (".gz" if gz else ""))
        data = "".join(line + "\n" for line in lines).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    train = (dump("train.src", [s for s, _ in rows]), dump("train.tgt", [t for _, t in rows]))
    return CorpusPaths(train, (dump("valid.src", [s for s, _ in valid]), dump("valid.tgt", [t for _, t in valid])), None)


def reference(paths: CorpusPaths, model: Path, limits: PairLimits) -> tuple[list, list, list, list]:
    """What the arrays must hold, computed line by line with sentencepiece directly."""
    sp = spm.SentencePieceProcessor(model_file=str(model))

    def pairs(pair):
        opener = gzip.open if pair[0].suffix == ".gz" else open
        with opener(pair[0], "rt", encoding="utf-8") as s, opener(pair[1], "rt", encoding="utf-8") as t:
            return [(a.rstrip("\n"), b.rstrip("\n")) for a, b in zip(s, t) if a.strip() and b.strip()]

    train_src, train_tgt = [], []
    for s, t in pairs(paths.train):
        a, b = sp.encode(s), sp.encode(t)
        longest, shortest = max(len(a), len(b)), max(min(len(a), len(b)), 1)
        if longest <= limits.max_len and longest <= limits.max_ratio * shortest:
            train_src.append(a)
            train_tgt.append(b)
    valid = [(sp.encode(s)[: limits.truncate], sp.encode(t)[: limits.truncate]) for s, t in pairs(paths.valid)]
    return train_src, train_tgt, [s for s, _ in valid], [t for _, t in valid]


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[CorpusPaths, Path]:
    paths = write_corpus(tmp_path / "corpus", 1200)
    cfg = replace(load_config("tiny").data, vocab_size=60)
    load_or_train_tokenizer(cfg, paths.train, tmp_path / "sp.model", seed=1)
    return paths, tmp_path / "sp.model"


LIMITS = PairLimits(max_len=40, max_ratio=2.0, truncate=30)


def test_arrays_hold_the_encoded_filtered_pairs(corpus, tmp_path: Path, caplog) -> None:
    paths, model = corpus
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        data = prepare_corpus(paths, model, 60, tmp_path / "prepared", LIMITS)
    expected = reference(paths, model, LIMITS)
    assert data.train_src.tolist() == expected[0] and data.train_tgt.tolist() == expected[1]
    assert data.valid_src.tolist() == expected[2] and data.valid_tgt.tolist() == expected[3]
    assert isinstance(data.train_src.ids, np.memmap) and data.train_src.ids.dtype == np.uint16
    assert data.valid is not None and len(data.valid.src) == len(expected[2])
    assert "skipped 24 pair(s) with an empty side" in caplog.text  # lines 8, 58, ... 1158
    assert f"dropped {data.filtered} training pair(s)" in caplog.text and data.filtered > 0
    assert "1 line(s) longer than 30 subwords" in caplog.text


def test_workers_and_chunks_give_the_same_bytes(corpus, tmp_path: Path, monkeypatch) -> None:
    paths, model = corpus
    prepare_corpus(paths, model, 60, tmp_path / "one", LIMITS, workers=1)
    monkeypatch.setattr(prep, "CHUNK_LINES", 97)  # many chunks, boundaries mid-corpus
    monkeypatch.setattr(prep, "PARALLEL_FROM", 0)
    prepare_corpus(paths, model, 60, tmp_path / "two", LIMITS, workers=2)
    for name in ("train.src.ids", "train.tgt.ids", "train.src.offsets.npy", "valid.tgt.ids"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_bad_utf8_names_the_line_even_from_a_worker(corpus, tmp_path: Path, monkeypatch) -> None:
    paths, model = corpus
    lines = paths.train[1].read_bytes().split(b"\n")
    lines[1000] = b"caf\xe9"
    paths.train[1].write_bytes(b"\n".join(lines))
    monkeypatch.setattr(prep, "CHUNK_LINES", 300)
    monkeypatch.setattr(prep, "PARALLEL_FROM", 0)
    with pytest.raises(CorpusError, match=r"train\.tgt, line 1001: not valid UTF-8"):
        prepare_corpus(paths, model, 60, tmp_path / "prepared", LIMITS, workers=2)
    assert not (tmp_path / "prepared" / "manifest.json").exists()
    assert not [p for p in (tmp_path / "prepared").iterdir() if p.name.startswith(".")]


def test_gzip_corpus_and_line_count_mismatch(tmp_path: Path) -> None:
    paths = write_corpus(tmp_path / "c", 300, gz=True)
    load_or_train_tokenizer(replace(load_config("tiny").data, vocab_size=60), paths.train, tmp_path / "sp.model", 1)
    data = prepare_corpus(paths, tmp_path / "sp.model", 60, tmp_path / "p", LIMITS)
    assert data.train_src.tolist() == reference(paths, tmp_path / "sp.model", LIMITS)[0]
    paths.train[1].write_bytes(gzip.compress(b"one\ntwo\n"))
    with pytest.raises(CorpusError, match=r"train\.src\.gz has 300 lines but .*train\.tgt\.gz has 2"):
        prepare_corpus(paths, tmp_path / "sp.model", 60, tmp_path / "p", LIMITS)


def test_unchanged_inputs_are_mapped_not_prepared_again(corpus, tmp_path: Path) -> None:
    paths, model = corpus
    prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS)
    manifest = tmp_path / "p" / "manifest.json"
    before = manifest.stat().st_mtime_ns
    os.utime(paths.train[0])  # touched, same content: still the same corpus
    prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS, may_rebuild=False)
    assert manifest.stat().st_mtime_ns == before


def test_a_changed_corpus_is_prepared_again_or_refused_once_training_started(corpus, tmp_path: Path) -> None:
    paths, model = corpus
    prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS)
    with open(paths.train[0], "r+b") as handle:  # same size, other content
        handle.write(b"X")
    with pytest.raises(UserError, match=r"train\.src differs from the file it was prepared from.*new --run"):
        prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS, may_rebuild=False)
    data = prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS)
    assert data.train_src.tolist() == reference(paths, model, LIMITS)[0]
    other = replace(LIMITS, max_len=10)  # other settings: prepared again too
    assert prepare_corpus(paths, model, 60, tmp_path / "p", other).filtered > data.filtered


def test_vocabulary_sample_is_deterministic_and_all_of_a_small_corpus(corpus, tmp_path: Path) -> None:
    paths, model = corpus
    src = [line for line in paths.train[0].read_text().splitlines()]
    tgt = [line for line in paths.train[1].read_text().splitlines()]
    keep = [i for i in range(len(src)) if src[i].strip() and tgt[i].strip()]
    whole = SentencePieceTokenizer.train([src[i] for i in keep] + [tgt[i] for i in keep], tmp_path / "whole.model", 60)
    assert pieces(SentencePieceTokenizer.load(model)) == pieces(whole)
    cfg = replace(load_config("tiny").data, vocab_size=60, vocab_sample=40)  # 20 of 1176 pairs
    trained = [load_or_train_tokenizer(cfg, paths.train, tmp_path / f"{seed}{n}.model", seed)
               for seed, n in ((3, "a"), (3, "b"), (4, "c"))]
    assert pieces(trained[0]) == pieces(trained[1]) != pieces(trained[2])
    assert pieces(trained[0]) != pieces(whole)


def pieces(tokenizer: SentencePieceTokenizer) -> list[tuple[str, float]]:
    return [(tokenizer.sp.IdToPiece(i), tokenizer.sp.GetScore(i)) for i in range(len(tokenizer))]


def test_manifest_records_counts_and_sources(corpus, tmp_path: Path) -> None:
    paths, model = corpus
    data = prepare_corpus(paths, model, 60, tmp_path / "p", LIMITS)
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    train = manifest["counts"]["train"]
    assert train["lines"] == 1200 and train["skipped"] == 24
    assert train["pairs"] == len(data.train_src) == 1200 - 24 - data.filtered
    assert train["src_tokens"] == sum(map(len, data.train_src.tolist()))
    assert manifest["files"]["train_src"]["path"] == str(paths.train[0].resolve())


def test_ids_are_uint32_when_the_vocabulary_does_not_fit_uint16(corpus, tmp_path: Path) -> None:
    paths, model = corpus
    small = prepare_corpus(paths, model, 60, tmp_path / "small", LIMITS)
    large = prepare_corpus(paths, model, 70_000, tmp_path / "large", LIMITS)
    assert small.train_src.ids.dtype == np.uint16 and large.train_src.ids.dtype == np.uint32
    assert large.train_src.tolist() == small.train_src.tolist()
    assert (tmp_path / "large" / "train.src.ids").stat().st_size == 2 * (tmp_path / "small" / "train.src.ids").stat().st_size
