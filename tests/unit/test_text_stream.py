"""A language model's data: the token stream (each line's ids, then end-of-text), blocks
that are slices of it, a seeded order that resumes exactly and shards across processes as
translation batches do, validation that predicts every token once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from transformer_mt.data.blocks import BlockStream, validation_blocks
from transformer_mt.data.corpus import CorpusError
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import EOS_ID
from transformer_mt.data.text_stream import TextPaths, prepare_text
from transformer_mt.data.toy_corpora import is_well_formed, number_lines

LINES = ["the cat sat on the mat", "a dog", "", "the mat is red and the cat is black"] * 30


def trained(tmp_path: Path) -> tuple[Path, SentencePieceTokenizer]:
    path = tmp_path / "tokenizer.model"
    return path, SentencePieceTokenizer.train([line for line in LINES if line], path, 40, "bpe", 1)


def test_the_stream_is_each_lines_ids_then_end_of_text(tmp_path: Path) -> None:
    text = tmp_path / "train.txt"
    text.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    model, tokenizer = trained(tmp_path)
    data = prepare_text(TextPaths(text, None), model, tokenizer, tmp_path / "prepared")
    processor = spm.SentencePieceProcessor(model_file=str(model))
    expected = [token for line in LINES for token in (*processor.encode(line), EOS_ID)]
    assert np.asarray(data.train.tokens).tolist() == expected
    assert data.train.lines == len(LINES) and data.train.characters == sum(len(line) + 1 for line in LINES)
    assert data.valid is None


def test_changed_text_is_prepared_again_or_refused_in_one_line(tmp_path: Path) -> None:
    text = tmp_path / "train.txt"
    text.write_text("one two\nthree\n", encoding="utf-8")
    model, tokenizer = trained(tmp_path)
    out = tmp_path / "prepared"
    first = len(prepare_text(TextPaths(text, None), model, tokenizer, out).train)
    text.write_text("one two\nthree\nfour five six\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="no longer matches"):
        prepare_text(TextPaths(text, None), model, tokenizer, out, may_rebuild=False)
    assert len(prepare_text(TextPaths(text, None), model, tokenizer, out).train) > first


STREAM = np.arange(1000)  # a stream whose every window is recognisable by its start


def starts_of(batch) -> list[int]:
    """Where each block of a batch starts in STREAM (blocks are slices of it)."""
    found = []
    for row, target in zip(batch.inputs.tolist(), batch.targets.tolist()):
        assert target[:-1] == row[1:]  # targets are the inputs shifted by one
        assert row == list(range(row[0], row[0] + len(row))) and target[-1] == row[-1] + 1
        found.append(row[0])
    return found


def test_blocks_are_slices_of_the_stream_and_an_epoch_takes_each_once() -> None:
    stream = BlockStream(STREAM, block_size=16, blocks_per_batch=4, seed=3)
    starts = [s for _ in range(len(stream)) for s in starts_of(next(stream))]
    assert len(starts) == len(set(starts)) == len(stream) * 4
    offsets = {s % 16 for s in starts}
    assert len(offsets) == 1  # one offset per epoch
    assert len(starts) == (len(STREAM) - 1 - offsets.pop()) // 16 // 4 * 4  # every whole block, in whole batches


def test_a_restored_stream_continues_with_the_same_blocks() -> None:
    stream = BlockStream(STREAM, 16, 4, seed=5)
    for _ in range(17):  # into the second epoch
        next(stream)
    state = stream.state_dict()
    expected = [next(stream).inputs for _ in range(5)]
    restored = BlockStream(STREAM, 16, 4, seed=5)
    restored.load_state_dict(state)
    assert all((next(restored).inputs == e).all() for e in expected)


def test_two_ranks_take_the_batches_of_one_process_with_twice_the_accumulation() -> None:
    one = BlockStream(STREAM, 16, 2, seed=1, accumulate=2)
    ranks = [BlockStream(STREAM, 16, 2, seed=1, rank=r, world_size=2) for r in range(2)]
    for _ in range(10):
        assert (next(one).inputs == next(ranks[0]).inputs).all()
        assert (next(one).inputs == next(ranks[1]).inputs).all()


def test_validation_predicts_every_token_but_the_first_exactly_once() -> None:
    tokens = np.arange(103)
    targets = [t for batch in validation_blocks(tokens, 10, 3) for t in batch.targets.reshape(-1).tolist()]
    assert targets == tokens[1:].tolist()


def test_the_built_in_text_is_well_formed_and_the_check_can_fail() -> None:
    splits = number_lines(200, seed=2)
    assert all(is_well_formed(line) for lines in splits.values() for line in lines)
    assert not set(splits["train"]) & set(splits["valid"])
    assert is_well_formed("three hundred and twenty-one = 321")
    for bad in ("three hundred and twenty-one = 322", "three hundred = ", "= 3", "three = 03", "one = 1 = 1"):
        assert not is_well_formed(bad), bad
