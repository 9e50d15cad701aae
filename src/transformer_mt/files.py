"""The one atomic-write helper: every file a user relies on (config, tokenizer,
checkpoints, weights, corpora the toolkit generates, translations) is written through it.

The content goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the final name, and the folder is fsynced so the rename survives a power
cut: a process killed mid-write leaves the old file (or none), never half of a new one."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that wants a file name (safetensors,
    sentencepiece); on a clean exit the file is fsynced and renamed over `path`, on an
    exception it is removed and `path` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside `path` for writing, as `atomic_path` replaces it."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=encoding, newline="\n" if "b" not in mode else None) as handle:
            yield handle


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` survive a power cut (where the platform allows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not every platform can open a folder
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
