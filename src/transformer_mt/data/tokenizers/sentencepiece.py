"""One joint sentencepiece vocabulary for source and target (paper section 5.1: "a
shared source-target vocabulary"), trained with the fixed special ids of common/specials.py:

    pad 0 (<pad>)    unk 1 (<unk>)    bos 2 (<s>)    eos 3 (</s>)

A run stores it as tokenizer.model, with the readable tokenizer.vocab beside it.

Besides subwords (bpe, unigram) it trains word vocabularies (data.vocab_type: word):
sentencepiece's `word` model counts the space-separated words of the training text (no
pre-tokenisation: "cat." is one word) and keeps the most frequent ones; every other word
is <unk> (id 1). Words are kept as written (no Unicode normalisation) and of any length
(sentencepiece's default drops pieces over 16 characters). sentencepiece's own encoding
merges a run of unknown words into one <unk>, so a word model is applied here instead:
a sentence is its str.split() words, one id each, and decoding joins the words (<unk>
for an unknown one) with single spaces."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_mt.data.tokenizers.protocol import EosFramed, OneVocabulary, load_sentencepiece
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_path

WORD_PREFIX = "\u2581"  # sentencepiece marks the start of a word, so a word model's pieces are '\u2581word'


class SentencePieceTokenizer(OneVocabulary, EosFramed):
    """Text <-> subword ids with a trained sentencepiece model (the `Tokenizer` protocol)."""

    file_name = "tokenizer.model"  # in a run folder; elsewhere the model may have any name

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        self.sp = processor
        self.words = is_word_model(processor)  # applied word by word (see the module docstring)

    @classmethod
    def files(cls, path: Path) -> list[Path]:
        """The model and its .vocab beside it."""
        return [path, path.with_suffix(".vocab")]

    @classmethod
    def encoding_files(cls, path: Path) -> list[Path]:
        """The model alone: the .vocab is a readable copy of what it holds."""
        return [path]

    @classmethod
    def from_file(cls, path: Path) -> "SentencePieceTokenizer":
        return cls.load(path)

    @classmethod
    def load(cls, path: str | Path) -> "SentencePieceTokenizer":
        path = Path(path)
        processor = load_sentencepiece(path, "train a vocabulary with `transformer-mt vocab` or `train`")
        if processor.pad_id() != PAD_ID or processor.eos_id() != EOS_ID or processor.bos_id() != BOS_ID:
            raise UserError(f"{path}: special ids differ from pad 0, unk 1, bos 2, eos 3; "
                            "train the vocabulary with transformer-mt")
        return cls(processor)

    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        path: str | Path,
        vocab_size: int = 8000,
        model_type: str = "bpe",
        seed: int = 1,
    ) -> "SentencePieceTokenizer":
        """Train on `sentences` (both languages for a joint vocabulary) and write
        `path` (plus its `.vocab` beside it) atomically. The same sentences and settings
        give the same model. `vocab_size` is an upper bound: a tiny corpus may need fewer."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        spm.set_random_generator_seed(seed)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".spm-") as tmp:
            prefix = os.path.join(tmp, "sp")
            try:
                _train_sentencepiece(sentences, prefix, vocab_size, model_type)
            except RuntimeError as err:
                raise UserError(f"{path}: sentencepiece could not train a vocabulary on this text "
                                f"({str(err).strip().splitlines()[-1]})") from None
            for suffix, final in ((".vocab", path.with_suffix(".vocab")), (".model", path)):
                with atomic_path(final) as out:
                    os.replace(prefix + suffix, out)
        return cls.load(path)

    def __len__(self) -> int:
        return self.sp.GetPieceSize()

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Sentences -> subword ids (no bos/eos: batching adds them); a word model's
        unknown words are one <unk> each."""
        if self.words:
            piece_to_id = self.sp.PieceToId
            return [[piece_to_id(WORD_PREFIX + word) for word in line.split()] for line in lines]
        return self.sp.Encode(list(lines), out_type=int)

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target-side sentences -> ids: the same as `encode` with one joint vocabulary
        (an imported Marian tokenizer cuts the target with its own model)."""
        return self.encode(lines)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Subword ids (specials already removed) -> sentences."""
        if self.words:
            return [" ".join(piece.removeprefix(WORD_PREFIX) for piece in self.id_to_piece(seq)) for seq in ids]
        return self.sp.Decode([list(seq) for seq in ids])

    def pieces(self, line: str) -> list[str]:
        """The subword pieces of one sentence, as the model sees them."""
        if self.words:
            return [WORD_PREFIX + word for word in line.split()]
        return self.sp.EncodeAsPieces(line)

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.sp.IdToPiece(i) for i in ids]

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece; UNK_ID for a piece outside the vocabulary."""
        return self.sp.PieceToId(piece)


def is_word_model(processor: spm.SentencePieceProcessor) -> bool:
    """Whether `processor` is a word vocabulary (sentencepiece's `word` model type), as the
    model file itself records it (sentencepiece's API does not expose the type)."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(processor.serialized_model_proto())
    return proto.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.WORD


# A word vocabulary: words as written, of any length (512 is sentencepiece's upper bound).
WORD_OPTIONS = dict(normalization_rule_name="identity", max_sentencepiece_length=512)


def _train_sentencepiece(sentences: Iterable[str], prefix: str, vocab_size: int, model_type: str) -> None:
    """sentencepiece training with the special ids every model of this package relies on
    (and, for a word vocabulary, WORD_OPTIONS)."""
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences),
        model_prefix=prefix,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        split_by_number=False,  # 'w1', '1990' may become one piece
        hard_vocab_limit=False,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        shuffle_input_sentence=False,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
        **(WORD_OPTIONS if model_type == "word" else {}),
    )
