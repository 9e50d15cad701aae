"""data.vocab_type: word, checked against whitespace splitting: the vocabulary is the most
frequent words of the training text (counted here, independently), every other word is
<unk> (id 1, not padding), and decoding joins the words with single spaces."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from transformer_mt.config import ConfigError, DataConfig, load_config
from transformer_mt.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_mt.data.specials import PAD_ID, UNK_ID
from transformer_mt.data.vocabulary import load_or_train_tokenizer

# Thirty words, each with its own count (40 down to 11), so the most frequent N are one
# set whatever order ties would take; long, accented and punctuated words included.
WORDS = ["the", "cat.", "Straßenbahnhaltestelle", "a", "über", "dog,", "sat", "on", "mat", "internationalisation",
         "and", "ran", "x", "y", "z", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"]
KEPT = 12  # words in a vocabulary of 16 (4 special ids)


def corpus(seed: int = 3) -> list[str]:
    """Sentences of 5 to 9 words, word i used 40 - i times in all."""
    tokens = [word for i, word in enumerate(WORDS) for _ in range(40 - i)]
    random.Random(seed).shuffle(tokens)
    lines, rng = [], random.Random(seed + 1)
    while tokens:
        n = rng.randint(5, 9)
        lines.append(" ".join(tokens[:n]))
        tokens = tokens[n:]
    return lines


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(corpus(), tmp_path_factory.mktemp("word") / "tokenizer.model",
                                        vocab_size=4 + KEPT, model_type="word")


def expected_vocabulary(lines: list[str], n: int) -> set[str]:
    counts = Counter(word for line in lines for word in line.split())
    return {word for word, _ in counts.most_common(n)}


def test_the_vocabulary_is_the_most_frequent_words(words: SentencePieceTokenizer) -> None:
    assert len(words) == 4 + KEPT
    pieces = words.id_to_piece(list(range(4, len(words))))
    assert {piece.removeprefix("\u2581") for piece in pieces} == expected_vocabulary(corpus(), KEPT)


def test_encoding_is_whitespace_splitting_with_unknown_words_as_unk(words: SentencePieceTokenizer) -> None:
    vocabulary = expected_vocabulary(corpus(), KEPT)
    lines = ["the cat. sat on the mat", "Straßenbahnhaltestelle   über  zebra cat", "p the dog, internationalisation ."]
    for line, ids in zip(lines, words.encode(lines)):
        expected = [word if word in vocabulary else "<unk>" for word in line.split()]
        assert [piece.removeprefix("\u2581") for piece in words.id_to_piece(ids)] == expected
        assert [i == UNK_ID for i in ids] == [word not in vocabulary for word in line.split()]
        assert PAD_ID not in ids
    assert words.encode_target(lines) == words.encode(lines)


def test_decoding_joins_words_with_single_spaces(words: SentencePieceTokenizer) -> None:
    vocabulary = expected_vocabulary(corpus(), KEPT)
    lines = ["zebra the cat. zebra zebra sat", "Straßenbahnhaltestelle über", "the unknown"]
    expected = [" ".join(w if w in vocabulary else "<unk>" for w in line.split()) for line in lines]
    assert words.decode(words.encode(lines)) == expected


def test_a_run_trains_a_word_vocabulary_from_its_config(tmp_path: Path) -> None:
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    lines = corpus()
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    cfg = DataConfig(vocab_size=4 + KEPT, vocab_type="word")
    tokenizer = load_or_train_tokenizer(cfg, (src, tgt), tmp_path / "tokenizer.model", seed=1)
    pieces = tokenizer.id_to_piece(list(range(4, len(tokenizer))))
    assert {piece.removeprefix("\u2581") for piece in pieces} == expected_vocabulary(lines + lines, KEPT)


def test_the_config_accepts_word_and_names_the_key_otherwise() -> None:
    assert load_config("tiny", ["data.vocab_type=word"]).data.vocab_type == "word"
    with pytest.raises(ConfigError, match=r"^data\.vocab_type=words: must be one of bpe, unigram, word$"):
        load_config("tiny", ["data.vocab_type=words"])
