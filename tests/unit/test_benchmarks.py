"""Every benchmark script still imports: a renamed or removed function breaks them
silently otherwise, since the suite never runs them (they take minutes)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def load(path: Path) -> ModuleType:
    """Import a benchmark script as a module: its imports and definitions run, main() does not."""
    name = f"benchmark_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_the_benchmark_imports(path: Path) -> None:
    assert callable(getattr(load(path), "main", None)), f"{path.name} has no main()"


def test_the_unknown_word_share_by_hand() -> None:
    """benchmarks/notes_bugs.py: a vocabulary of 'a b' and 'c' misses 'd' (1 of 4 test words,
    in 1 of 2 test sentences)."""
    assert load(BENCHMARKS[0].parent / "notes_bugs.py").unknown_share(["a b", "c"], ["a d", "c c"]) == (0.25, 0.5, 3)
