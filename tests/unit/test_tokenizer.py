"""The joint sentencepiece vocabulary: fixed special ids, deterministic, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_mt.data.toy_corpora import numbers_corpus
from transformer_mt.common.errors import UserError

TEXT = [line for pair in numbers_corpus(300, seed=2)["train"] for line in pair]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(TEXT, tmp_path_factory.mktemp("sp") / "tokenizer.model", vocab_size=120)


def test_special_ids_are_fixed(tokenizer: SentencePieceTokenizer) -> None:
    assert tokenizer.id_to_piece([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert all(min(ids) > EOS_ID for ids in tokenizer.encode(TEXT[:50]))


def test_encode_decode_round_trip(tokenizer: SentencePieceTokenizer) -> None:
    lines = ["three hundred and twenty-one", "dreihunderteinundzwanzig"]
    assert tokenizer.decode(tokenizer.encode(lines)) == lines
    assert "".join(tokenizer.pieces(lines[0])).replace("\u2581", " ").strip() == lines[0]


def test_training_is_deterministic(tokenizer: SentencePieceTokenizer, tmp_path: Path) -> None:
    again = SentencePieceTokenizer.train(TEXT, tmp_path / "again.model", vocab_size=120)
    assert len(again) == len(tokenizer)
    assert again.id_to_piece(list(range(len(again)))) == tokenizer.id_to_piece(list(range(len(tokenizer))))
    assert not list(tmp_path.glob(".spm-*")), "temporary training folder left behind"


def test_a_file_that_is_not_a_model_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.model"
    bad.write_text("not a model")
    with pytest.raises(UserError, match=f"{bad}: not a sentencepiece model"):
        SentencePieceTokenizer.load(bad)
    with pytest.raises(UserError, match="missing"):
        SentencePieceTokenizer.load(tmp_path / "nope.model")


def test_one_vocabulary_encodes_both_sides_and_maps_pieces(tokenizer: SentencePieceTokenizer, tmp_path: Path) -> None:
    from transformer_mt.data.tokenizers.registry import load_tokenizer, tokenizer_files

    lines = ["three hundred and twenty-one", "dreihunderteinundzwanzig"]
    assert tokenizer.encode_target(lines) == tokenizer.encode(lines)
    pieces = tokenizer.pieces(lines[0])
    assert [tokenizer.piece_to_id(p) for p in pieces] == tokenizer.encode(lines[:1])[0]
    assert tokenizer.piece_to_id("no-such-piece") == UNK_ID and tokenizer.piece_to_id("</s>") == EOS_ID
    path = tmp_path / "tokenizer.model"
    path.write_bytes(tokenizer.sp.serialized_model_proto())
    assert load_tokenizer(path).encode(lines) == tokenizer.encode(lines)
    assert tokenizer_files(path) == [path, tmp_path / "tokenizer.vocab"]
    assert [p.name for p in tokenizer_files(tmp_path / "vocab.json")] == ["vocab.json", "source.spm", "target.spm"]
