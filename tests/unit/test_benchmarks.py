"""Every benchmark script still imports: a renamed or removed function breaks them
silently otherwise, since the suite never runs them (they take minutes)."""

from __future__ import annotations

import pytest

from benchmark_loader import BENCHMARKS, load_benchmark

SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("*.py") if not path.stem.startswith("_"))  # _*.py: shared helpers


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_imports(name: str) -> None:
    assert callable(getattr(load_benchmark(name), "main", None)), f"{name}.py has no main()"


def test_the_unknown_word_share_by_hand() -> None:
    """benchmarks/notes_bugs.py: a vocabulary of 'a b' and 'c' misses 'd' (1 of 4 test words,
    in 1 of 2 test sentences)."""
    assert load_benchmark("notes_bugs").unknown_share(["a b", "c"], ["a d", "c c"]) == (0.25, 0.5, 3)
