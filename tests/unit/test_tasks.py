"""Built-in generated tasks."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.data.corpus import read_parallel
from transformer_mt.data.tasks import copy_task, number_pair, numbers_task, write_task


def test_number_phrases() -> None:
    assert number_pair(321) == ("three hundred and twenty-one", "dreihunderteinundzwanzig")
    assert number_pair(42007) == ("forty-two thousand and seven", "zweiundvierzigtausendsieben")


def test_numbers_splits_are_disjoint_and_seeded() -> None:
    splits = numbers_task(2000, seed=3)
    sources = {name: {src for src, _ in pairs} for name, pairs in splits.items()}
    assert len(splits["train"]) == 2000 and len(splits["valid"]) == len(splits["test"]) == 100
    assert not sources["train"] & sources["test"] and not sources["train"] & sources["valid"]
    assert not sources["valid"] & sources["test"]
    assert numbers_task(2000, seed=3) == splits and numbers_task(2000, seed=4) != splits


def test_copy_targets_equal_sources() -> None:
    for pairs in copy_task(100).values():
        assert all(src == tgt and 1 <= len(src.split()) <= 10 for src, tgt in pairs)


def test_written_files_read_back_as_a_corpus(tmp_path: Path) -> None:
    paths = write_task("numbers", tmp_path, 200)
    corpus = read_parallel(*paths["train"])
    assert len(corpus) == 200 and corpus.skipped_empty == 0
    assert not list(tmp_path.glob("*.tmp"))


def test_small_numbers_are_trained_and_never_held_out() -> None:
    splits = numbers_task(8000, seed=5)
    train = [src for src, _ in splits["train"]]
    assert len(train) == 8000 and train.count("seven") == 2 and train.count("ninety-nine") == 2
    held = {src for name in ("valid", "test") for src, _ in splits[name]}
    assert not held & {src for src, _ in splits["train"]}
    assert any(" thousand and " in src for src in train), "zeros inside numbers are part of the task"
