"""The package's layers (shared/design.md): no import cycle, the trainer knows no
translation, inference never imports training, model code no data code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "transformer_mt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports anywhere (functions included), except under
    `if TYPE_CHECKING:`, which never runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and getattr(block.test, "id", "") == "TYPE_CHECKING" for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imported_modules(path, modules) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (a path that comes back to its start), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    # packages import their own modules in __init__; a module importing its package is the cycle to catch
    graph = {name: {m for m in deps if not name.startswith(m + ".")} for name, deps in graph.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def loaded_after(module: str) -> set[str]:
    """The package modules loaded by importing `module` in a fresh interpreter."""
    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m.startswith('transformer_mt')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_trainer_imports_neither_the_translator_nor_evaluation() -> None:
    """The loop's own imports (the training package's __init__, which offers `fit`, aside)."""
    graph = import_graph()
    assert "transformer_mt.translator" in reachable(graph, "transformer_mt.training.translation")  # the check sees
    for module in ("transformer_mt.training.trainer", "transformer_mt.training.hooks", "transformer_mt.training.task"):
        found = reachable(graph, module)
        assert not found & {"transformer_mt.translator", "transformer_mt.evaluation"}, module
        assert not {m for m in found if m.startswith("transformer_mt.decoding")}, module


@pytest.mark.parametrize("module", ["transformer_mt.translator", "transformer_mt.server.app",
                                   "transformer_mt.server.lm_service", "transformer_mt.lm_inspection",
                                   "transformer_mt.interop.ctranslate2", "transformer_mt.interop.marian",
                                   "transformer_mt.interop.huggingface"])
def test_inference_never_imports_training(module: str) -> None:
    loaded = loaded_after(module)
    assert module in loaded
    assert not {m for m in loaded if m.startswith("transformer_mt.training")}


def test_the_server_imports_neither_plots_nor_matplotlib() -> None:
    """Both views of the page (translation and generate) run without viz/ and matplotlib."""
    code = "import sys, transformer_mt.server.app; print(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "transformer_mt.server.lm_api" in loaded
    assert not {m for m in loaded if m.startswith(("transformer_mt.viz", "matplotlib"))}


def test_model_code_imports_no_data_or_training_code() -> None:
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("transformer_mt.model"):
            assert not {d for d in deps if d.startswith(("transformer_mt.data", "transformer_mt.training"))}, name
