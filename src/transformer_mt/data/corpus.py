"""Reading parallel text: one sentence per line, line N of the source file translates
line N of the target file, plain or gzip-compressed.

Every problem a user can have with a corpus stops with a `CorpusError` that names the
file (and the line): a missing or empty file, invalid UTF-8, different line counts.
Empty or whitespace-only pairs are skipped with a warning that counts them."""

from __future__ import annotations

import gzip
import logging
from itertools import zip_longest
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from transformer_mt.common.errors import UserError

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


def usable_pair(src: str, tgt: str) -> bool:
    """A pair to learn from: neither side empty or whitespace only. The one rule for
    skipping pairs, shared by read_parallel, the vocabulary sample and prepare's workers,
    so that all three keep the same pairs."""
    return bool(src.strip()) and bool(tgt.strip())


def decode_line(raw: bytes, number: int, name: str = "<stdin>") -> str:
    """One line of bytes as text without its line ending; invalid UTF-8 names the line."""
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{name}, line {number}: not valid UTF-8 ({err.reason} at byte {err.start}); "
                          "convert the input to UTF-8 (e.g. with iconv)") from None


def open_lines(path: str | Path) -> IO[bytes]:
    """A file of lines opened for reading bytes (`.gz` is decompressed on the fly): a regular
    file, or anything else readable (a pipe, /dev/stdin, a shell's <(...))."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(f"{path}: is a folder; give the file with one sentence per line")
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as err:
        raise CorpusError(f"{path}: cannot be read ({err})") from None


def iter_raw_lines(path: str | Path) -> Iterator[bytes]:
    """The lines of a file as bytes, one at a time: a corpus of any size in constant memory."""
    with open_lines(path) as handle:
        try:
            yield from handle
        except (OSError, EOFError) as err:
            raise CorpusError(f"{path}: cannot be read ({err})") from None


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (`.gz` is decompressed), without line endings."""
    return [decode_line(raw, number, str(path)) for number, raw in enumerate(iter_raw_lines(path), start=1)]


def iter_raw_pairs(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[bytes, bytes]]:
    """Line N of the source with line N of the target, as bytes, streaming.

    Stops with a CorpusError naming both files when a file is empty or the line counts
    differ (found when the shorter file ends; the longer one is then counted)."""
    src, tgt = iter_raw_lines(src_path), iter_raw_lines(tgt_path)
    count = 0
    for src_line, tgt_line in zip_longest(src, tgt):
        if src_line is None or tgt_line is None:
            if count == 0:
                raise _empty_file(src_path if src_line is None else tgt_path)
            src_count = count + (src_line is not None) + sum(1 for _ in src)
            tgt_count = count + (tgt_line is not None) + sum(1 for _ in tgt)
            raise CorpusError(f"{src_path} has {src_count} lines but {tgt_path} has {tgt_count}; "
                              "line N of the source must translate line N of the target")
        count += 1
        yield src_line, tgt_line
    if count == 0:
        raise _empty_file(src_path)


def _empty_file(path: str | Path) -> CorpusError:
    return CorpusError(f"{path}: the file is empty; a corpus needs one sentence per line")


def no_pairs_left(src_path: str | Path, tgt_path: str | Path, lines: int) -> CorpusError:
    return CorpusError(f"{src_path} / {tgt_path}: every one of the {lines} pairs has an empty or "
                       "whitespace-only side; nothing is left to learn from")


def warn_skipped(src_path: str | Path, tgt_path: str | Path, skipped: int) -> None:
    if skipped:
        log.warning("%s / %s: skipped %d pair(s) with an empty side", src_path, tgt_path, skipped)


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Corpus:
    """Read a source and a target file line by line into a Corpus (for files that fit
    in memory: validation and test sets; training corpora are streamed by prepare.py).

    Both files must be non-empty and have the same number of lines; pairs where either
    side is empty or whitespace only are skipped and counted in a warning."""
    src: list[str] = []
    tgt: list[str] = []
    lines = 0
    for lines, (src_raw, tgt_raw) in enumerate(iter_raw_pairs(src_path, tgt_path), start=1):
        s, t = decode_line(src_raw, lines, str(src_path)), decode_line(tgt_raw, lines, str(tgt_path))
        if usable_pair(s, t):
            src.append(s)
            tgt.append(t)
    if not src:
        raise no_pairs_left(src_path, tgt_path, lines)
    warn_skipped(src_path, tgt_path, lines - len(src))
    return Corpus(src, tgt, lines - len(src))
