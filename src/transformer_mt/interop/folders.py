"""The output folder of an export (CTranslate2, Hugging Face) or of an imported run:
checked before any work, written whole or not at all.

An export is built in a temporary folder beside --out, every file fsynced, then renamed
into place; an existing folder is replaced (with --force) only once the new one is
complete, so a process killed midway leaves the old folder (or none), never half of a
new one. A place that cannot be written (a read-only disk, /proc, no permission, a path
under a file) is one UserError line that names --out (an import's --run), not an OSError
traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from transformer_mt.common.errors import UserError
from transformer_mt.common.files import existing_ancestor, fsync_folder, probe_writable


def check_out_dir(out: Path, run_root: Path, force: bool) -> None:
    """Refuse a file, a non-empty folder (without force), a folder holding the run or
    inside it (--force would replace the run's own files), and a place where the folder
    cannot be created: before the model is loaded."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder; choose another --out")
    resolved, run = out.resolve(), run_root.resolve()
    if resolved == run or resolved in run.parents:
        raise UserError(f"{out}: holds the run {run_root} itself; choose another --out")
    if run in resolved.parents and out.exists():
        raise UserError(f"{out}: is part of the run {run_root}, which this command reads; choose an --out outside it")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out}: exists and is not empty; choose another --out or add --force to replace it")
    check_new_folder(out, "--out")


def check_new_run(run_dir: str | Path) -> Path:
    """The --run of an import: refused when it exists already (a non-empty folder or a
    file) or cannot be created, before any work."""
    run = Path(run_dir)
    if run.exists() and (not run.is_dir() or any(run.iterdir())):
        raise UserError(f"{run}: exists already; import into a new --run")
    check_new_folder(run, "--run")
    return run


def check_new_folder(folder: Path, option: str) -> None:
    """Refuse, before any work, a `folder` that cannot be created (given as `option`): one
    under a file, or in a place where nothing can be written. A temporary file is made
    and removed in its nearest existing parent to find out (files.probe_writable)."""
    parent = existing_ancestor(folder.resolve())
    if not parent.is_dir():
        raise UserError(f"{folder}: {parent} is a file, not a folder; give {option} a path in a folder")
    try:
        probe_writable(parent, folder.name)
    except OSError as err:
        raise unwritable(folder, OSError(err.errno, err.strerror, str(parent)), option) from None


def unwritable(out: Path, err: OSError, option: str = "--out") -> UserError:
    """The one line for an OSError met while writing the folder `out` (given as `option`)."""
    reason = err.strerror or type(err).__name__
    where = f" ({err.filename})" if err.filename and str(err.filename) != str(out) else ""
    return UserError(f"{out}: cannot be written: {reason}{where}; give {option} a path in a folder you can write")


def write_folder(out: Path, fill: Callable[[Path], None], option: str = "--out") -> None:
    """Create `out` (an absolute path; its missing parents too) with `fill(tmp)`, which
    writes the files into the empty folder `tmp`: built beside `out`, fsynced, renamed into
    place (replacing an existing `out` only when complete). An OSError becomes one
    UserError line naming `option`, the command's name for `out`."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    old = out.with_name(f".{out.name}.{os.getpid()}.old")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _replace_with(out, tmp, old, fill)
    except OSError as err:
        raise unwritable(out, err, option) from None
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
