"""What the rest of the package needs of a tokenizer, and what its implementations share:
the sentencepiece loader, and `OneVocabulary` for those whose source and target ids are
one vocabulary.

Five classes follow the `Tokenizer` protocol: SentencePieceTokenizer (the joint vocabulary
this package trains, data/tokenizers/sentencepiece.py), SeparateTokenizer (separate source
and target vocabularies, data/tokenizers/separate.py), MarianTokenizer (an imported
OPUS-MT vocabulary, data/tokenizers/marian.py), ByteLevelBPETokenizer (an imported GPT-2's
byte-level BPE, data/tokenizers/gpt2.py) and WordVocabTokenizer (the word vocabularies of an
imported Annotated Transformer, data/tokenizers/word_vocab.py). `frame_source` says what
the encoder reads for a sentence: its ids then eos (`EosFramed`), or the tokenizer's own
frame (the study notes' <sos> ... <eos>). data/tokenizers/registry.py picks one from a run's
files. No implementation imports that registry, and this module imports none of them, so
they import without a cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

import sentencepiece as spm

from transformer_mt.common.errors import UserError


class Tokenizer(Protocol):
    """Text <-> subword ids with the fixed special ids of common/specials.py.

    The class-level part says which files a tokenizer is made of, so that a run's
    tokenizer can be found, copied and fingerprinted before it is loaded."""

    file_name: ClassVar[str]  # the file that names this tokenizer in a run folder

    @classmethod
    def files(cls, path: Path) -> list[Path]:
        """Every file of the tokenizer whose naming file is `path`, `path` first."""
        ...

    @classmethod
    def encoding_files(cls, path: Path) -> list[Path]:
        """The files its ids depend on, `path` first (what prepared data is checked against)."""
        ...

    @classmethod
    def from_file(cls, path: Path) -> Tokenizer:
        """The tokenizer whose naming file is `path`."""
        ...

    def __len__(self) -> int:
        ...

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Source sentences -> ids (no bos/eos: batching adds them)."""
        ...

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target sentences -> ids (no bos/eos)."""
        ...

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Output ids -> sentences, the special ids dropped."""
        ...

    def pieces(self, line: str) -> list[str]:
        """The source pieces of one sentence, as the model sees them."""
        ...

    def id_to_piece(self, ids: list[int]) -> list[str]:
        """The pieces of output (target) ids."""
        ...

    def source_id_to_piece(self, ids: list[int]) -> list[str]:
        """The pieces of source ids (the encoder's; with one vocabulary, as id_to_piece)."""
        ...

    @property
    def source_size(self) -> int:
        """The number of source ids, model.src_vocab_size (len() counts the target's)."""
        ...

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece; UNK_ID for a piece outside the vocabulary."""
        ...

    def frame_source(self, ids: list, eos: Any, limit: int) -> list:
        """The encoder's whole input for `encode`'s ids of one sentence (or their pieces, `eos`
        then the end's piece), at most `limit` + 1 positions."""
        ...


class OneVocabulary:
    """For a tokenizer whose source and target ids are one vocabulary: the source side
    answers as the target side does."""

    def source_id_to_piece(self, ids: list[int]) -> list[str]:
        return self.id_to_piece(ids)

    @property
    def source_size(self) -> int:
        return len(self)


class EosFramed:
    """For a tokenizer whose sources the encoder reads as their ids, cut to `limit`, then eos."""

    def frame_source(self, ids: list, eos: Any, limit: int) -> list:
        return ids[:limit] + [eos]


class OneFile:
    """For a tokenizer kept whole in its naming file: the only file it is made of, and the
    only one its ids depend on."""

    @classmethod
    def files(cls, path: Path) -> list[Path]:
        return [path]

    @classmethod
    def encoding_files(cls, path: Path) -> list[Path]:
        return [path]


def load_sentencepiece(path: Path, if_missing: str) -> spm.SentencePieceProcessor:
    """A sentencepiece model from `path`; a missing or foreign file is one UserError line
    (`if_missing` says what to do about a missing one)."""
    if not path.is_file():
        raise UserError(f"{path}: missing; {if_missing}")
    processor = spm.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError) as err:
        raise UserError(f"{path}: not a sentencepiece model ({err})") from None
    return processor
