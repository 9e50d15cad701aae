"""Word vocabularies as the study notes and the Annotated Transformer's users build them:
a JSON object word -> id for each side (what `json.dump(dataset.src_vocab, f)` writes),
text cut at white space, each word one id. An imported Annotated-Transformer checkpoint
(interop/annotated.py) reads its text through this tokenizer.

Their ids are `<pad>` 0, `<sos>` 1, `<eos>` 2, then the words in order of first appearance
(`build_vocab`), usually with no `<unk>`. This package fixes pad 0, unk 1, bos 2, eos 3
(common/specials.py), so the rows are reordered, as for an imported Marian vocabulary:

    ours:    0 (pad)   1 (unk)                       2 (bos)   3 (eos)   4, 5, ...
    theirs:  <pad>     <unk>, or a row of our own    <sos>     <eos>     the other ids, in order

A vocabulary without `<unk>` takes V + 1 rows; the importer gives the extra one the pad
row's embedding and an output bias of NEVER_LOGIT, so the model never emits it and its
distribution over the other V outputs is theirs.

Their framing, kept exactly: a source is `<sos>` words `<eos>` cut to its first `max_len`
ids (a source that long loses its `<eos>`), a target `<sos>` words, ended by `<eos>`.
`encode` gives `<sos>` and the words (batching and the translator add the `<eos>`),
`frame_source` the whole cut source. A word outside the vocabulary is `<unk>` on the
source side (decode.unknown_words: pad then hides it as their `vocab.get(t, 0)` does) and,
where the target vocabulary has no `<unk>`, padding on the target side, which the loss
skips, as their dataset reads it. The file, word_vocab.json, keeps both vocabularies as
they were given, their special words and max_len."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID
from transformer_mt.data.tokenizers.protocol import OneFile
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import read_json_file

WORD_VOCAB = "word_vocab.json"
PAD_WORD, UNK_WORD = "<pad>", "<unk>"
BOS_WORDS, EOS_WORDS = ("<sos>", "<bos>", "<s>"), ("<eos>", "</s>")  # the names such vocabularies use


def build_vocabulary(sentences: Iterable[str]) -> dict[str, int]:
    """The vocabulary the study notes' `build_vocab` makes of `sentences`: `<pad>` 0, `<sos>`
    1, `<eos>` 2, then every white-space-separated word in order of first appearance."""
    vocab = {PAD_WORD: 0, "<sos>": 1, "<eos>": 2}
    for sentence in sentences:
        for word in sentence.split():
            vocab.setdefault(word, len(vocab))
    return vocab


def check_vocabulary(vocab: Any, where: str) -> dict[str, int]:
    """A word -> id object whose ids are 0..V-1, each once, with `<pad>`, a start word
    (`<sos>`, `<bos>` or `<s>`) and an end word (`<eos>` or `</s>`); else one UserError line."""
    if not isinstance(vocab, dict) or not all(isinstance(w, str) and isinstance(i, int) and not isinstance(i, bool)
                                              for w, i in vocab.items()):
        raise UserError(f"{where}: expected a JSON object of word -> integer id (what json.dump(vocab, f) writes)")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError(f"{where}: the ids are not 0..{len(vocab) - 1}, each once")
    for names in ((PAD_WORD,), BOS_WORDS, EOS_WORDS):
        if not any(name in vocab for name in names):
            raise UserError(f"{where}: has no {' or '.join(names)} (a vocabulary of the notes' build_vocab starts "
                            '{"<pad>": 0, "<sos>": 1, "<eos>": 2})')
    return vocab


def special_words(vocab: dict[str, int]) -> dict[str, str | None]:
    """The words of pad, bos, eos and unk (None where the vocabulary has no <unk>)."""
    return {"pad": PAD_WORD, "bos": next(w for w in BOS_WORDS if w in vocab),
            "eos": next(w for w in EOS_WORDS if w in vocab), "unk": UNK_WORD if UNK_WORD in vocab else None}


def our_rows(vocab: dict[str, int]) -> list[int | None]:
    """Their id behind each of our rows (None: the <unk> row of our own; see the module
    docstring)."""
    words = special_words(vocab)
    specials = {PAD_ID: vocab[words["pad"]], UNK_ID: vocab[words["unk"]] if words["unk"] else None,
                BOS_ID: vocab[words["bos"]], EOS_ID: vocab[words["eos"]]}
    taken = {i for i in specials.values() if i is not None}
    return [specials[i] for i in range(len(specials))] + [i for i in range(len(vocab)) if i not in taken]


class Side:
    """One side's vocabulary in our row order: words <-> our ids."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        by_id = {i: word for word, i in vocab.items()}
        self.rows = our_rows(vocab)
        self.words = [UNK_WORD if theirs is None else by_id[theirs] for theirs in self.rows]
        self.ids = {word: ours for ours, word in enumerate(self.words)}
        self.has_unk = special_words(vocab)["unk"] is not None

    def encode(self, line: str, unknown: int) -> list[int]:
        """The ids of the white-space-separated words of `line` (str.split, as theirs);
        `unknown` for a word outside the vocabulary."""
        return [self.ids.get(word, unknown) for word in line.split()]


