"""The byte-level BPE tokenizer of GPT-2 (Radford et al., 2019), for an imported GPT-2 run:
text <-> GPT-2's own ids, as Hugging Face's GPT2Tokenizer (GPT2TokenizerFast) cuts and
joins text.

Byte-level BPE never meets an unknown symbol: the text's UTF-8 bytes are first mapped to
256 printable characters (a space becomes "Ġ"), the text is split into words by GPT-2's
regular expression (a word keeps its leading space: " cat" and "cat" are different
pieces), and each word is merged by the BPE merges in rank order. Decoding maps the
characters back to bytes and those to UTF-8 (an invalid byte sequence becomes U+FFFD).

The ids are GPT-2's, not this package's fixed layout (common/specials.py): GPT-2 has no pad,
unk or bos, only "<|endoftext|>" (50256 in GPT-2's vocabulary), which separates documents,
starts generation and ends it; `end_of_text_id` is its id. The run keeps the whole
tokenizer as one `tokenizers` file, gpt2_tokenizer.json (the `tokenizers` library is what
transformers' GPT2Tokenizer runs on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from transformer_mt.data.tokenizers.protocol import EosFramed, OneFile, OneVocabulary
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_write_text

GPT2_TOKENIZER_FILE = "gpt2_tokenizer.json"
END_OF_TEXT = "<|endoftext|>"
SOURCE_FILES = "a GPT-2 vocabulary is vocab.json and merges.txt, or tokenizer.json"


def _tokenizers() -> Any:
    """The `tokenizers` library (a dependency of this package), or one line saying to install it."""
    try:
        import tokenizers
    except ImportError:
        raise UserError("a GPT-2 vocabulary needs the `tokenizers` library: pip install 'tokenizers>=0.19'") from None
    return tokenizers


def read_merges(path: Path) -> list[tuple[str, str]]:
    """merges.txt: one merge per line ("a b"), after an optional "#version" line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(f"{path}: missing ({SOURCE_FILES})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot be read ({err})") from None
    merges = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise UserError(f"{path}, line {number}: expected two pieces separated by one space, got {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def read_vocab(path: Path) -> dict[str, int]:
    """vocab.json: every piece to its id, each id once."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: missing ({SOURCE_FILES})") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{path}: not a readable JSON vocabulary ({err})") from None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
        raise UserError(f"{path}: expected a JSON object of piece -> integer id")
    if len(set(vocab.values())) != len(vocab):
        raise UserError(f"{path}: an id is given to more than one piece")
    return vocab


class ByteLevelBPETokenizer(OneVocabulary, OneFile, EosFramed):
    """Text <-> GPT-2 ids (the `Tokenizer` protocol of data/tokenizers/protocol.py), over a
    `tokenizers.Tokenizer`: BPE model, ByteLevel pre-tokenizer and decoder, and
    "<|endoftext|>" as a special token. Source and target are one vocabulary, kept with the
    merges and rules in gpt2_tokenizer.json alone."""

    file_name = GPT2_TOKENIZER_FILE

    def __init__(self, backend: Any) -> None:
        """`backend`: a `tokenizers.Tokenizer` that has "<|endoftext|>"."""
        end_of_text_id = backend.token_to_id(END_OF_TEXT)
        if end_of_text_id is None:
            raise ValueError(f"a GPT-2 tokenizer needs the piece {END_OF_TEXT}")
        self.backend = backend
        self.end_of_text_id: int = end_of_text_id

    @classmethod
    def from_vocab(cls, vocab: dict[str, int], merges: list[tuple[str, str]], add_prefix_space: bool = False,
                   added: Sequence[tuple[str, bool]] = ()) -> "ByteLevelBPETokenizer":
        """The tokenizer GPT2Tokenizer builds from vocab.json and merges.txt: no unknown
        piece, no word prefix or suffix, "<|endoftext|>" special (never cut by BPE), then
        the `added` (piece, special) tokens, each kept whole; a special one is dropped
        by `decode`, as "<|endoftext|>" is."""
        tokenizers = _tokenizers()
        model = tokenizers.models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                      end_of_word_suffix="", fuse_unk=False)
        backend = tokenizers.Tokenizer(model)
        backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
        backend.decoder = tokenizers.decoders.ByteLevel()
        backend.add_special_tokens([tokenizers.AddedToken(END_OF_TEXT, special=True, normalized=False)])
        for piece, special in added:
            if special:
                backend.add_special_tokens([tokenizers.AddedToken(piece, special=True, normalized=False)])
            else:
                backend.add_tokens([tokenizers.AddedToken(piece)])
        return cls(backend)

    @classmethod
    def from_file(cls, path: Path) -> "ByteLevelBPETokenizer":
        """The tokenizer saved (by `save`) at `path`."""
        tokenizers = _tokenizers()
        if not path.is_file():
            raise UserError(f"{path}: missing; an imported GPT-2 run keeps its vocabulary there")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # the library raises its own Exception for a foreign file
            raise UserError(f"{path}: not a `tokenizers` tokenizer file ({str(err).splitlines()[0][:200]})") from None
        if backend.token_to_id(END_OF_TEXT) is None:
            raise UserError(f"{path}: has no {END_OF_TEXT} piece; is it the tokenizer of an imported GPT-2 run?")
        return cls(backend)

    def save(self, path: Path) -> None:
        """The whole tokenizer as one JSON file (tokenizers' own format), atomically."""
        atomic_write_text(path, self.backend.to_str())

    def __len__(self) -> int:
        """The number of ids, the special "<|endoftext|>" included (GPT-2: 50257)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Text -> GPT-2 ids, nothing added ("<|endoftext|>" written in the text is its id)."""
        return [found.ids for found in self.backend.encode_batch(list(lines), add_special_tokens=False)]

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """As `encode`: one vocabulary, one way of cutting text."""
        return self.encode(lines)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Ids -> text, "<|endoftext|>" dropped, spaces kept as they were encoded."""
        return self.backend.decode_batch([list(seq) for seq in ids], skip_special_tokens=True)

    def pieces(self, line: str) -> list[str]:
        """The pieces of one text, in GPT-2's byte alphabet (a leading space is "Ġ")."""
        return self.backend.encode(line, add_special_tokens=False).tokens

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.backend.id_to_token(i) for i in ids]

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece; a piece outside the vocabulary is "<|endoftext|>", GPT-2's
        unknown token in Hugging Face's tokenizer (byte-level text never has one)."""
        found = self.backend.token_to_id(piece)
        return self.end_of_text_id if found is None else found
