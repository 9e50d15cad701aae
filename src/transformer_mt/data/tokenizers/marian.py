"""The tokenizer of an imported Marian (OPUS-MT) model, as Hugging Face's MarianTokenizer
cuts and joins text, with ids in this package's layout.

A Marian model has its own vocabulary (vocab.json: piece -> id) and two sentencepiece
models: source.spm cuts the source text into pieces, target.spm the target text; the
pieces are then looked up in vocab.json (not by sentencepiece's own ids; a piece that is
not there is <unk>). A leading target-language token such as `>>de<<` is kept whole.

Marian's special ids are eos 0 (</s>), unk 1 (<unk>) and pad V-1 (<pad>, appended by the
conversion with a zero embedding); it has no bos: the decoder starts from pad. This
package fixes pad 0, unk 1, bos 2, eos 3 everywhere, so the rows are reordered, exactly:

    ours:    0 (pad)   1 (unk)   2 (bos)          3 (eos)   4, 5, ...
    Marian:  pad       unk       pad (the start)  eos       the other ids, in order

which takes V + 1 rows: Marian's pad row appears twice, as our pad and as our bos (the
decoder start). Marian's outputs have no bos column, so the importer gives ours a
generator bias of NEVER_LOGIT (probability exactly 0: model/transformer.py), and the
decoders never emit pad or bos; normalised over the other V columns, the distribution is
Marian's."""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm

from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID
from transformer_mt.data.tokenizers.protocol import EosFramed, OneVocabulary, load_sentencepiece
from transformer_mt.common.errors import UserError

# vocab.json first (it names the tokenizer), then the sentencepiece models that cut the text
MARIAN_VOCAB = "vocab.json"
MARIAN_TOKENIZER_FILES = (MARIAN_VOCAB, "source.spm", "target.spm")

EOS_PIECE, UNK_PIECE, PAD_PIECE = "</s>", "<unk>", "<pad>"  # MarianTokenizer's special tokens
BOS_PIECE = "<s>"  # our bos row (a copy of Marian's decoder start); Marian has no such piece
SPIECE_UNDERLINE = "\u2581"


def split_language_code(line: str) -> tuple[list[str], str]:
    """A leading `>>xx<<` as one token, and the rest of the line (MarianTokenizer's
    remove_language_code: the line starts with >> and has a << after it)."""
    if line.startswith(">>") and (end := line.find("<<")) != -1:
        return [line[: end + 2]], line[end + 2 :]
    return [], line


