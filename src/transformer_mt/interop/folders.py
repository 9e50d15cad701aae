"""The output folder of an export (CTranslate2, Hugging Face) or of an imported run:
checked before any work, written whole or not at all.

An export is built in a temporary folder beside --out, every file fsynced, then renamed
into place; an existing folder is replaced (with --force) only once the new one is
complete, so a process killed midway leaves the old folder (or none), never half of a
new one. A place that cannot be written (a read-only disk, /proc, no permission) is one
UserError line that names --out, not an OSError traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from transformer_mt.errors import UserError
from transformer_mt.files import fsync_folder


def check_out_dir(out: Path, run_root: Path, force: bool) -> None:
    """Refuse a file, a non-empty folder (without force), a folder holding the run, and a
    parent folder that cannot be created or written: before the model is loaded."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder; choose another --out")
    resolved, run = out.resolve(), run_root.resolve()
    if resolved == run or resolved in run.parents:
        raise UserError(f"{out}: holds the run {run_root} itself; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out}: exists and is not empty; choose another --out or add --force to replace it")
    parent = resolved.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise unwritable(out, err) from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out}: cannot write in {parent} (permission denied); choose an --out in a folder you can write")


def unwritable(out: Path, err: OSError) -> UserError:
    """The one line for an OSError met while writing the folder `out`."""
    reason = err.strerror or type(err).__name__
    where = f" ({err.filename})" if err.filename and str(err.filename) != str(out) else ""
    return UserError(f"{out}: cannot be written: {reason}{where}; choose an --out in a folder you can write")


def write_folder(out: Path, fill: Callable[[Path], None]) -> None:
    """Create `out` (an absolute path) with `fill(tmp)`, which writes the files into the
    empty folder `tmp`: built beside `out`, fsynced, renamed into place (replacing an
    existing `out` only when complete). An OSError becomes one UserError line."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    try:
        _replace_with(out, tmp, old, fill)
    except OSError as err:
        raise unwritable(out, err) from None
    shutil.rmtree(old, ignore_errors=True)
    fsync_folder(out.parent)


def _replace_with(out: Path, tmp: Path, old: Path, fill: Callable[[Path], None]) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        fill(tmp)
        for path in tmp.iterdir():
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise
