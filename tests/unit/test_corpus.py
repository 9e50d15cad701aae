"""Reading parallel text: every bad corpus gives an error that names the file (and line)."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pytest

from transformer_mt.data.corpus import CorpusError, read_lines, read_parallel
from transformer_mt.data.prepare import within_limits


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_plain_and_gzip_read_the_same(tmp_path: Path) -> None:
    plain = write(tmp_path / "a.txt", "eins\nzwei\r\ndrei\n")
    with gzip.open(tmp_path / "a.txt.gz", "wb") as handle:
        handle.write("eins\nzwei\r\ndrei\n".encode())
    assert read_lines(plain) == read_lines(tmp_path / "a.txt.gz") == ["eins", "zwei", "drei"]


def test_different_line_counts_name_both_files(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "s.en", "a\nb\nc\n"), write(tmp_path / "t.de", "a\nb\n")
    with pytest.raises(CorpusError) as err:
        read_parallel(src, tgt)
    assert f"{src} has 3 lines but {tgt} has 2" in str(err.value)


def test_empty_file(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "s.en", ""), write(tmp_path / "t.de", "a\n")
    with pytest.raises(CorpusError, match="s.en: the file is empty"):
        read_parallel(src, tgt)


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    src = write(tmp_path / "s.en", b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(CorpusError, match=r"s.en, line 3: not valid UTF-8"):
        read_lines(src)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no such file"):
        read_lines(tmp_path / "nope.txt")


def test_empty_lines_are_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src, tgt = write(tmp_path / "s.en", "a\n  \nc\nd\n"), write(tmp_path / "t.de", "A\nB\n\nD\n")
    with caplog.at_level(logging.WARNING, logger="transformer_mt"):
        corpus = read_parallel(src, tgt)
    assert corpus.src == ["a", "d"] and corpus.tgt == ["A", "D"] and corpus.skipped_empty == 2
    assert "skipped 2 pair(s)" in caplog.text


def test_length_and_ratio_filter() -> None:
    # too long (30 > 25), ratio 10 > 3, exactly at both limits (25 and 25/9 < 3), ratio 3 with a 0
    src = np.array([3, 30, 2, 25, 4, 0])
    tgt = np.array([4, 3, 20, 9, 4, 3])
    assert within_limits(src, tgt, max_len=25, max_ratio=3.0).tolist() == [True, False, False, True, True, True]
