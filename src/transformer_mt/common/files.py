"""The one atomic-write helper: every file a user relies on (config, tokenizer,
checkpoints, weights, corpora the toolkit generates, translations) is written through it;
and the one JSON reader whose errors are one line (`read_json_file`).

The content goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the final name, and the folder is fsynced so the rename survives a power
cut: a process killed mid-write leaves the old file (or none), never half of a new one."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from transformer_mt.common.errors import UserError


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


def existing_ancestor(path: Path) -> Path:
    """The nearest folder (or file) above `path` that exists: where writing it would start."""
    above = path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    return above


def probe_writable(folder: Path, name: str) -> None:
    """Make and remove a temporary file named after `name` in `folder`; the OSError if that
    fails. os.access says yes to root in /proc and on a read-only mount, so only a real write
    tells."""
    handle, probe = tempfile.mkstemp(prefix=f".{name}.", suffix=".probe", dir=folder)
    os.close(handle)
    os.unlink(probe)


def check_writable_file(path: str | Path, option: str) -> Path:
    """Fail before any work, in one UserError line that names `option` and what to do,
    when a file cannot be written at `path`: a folder, a folder under a file, a folder
    that does not exist, or one where nothing can be written."""
    out = Path(path)
    if out.is_dir():
        raise UserError(f"{option} {out}: is a folder; give a file name for the output")
    above = existing_ancestor(out)
    if above.exists() and not above.is_dir():
        raise UserError(f"{option} {out}: {above} is a file, not a folder; give a path in a folder")
    if not out.parent.is_dir():
        raise UserError(f"{option} {out}: {out.parent}: no such folder for the output; create it first")
    try:
        probe_writable(out.parent, out.name)
    except OSError as err:
        raise UserError(f"{option} {out}: cannot write in {out.parent} ({err.strerror}); give a path in a "
                        "folder you can write") from None
    if out.exists() and not os.access(out, os.W_OK):
        raise UserError(f"{option} {out}: cannot be written (permission denied)")
    return out


def read_json_file(path: str | Path, if_missing: str) -> object:
    """The JSON value in `path`; a missing, unreadable or malformed file is one UserError
    line that names it (`if_missing` says what the missing file is or what to do)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: missing ({if_missing})") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{path}: not readable JSON ({str(err).splitlines()[0]})") from None
