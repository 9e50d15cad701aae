"""Separate source and target vocabularies (data.joint_vocab: false): two sentencepiece
models trained apart, source.model on the source side of the training text and
target.model on the target side, each with the fixed special ids of common/specials.py.

The source model gives the ids the encoder reads (encode, pieces); the target model
gives the ids the decoder reads and the generator emits (encode_target, decode,
id_to_piece, piece_to_id, len). The two id spaces are unrelated, so the model needs two
embedding tables (model.share_vocab: false): model.src_vocab_size is the source model's
size, model.tgt_vocab_size the target's. A run stores source.model and target.model (each
with its readable .vocab); source.model names the tokenizer (data/tokenizers/registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from transformer_mt.data.tokenizers.protocol import EosFramed
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer

SOURCE_MODEL, TARGET_MODEL = "source.model", "target.model"


class SeparateTokenizer(EosFramed):
    """A source and a target SentencePieceTokenizer behind the `Tokenizer` protocol."""

    file_name = SOURCE_MODEL

    def __init__(self, source: SentencePieceTokenizer, target: SentencePieceTokenizer) -> None:
        self.source, self.target = source, target

    @classmethod
    def files(cls, path: Path) -> list[Path]:
        """source.model (`path`), target.model beside it, and their .vocab files."""
        target = path.parent / TARGET_MODEL
        return [path, target, path.with_suffix(".vocab"), target.with_suffix(".vocab")]

    @classmethod
    def encoding_files(cls, path: Path) -> list[Path]:
        """Both models: the source ids come from one, the target ids from the other."""
        return [path, path.parent / TARGET_MODEL]

    @classmethod
    def from_file(cls, path: Path) -> "SeparateTokenizer":
        return cls(SentencePieceTokenizer.load(path), SentencePieceTokenizer.load(path.parent / TARGET_MODEL))

    @classmethod
    def train(cls, source: Iterable[str], target: Iterable[str], path: Path, vocab_size: int, model_type: str,
              seed: int) -> "SeparateTokenizer":
        """Train the target model, then the source model at `path` (source.model last: it
        names the tokenizer, so a run interrupted in between has none and trains again).
        Each side has up to `vocab_size` pieces."""
        target_model = SentencePieceTokenizer.train(target, path.parent / TARGET_MODEL, vocab_size, model_type, seed)
        return cls(SentencePieceTokenizer.train(source, path, vocab_size, model_type, seed), target_model)

    @property
    def source_size(self) -> int:
        """The number of source ids (model.src_vocab_size)."""
        return len(self.source)

    def __len__(self) -> int:
        """The number of target ids: what the generator scores (model.tgt_vocab_size)."""
        return len(self.target)

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Source sentences -> source ids (no bos/eos: batching adds them)."""
        return self.source.encode(lines)

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target sentences -> target ids (no bos/eos)."""
        return self.target.encode(lines)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Target ids (specials already removed) -> sentences."""
        return self.target.decode(ids)

    def pieces(self, line: str) -> list[str]:
        """The source pieces of one sentence, as the encoder sees them."""
        return self.source.pieces(line)

    def id_to_piece(self, ids: list[int]) -> list[str]:
        """The target pieces of target ids."""
        return self.target.id_to_piece(ids)

    def source_id_to_piece(self, ids: list[int]) -> list[str]:
        """The source pieces of source ids."""
        return self.source.id_to_piece(ids)

    def piece_to_id(self, piece: str) -> int:
        """The target id of a piece; UNK_ID for a piece outside the target vocabulary."""
        return self.target.piece_to_id(piece)
