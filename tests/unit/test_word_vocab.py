"""data.vocab_type: word, checked against whitespace splitting: the vocabulary is the most
frequent words of the training text (counted here, independently), every other word is
<unk> (id 1, not padding), and decoding joins the words with single spaces. And the study
notes' handling of unknown words (decode.unknown_words: pad), checked against their
translate procedure written out here: the padding id, hidden by the source mask."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from transformer_mt.common.config import ConfigError, DataConfig, load_config
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import PAD_ID, UNK_ID
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


def test_a_large_enough_size_keeps_every_training_word_of_each_side(multi30k: Path, tmp_path: Path) -> None:
    """The notes' vocabularies: every word of the first 5,000 training pairs, one per side
    (data.joint_vocab: false), so no training word is unknown; data.vocab_size only has to
    exceed the count."""
    import gzip

    cfg = DataConfig(vocab_type="word", joint_vocab=False, vocab_size=30000, train_pairs=5000)
    pair = (multi30k / "train.de.gz", multi30k / "train.en.gz")
    tokenizer = load_or_train_tokenizer(cfg, pair, tmp_path / "source.model", seed=1)
    for side, vocabulary in ((pair[0], tokenizer.source), (pair[1], tokenizer.target)):
        with gzip.open(side, "rt", encoding="utf-8") as handle:
            lines = [next(handle) for _ in range(5000)]
        words = {word for line in lines for word in line.split()}
        kept = {piece.removeprefix("\u2581") for piece in vocabulary.id_to_piece(list(range(4, len(vocabulary))))}
        assert kept == words and len(vocabulary) == 4 + len(words)


# ---- decode.unknown_words: pad (the notes' translate: an unknown word is the padding id) --------
def notes_translate(model, words: SentencePieceTokenizer, sentence: str, max_len: int) -> list[int]:
    """The study notes' translate written out, as the reference: each source word's id, the
    padding id for an unknown one, eos; the source mask (src != pad); greedy decoding of the
    whole prefix at every step (pad and bos never chosen, as the translator bans them), up
    to max_len tokens or eos. Returns the output ids without eos."""
    from transformer_mt.common.specials import BOS_ID, EOS_ID

    vocabulary = {piece: i for i, piece in enumerate(words.id_to_piece(list(range(len(words)))))}
    src = torch.tensor([[vocabulary.get("\u2581" + w, PAD_ID) for w in sentence.split()] + [EOS_ID]])
    src_mask = (src != PAD_ID)[:, None, None, :]
    out = [BOS_ID]
    with torch.no_grad():
        for _ in range(max_len):
            log_probs = model.generator(model(src, torch.tensor([out]), src_mask))[0, -1]
            log_probs[[PAD_ID, BOS_ID]] = float("-inf")
            out.append(int(log_probs.argmax()))
            if out[-1] == EOS_ID:
                return out[1:-1]
    return out[1:]


@pytest.fixture(scope="module")
def untrained(words: SentencePieceTokenizer):
    """A random model over the word vocabulary: any fixed function of the source will do."""
    from transformer_mt.common.config import ModelConfig
    from transformer_mt.model.transformer import build_model

    torch.manual_seed(3)
    return build_model(ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, init="pytorch",
                                   src_vocab_size=len(words), tgt_vocab_size=len(words))).eval()


def translator_of(model, words: SentencePieceTokenizer, unknown_words: str):
    from transformer_mt.common.config import DecodeConfig
    from transformer_mt.inference.translator import Translator

    settings = DecodeConfig(beam=1, max_len_a=0, max_len_b=7, unknown_words=unknown_words)
    return Translator(model, words, settings, torch.device("cpu"))


def test_pad_translates_as_the_notes_translate_does(words: SentencePieceTokenizer, untrained) -> None:
    """With decode.unknown_words: pad each sentence, alone or batched beside others of
    other lengths, gives the ids of the notes' own procedure; a sentence whose unknown
    word is another unknown word translates the same (the word is hidden, not read)."""
    lines = ["the cat. zebra sat on the mat", "zebra über a", "the dog, ran", "giraffe zebra"]
    pad = translator_of(untrained, words, "pad")
    found = [h[0].ids for h in pad.search(lines)]
    assert found == [notes_translate(untrained, words, line, 8) for line in lines]
    assert [h[0].ids for h in pad.search(["the cat. giraffe sat on the mat"])] == found[:1]
    assert any(found)  # not every output empty: the comparison compares something


def test_pad_hides_the_unknown_word_from_every_attention_and_unk_does_not(words: SentencePieceTokenizer,
                                                                          untrained) -> None:
    sentence = "the cat. zebra sat"  # "zebra" (position 2) is not in the vocabulary
    assert words.encode([sentence])[0][2] == UNK_ID
    masked = translator_of(untrained, words, "pad").attention(sentence)
    for kind in ("encoder", "cross"):
        columns = masked.weights(kind)[..., 2]  # (L, H, rows): every query's weight on the unknown word
        assert bool((columns == 0).all()), kind
        assert torch.allclose(masked.weights(kind).sum(-1), torch.ones(()))
    read = translator_of(untrained, words, "unk").attention(sentence)
    assert bool((read.weights("encoder")[..., 2] > 0).all()) and bool((read.weights("cross")[..., 2] > 0).all())


def test_the_config_takes_unknown_words_unk_or_pad() -> None:
    assert load_config("tiny", []).decode.unknown_words == "unk"
    assert load_config("tiny", ["--decode.unknown_words=pad"]).decode.unknown_words == "pad"
    with pytest.raises(ConfigError, match=r"^--decode.unknown_words=mask: must be one of unk, pad$"):
        load_config("tiny", ["--decode.unknown_words=mask"])
