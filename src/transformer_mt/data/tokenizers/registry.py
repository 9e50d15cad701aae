"""The one place that picks a tokenizer class from file names: loading a tokenizer,
listing its files, finding it in a run folder. Each class says its own files
(data/tokenizers/protocol.py's `Tokenizer` protocol); this module only asks them, in order."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.data.tokenizers.gpt2 import ByteLevelBPETokenizer
from transformer_mt.data.tokenizers.marian import MarianTokenizer
from transformer_mt.data.tokenizers.separate import SeparateTokenizer
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.word_vocab import WordVocabTokenizer
from transformer_mt.common.errors import UserError

# In this order a run folder is searched: a trained tokenizer.model, an imported vocab.json,
# an imported GPT-2 gpt2_tokenizer.json, then separate source.model and target.model
# (data.joint_vocab: false), then the word_vocab.json of an imported Annotated Transformer.
TOKENIZERS: tuple[type[Tokenizer], ...] = (SentencePieceTokenizer, MarianTokenizer, ByteLevelBPETokenizer,
                                           SeparateTokenizer, WordVocabTokenizer)


def tokenizer_class(path: str | Path) -> type[Tokenizer]:
    """The class of the tokenizer named by `path`: the one whose file_name it has (vocab.json
    is an imported Marian vocabulary, gpt2_tokenizer.json an imported GPT-2 one, source.model
    one of two separate vocabularies, word_vocab.json the word vocabularies of an imported
    Annotated Transformer), else a sentencepiece model of any name."""
    name = Path(path).name
    return next((kind for kind in TOKENIZERS if kind.file_name == name), SentencePieceTokenizer)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer stored at `path`: a sentencepiece tokenizer.model, the vocab.json of an
    imported Marian (OPUS-MT) vocabulary, with its source.spm and target.spm beside it, or
    the gpt2_tokenizer.json of an imported GPT-2 model."""
    path = Path(path)
    return tokenizer_class(path).from_file(path)


def tokenizer_files(path: str | Path) -> list[Path]:
    """Every file of the tokenizer stored at `path` (see `load_tokenizer`), `path` first."""
    path = Path(path)
    return tokenizer_class(path).files(path)


def encoding_files(path: str | Path) -> list[Path]:
    """The files the ids of the tokenizer stored at `path` depend on, `path` first."""
    path = Path(path)
    return tokenizer_class(path).encoding_files(path)


def find_tokenizer(folder: Path) -> Path:
    """The file that names the tokenizer of `folder`: the first of TOKENIZERS whose file
    is there; tokenizer.model (where one is trained) when none is there yet."""
    for kind in TOKENIZERS:
        if (folder / kind.file_name).is_file():
            return folder / kind.file_name
    return folder / SentencePieceTokenizer.file_name


def vocab_sizes(tokenizer: Tokenizer) -> tuple[int, int]:
    """(source, target) numbers of ids: model.src_vocab_size and model.tgt_vocab_size."""
    return tokenizer.source_size, len(tokenizer)


def require_joint(tokenizer: Tokenizer, what: str) -> None:
    """Refuse, in one line, a tokenizer with separate source and target vocabularies for
    `what` (a command that writes one vocabulary for both sides)."""
    if isinstance(tokenizer, (SeparateTokenizer, WordVocabTokenizer)):
        raise UserError(f"{what} needs one vocabulary for source and target, and this run has separate ones "
                        "(data.joint_vocab: false); train with data.joint_vocab: true to export it")
