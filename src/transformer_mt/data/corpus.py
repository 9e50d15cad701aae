"""Reading parallel text: one sentence per line, line N of the source file translates
line N of the target file, plain or gzip-compressed.

Every problem a user can have with a corpus stops with a `CorpusError` that names the
file (and the line): a missing or empty file, invalid UTF-8, different line counts.
Empty or whitespace-only pairs are skipped with a warning that counts them."""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from pathlib import Path

from transformer_mt.errors import UserError

log = logging.getLogger("transformer_mt")


class CorpusError(UserError):
    """A corpus file that cannot be used as it is; the message names the file and line."""


@dataclass
class Corpus:
    """Parallel sentences: src[i] translates to tgt[i]."""

    src: list[str]
    tgt: list[str]
    skipped_empty: int = 0

    def __len__(self) -> int:
        return len(self.src)


def decode_line(raw: bytes, number: int, name: str = "<stdin>") -> str:
    """One line of bytes as text without its line ending; invalid UTF-8 names the line."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{name}, line {number}: not valid UTF-8 ({err.reason} at byte {err.start}); "
                          "convert the input to UTF-8 (e.g. with iconv)") from None


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (`.gz` is decompressed), without line endings."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a folder; give the file with one sentence per line")
    if not path.is_file():
        raise CorpusError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            return [decode_line(raw, number, str(path)) for number, raw in enumerate(handle, start=1)]
    except (OSError, EOFError) as err:
        raise CorpusError(f"{path}: cannot be read ({err})") from None


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Corpus:
    """Read a source and a target file line by line into a Corpus.

    Both files must be non-empty and have the same number of lines; pairs where either
    side is empty or whitespace only are skipped and counted in a warning."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        if not lines:
            raise CorpusError(f"{path}: the file is empty; a corpus needs one sentence per line")
    if len(src) != len(tgt):
        raise CorpusError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                          "line N of the source must translate line N of the target")
    keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if s.strip() and t.strip()]
    skipped = len(src) - len(keep)
    if not keep:
        raise CorpusError(f"{src_path} / {tgt_path}: every one of the {len(src)} pairs has an empty or "
                          "whitespace-only side; nothing is left to learn from")
    if skipped:
        log.warning("%s / %s: skipped %d pair(s) with an empty side", src_path, tgt_path, skipped)
    return Corpus([src[i] for i in keep], [tgt[i] for i in keep], skipped)