def read_vocab(path: Path) -> dict[str, int]:
    """vocab.json: every piece to its Marian id, the ids 0..V-1 each once."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: missing (an imported Marian vocabulary needs vocab.json, source.spm "
                        "and target.spm)") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{path}: not a readable JSON vocabulary ({err})") from None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
        raise UserError(f"{path}: expected a JSON object of piece -> integer id")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError(f"{path}: the ids are not 0..{len(vocab) - 1}, each once")
    missing = [piece for piece in (EOS_PIECE, UNK_PIECE, PAD_PIECE) if piece not in vocab]
    if missing:
        raise UserError(f"{path}: has no {', '.join(missing)} (a Marian vocabulary has </s>, <unk> and <pad>)")
    return vocab


def marian_rows(vocab: dict[str, int]) -> list[int]:
    """The Marian id behind each of our V + 1 rows (see the module docstring)."""
    eos, unk, pad = vocab[EOS_PIECE], vocab[UNK_PIECE], vocab[PAD_PIECE]
    rows = {PAD_ID: pad, UNK_ID: unk, BOS_ID: pad, EOS_ID: eos}
    return [rows[i] for i in range(len(rows))] + [i for i in range(len(vocab)) if i not in (eos, unk, pad)]


def _load_spm(path: Path) -> spm.SentencePieceProcessor:
    return load_sentencepiece(path, "an imported Marian vocabulary needs vocab.json, source.spm and target.spm")


class MarianTokenizer(OneVocabulary, EosFramed):
    """Text <-> ids with Marian's vocab.json and its source and target sentencepiece
    models (the `Tokenizer` protocol of data/tokenizers/protocol.py)."""

    file_name = MARIAN_VOCAB

    def __init__(self, vocab: dict[str, int], source: spm.SentencePieceProcessor,
                 target: spm.SentencePieceProcessor) -> None:
        self.vocab, self.source, self.target = vocab, source, target
        self.rows = marian_rows(vocab)  # our id -> Marian id
        self.ours = [0] * len(vocab)  # Marian id -> our id (Marian's pad -> our pad)
        for ours, marian in reversed(list(enumerate(self.rows))):
            self.ours[marian] = ours
        by_id = {i: piece for piece, i in vocab.items()}
        self.pieces_of_rows = [by_id[i] for i in self.rows]
        self.pieces_of_rows[BOS_ID] = BOS_PIECE if BOS_PIECE not in vocab else "<decoder-start>"
        self.ids_of_pieces = {piece: i for i, piece in enumerate(self.pieces_of_rows)}
        self.unk_marian = vocab[UNK_PIECE]

    @classmethod
    def files(cls, path: Path) -> list[Path]:
        """vocab.json (`path`), source.spm and target.spm beside it."""
        return [path.parent / name for name in MARIAN_TOKENIZER_FILES]

    @classmethod
    def encoding_files(cls, path: Path) -> list[Path]:
        """All three: the sentencepiece models cut the text that vocab.json numbers."""
        return cls.files(path)

    @classmethod
    def from_file(cls, path: Path) -> "MarianTokenizer":
        return cls.load(path.parent)

    @classmethod
    def load(cls, folder: str | Path) -> "MarianTokenizer":
        """vocab.json, source.spm and target.spm of `folder` (an imported run)."""
        folder = Path(folder)
        return cls(read_vocab(folder / MARIAN_VOCAB), _load_spm(folder / "source.spm"),
                   _load_spm(folder / "target.spm"))

    def __len__(self) -> int:
        return len(self.rows)

    def _cut(self, lines: list[str], processor: spm.SentencePieceProcessor) -> list[list[str]]:
        split = [split_language_code(line) for line in lines]
        pieces = processor.Encode([text for _, text in split], out_type=str) if split else []
        return [code + cut for (code, _), cut in zip(split, pieces)]

    def _ids(self, pieces: list[list[str]]) -> list[list[int]]:
        vocab, ours, unk = self.vocab, self.ours, self.unk_marian
        return [[ours[vocab.get(piece, unk)] for piece in line] for line in pieces]

    def encode(self, lines: list[str]) -> list[list[int]]:
        """Source sentences -> ids (no eos: batching adds it), cut by source.spm."""
        return self._ids(self._cut(list(lines), self.source))

    def encode_target(self, lines: list[str]) -> list[list[int]]:
        """Target sentences -> ids (no eos), cut by target.spm (MarianTokenizer's text_target)."""
        return self._ids(self._cut(list(lines), self.target))

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Output ids -> sentences: as MarianTokenizer.decode(skip_special_tokens=True),
        the special pieces (pad, unk, bos, eos) dropped, the rest joined by target.spm,
        '\u2581' turned into spaces, the ends stripped."""
        dropped = SPECIAL_IDS | {UNK_ID}
        texts = []
        for seq in ids:
            pieces = [self.pieces_of_rows[i] for i in seq if i not in dropped]
            texts.append(self.target.DecodePieces(pieces).replace(SPIECE_UNDERLINE, " ").strip())
        return texts

    def pieces(self, line: str) -> list[str]:
        """The source pieces of one sentence, as the model sees them (before vocab.json)."""
        return self._cut([line], self.source)[0]

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.pieces_of_rows[i] for i in ids]

    def piece_to_id(self, piece: str) -> int:
        """Our id of a piece; UNK_ID for a piece outside vocab.json."""
        return self.ids_of_pieces.get(piece, UNK_ID)