class WordVocabTokenizer(OneFile):
    """Text <-> ids with a source and a target word vocabulary (the `Tokenizer` protocol of
    data/tokenizers/protocol.py): separate id spaces, so the model has two embeddings."""

    file_name = WORD_VOCAB

    def __init__(self, source: dict[str, int], target: dict[str, int], max_len: int) -> None:
        self.source, self.target = Side(source), Side(target)
        self.max_len = max_len

    @classmethod
    def from_file(cls, path: Path) -> "WordVocabTokenizer":
        found = read_json_file(path, "the run's word vocabularies")
        if not isinstance(found, dict) or not isinstance(found.get("max_len"), int) or found["max_len"] < 2:
            raise UserError(f"{path}: expected an object with source, target and max_len (at least 2)")
        return cls(check_vocabulary(found.get("source"), f"{path} (source)"),
                   check_vocabulary(found.get("target"), f"{path} (target)"), found["max_len"])

    def to_json(self) -> str:
        """The text of word_vocab.json: both vocabularies as given, and max_len."""
        return json.dumps({"source": self.source.vocab, "target": self.target.vocab, "max_len": self.max_len},
                          ensure_ascii=False, indent=0) + "\n"

    @property
    def source_size(self) -> int:
        """The number of source ids (model.src_vocab_size)."""
        return len(self.source.words)

    def __len__(self) -> int:
        """The number of target ids (model.tgt_vocab_size)."""
        return len(self.target.words)

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Source sentences -> `<sos>` and the words' ids (the eos comes with the framing)."""
        return [[BOS_ID] + self.source.encode(line, UNK_ID) for line in lines]

    def frame_source(self, ids: list, eos: Any, limit: int) -> list:
        """The encoder's input for `encode`'s ids (or their pieces, `eos` then the end's
        piece): with `<eos>`, cut to the first max_len (their encode_sentence, without the
        padding it adds to max_len: padding is masked), within `limit` + 1 positions."""
        return (ids + [eos])[: self.max_len][: limit + 1]

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target sentences -> ids (no bos/eos); an unknown word is <unk> if the vocabulary
        has one, else padding (which the loss skips)."""
        unknown = UNK_ID if self.target.has_unk else PAD_ID
        return [self.target.encode(line, unknown) for line in lines]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Output ids -> the words joined by single spaces (their translate), specials dropped."""
        return [" ".join(self.target.words[i] for i in seq if i not in SPECIAL_IDS) for seq in ids]

    def pieces(self, line: str) -> list[str]:
        """The source words of one sentence as the encoder reads them: `<sos>` first."""
        return [self.source.words[BOS_ID], *line.split()]

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.target.words[i] for i in ids]

    def source_id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.source.words[i] for i in ids]

    def piece_to_id(self, piece: str) -> int:
        """The target id of a word; UNK_ID for a word outside the target vocabulary."""
        return self.target.ids.get(piece, UNK_ID)
