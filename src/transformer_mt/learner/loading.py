"""The learner's file imported as a module, in this process, writing nothing beside it (no
`__pycache__`), within a time limit; and the function or class in it that builds the model.

Every mistake is a `UserError` of one line that names the file, the line where Python saw it
and what to do; `transformer-mt check` prints it and exits with code 2."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import signal
import sys
import threading
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from transformer_mt.common.errors import UserError

BUILDER_NAMES = ("make_model", "get_model", "Transformer")  # tried in this order when FILE has no :NAME
_COUNTER = itertools.count()
_IMPORTED_BESIDE: dict[str, dict[Path, Path]] = {}  # a load_file module's name -> its files' (relative: absolute)


class ImportTimeout(BaseException):
    """The file was still running when its time to import ran out (a BaseException, so that
    an `except Exception` in their code does not swallow it)."""


def line_in(err: BaseException, path: Path) -> int | None:
    """The last line of `path` that the traceback of `err` passes through."""
    frames = [frame for frame in traceback.extract_tb(err.__traceback__) if Path(frame.filename) == path]
    return frames[-1].lineno if frames else None


def located(path: Path, line: int | None) -> str:
    """`FILE:LINE`, or FILE where the line is not known: the one way a message names a place."""
    return f"{path}:{line}" if line else str(path)


def where(err: BaseException, path: Path) -> str:
    """`path:line` of the deepest frame of `err` in `path`, or the path alone."""
    return located(path, line_in(err, path))


def described(err: BaseException) -> str:
    """'ValueError: the message' on one line."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ImportTimeout in this thread after `seconds` (the main thread only: elsewhere the
    parent process's own limit stops a file that never returns)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise ImportTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def importing_beside(*folders: Path) -> Iterator[None]:
    """Their folder first on sys.path (their own imports find their other files, as `python
    FILE` would), and no bytecode written for anything imported meanwhile."""
    saved_path, saved_flag = list(sys.path), sys.dont_write_bytecode
    sys.path[:0] = [str(folder) for folder in folders]
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.path[:] = saved_path
        sys.dont_write_bytecode = saved_flag


def load_file(path: Path, seconds: float = 20.0, beside: Path | None = None) -> types.ModuleType:
    """Run the file as a module named `learner_<stem>_<n>` (so `if __name__ == "__main__":`
    blocks stay out) and return it. `compile` reads the source itself: nothing is cached.
    `beside`: a second folder its imports may come from (a run's copy: the original's)."""
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path} is a folder, not a Python file")
    try:
        code = compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as err:
        raise UserError(f"{located(path, err.lineno)}: syntax error: {err.msg} (python {path} shows the same; fix that "
                        "line)") from None
    except ValueError as err:  # null bytes
        raise UserError(f"{path}: not Python source ({err})") from None
    module = types.ModuleType(f"learner_{path.stem}_{next(_COUNTER)}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses and pickling look their module up there
    folders = [path.parent, *([beside] if beside else [])]
    before = set(sys.modules)
    try:
        with importing_beside(*folders), time_limit(seconds), contextlib.redirect_stdout(sys.stderr):
            exec(code, module.__dict__)  # their prints to stderr: stdout is for translations
    except ImportTimeout:
        raise UserError(f"{path}: still running after {seconds:.0f} s of importing it: training, downloads or "
                        "input() at the top level belong under `if __name__ == \"__main__\":`") from None
    except SystemExit as err:
        raise UserError(f"{where(err, path)}: the file exits when imported: move that code under "
                        "`if __name__ == \"__main__\":`") from None
    except Exception as err:
        raise UserError(f"{where(err, path)}: importing the file raised {described(err)} (code that needs data or "
                        "other packages belongs under `if __name__ == \"__main__\":`)") from None
    finally:
        _IMPORTED_BESIDE[module.__name__] = forget_imports_beside(before, [folder.resolve() for folder in folders])
    return module


def their_imports(module: types.ModuleType) -> dict[Path, Path]:
    """The learner's other files that `module` (a `load_file` result) imported from its folder
    or a sub-folder of it, such as a tutorial's Layers.py or layers/attention.py, each by its
    path relative to that folder: what a run keeps beside its copy."""
    return _IMPORTED_BESIDE.get(module.__name__, {})


def installed(path: Path) -> bool:
    """Whether `path` belongs to an installed package (a virtual environment inside their folder)."""
    prefixes = {Path(prefix).resolve() for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return bool({"site-packages", "dist-packages"} & set(path.parts)) or any(p in path.parents for p in prefixes)


def forget_imports_beside(before: set[str], folders: list[Path]) -> dict[Path, Path]:
    """Remove from sys.modules the modules imported since `before` from `folders` or their
    sub-folders (their own files: a second file of theirs with a sibling of the same name gets its
    own), and return their files, each under its path relative to its folder."""
    found = {}
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        path = Path(file).resolve() if isinstance(file, str) else None
        folder = max((folder for folder in folders if path and folder in path.parents), key=lambda f: len(f.parts),
                     default=None)  # the deepest: a run's model_imports/ lies inside the run
        if folder is not None and not installed(path):
            found[path.relative_to(folder)] = path
            del sys.modules[name]
    return dict(sorted(found.items()))


def split_target(target: str) -> tuple[Path, str | None]:
    """FILE:NAME -> (FILE, NAME); FILE alone -> (FILE, None): `check FILE[:NAME]` and
    `train --model FILE[:NAME]` (model.file) alike."""
    path, colon, name = target.rpartition(":")
    if colon and path and name.isidentifier():
        return Path(path), name
    return Path(target), None


def find_builder(module: types.ModuleType, path: Path, name: str | None) -> tuple[str, Callable[..., Any]]:
    """(name, the function or class that builds the model): NAME when given, else the first
    of make_model, get_model and a class Transformer that the file defines."""
    if name:
        if not hasattr(module, name):
            defined = sorted(key for key, value in vars(module).items()
                             if callable(value) and getattr(value, "__module__", None) == module.__name__)
            raise UserError(f"{path} defines no {name} (it defines: {', '.join(defined) or 'no functions or classes'})")
        return name, callable_builder(module, path, name)
    for candidate in BUILDER_NAMES:
        if hasattr(module, candidate) and (candidate != "Transformer" or inspect.isclass(getattr(module, candidate))):
            return candidate, callable_builder(module, path, candidate)
    raise UserError(f"{path} defines none of make_model, get_model or a class Transformer: name the function that "
                    f"builds your model, as in `transformer-mt check {path}:NAME`")


def callable_builder(module: types.ModuleType, path: Path, name: str) -> Callable[..., Any]:
    builder = getattr(module, name)
    if not callable(builder):
        raise UserError(f"{path}:{name} is not a function or class that builds the model but a value of type "
                        f"{type(builder).__name__}")
    return builder
