"""Import a benchmark script (benchmarks/NAME.py) as a module, for the tests. The scripts
import their shared helpers (benchmarks/_*.py) from their own folder, as `python
benchmarks/NAME.py` lets them: the folder goes on sys.path here too."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module: its imports and definitions run, main() does not."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    module_name = f"benchmark_{name}"
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[module_name]
    return module
