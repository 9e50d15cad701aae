"""The package's layers (shared/design.md, the README's map of the code), read from the source.

Every module of src/transformer_mt is parsed with `ast` and its imports become the edges
of one graph; no interpreter starts for that. What counts as an import:
- every `import` and `from ... import` anywhere in the file, at module level or inside a
  function (a lazy import is still a dependency: a function of viz that imports training
  at call time makes viz need training all the same), relative ones resolved;
- `from package import name` counts the package and, when `name` is a module, that module;
- importing a.b.c also runs the __init__ of a.b: an edge to every package on the way,
  the top-level package aside (see below);
- imports under `if TYPE_CHECKING:` never run and do not count.
The top-level package `transformer_mt` holds `__version__` and a `__getattr__` that loads
Translator, LanguageModel, build_model and load_config when someone asks for them: those
four lazy imports are its public front door, not a dependency of the modules that read
`__version__`, so they are left out (anything it imported at module level would count).

One test starts a single interpreter, to check the graph against what Python really loads.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "transformer_mt"
ROOT = "transformer_mt"

# Bottom to top: a module imports only from its own layer and the layers below it.
LAYERS = (
    ("common", ROOT),  # leaves: typed configs (common.config imports nothing of the package), errors, files, ...
    ("model",),  # the paper, one component per class
    ("learner",),  # the learner's own model: their file loaded and built, driven like ours (check, train, runs)
    ("decoding",),  # greedy, beam, trace, sampling over a model
    ("data",),  # sources, corpora, tokenizers, prepared data, batches
    ("runs",),  # a run directory and its weight files; int8 weights
    ("interop",),  # Marian and GPT-2 in; CTranslate2 and Hugging Face out
    ("inference",),  # a run as a function (Translator, LanguageModel) and looked inside
    ("diagnosis", "check"),  # side by side: the doctor; `check`, the learner's own code against the paper
    ("training", "server", "viz"),  # side by side: none imports another (the rules below)
    ("demo",),  # trains a run (training) and draws it (viz)
    ("cli", "__main__"),
)
# Inference and learner code never imports training (the demo trains, so it does).
NEVER_TRAINING = ("inference", "diagnosis", "check", "server", "viz", "interop", "decoding")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def nodes_inside(tree: ast.Module, kinds: tuple[type, ...], test: str | None = None) -> set[int]:
    """ids of the nodes inside a node of `kinds` (with `test`: an `if` on that name)."""
    return {id(node) for block in ast.walk(tree) if isinstance(block, kinds)
            and (test is None or getattr(block.test, "id", getattr(block.test, "attr", "")) == test)
            for node in ast.walk(block) if node is not block}


def absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The module a `from` import names, relative imports resolved against module `name`."""
    if not node.level:
        return node.module or ""
    base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def imports_of(path: Path, package: Path = PACKAGE, lazy: bool = True) -> set[str]:
    """Every module `path` imports (the package's and others, such as `matplotlib.pyplot`):
    at module level and, with `lazy`, inside functions too; never under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = nodes_inside(tree, (ast.If,), test="TYPE_CHECKING")
    if not lazy:
        skipped |= nodes_inside(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    name, is_package = module_name(path, package), path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, name, is_package)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def ancestors(module: str) -> list[str]:
    """The packages whose __init__ importing `module` runs, the top-level package aside."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (the rules of the module docstring); read once,
    when a test first asks (not while pytest collects)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        found = imports_of(path, lazy=name != ROOT)
        found |= {parent for module in found for parent in ancestors(module)}
        graph[name] = {module for module in found if module in paths} - {name}
    return graph


def external_imports() -> dict[str, set[str]]:
    """module -> the top-level names of the other libraries it imports (torch, matplotlib, ...)."""
    return {module_name(p): {m.split(".")[0] for m in imports_of(p)} - {ROOT} for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    """The index in LAYERS of the top-level module or package `module` belongs to."""
    top = module.split(".")[1] if module != ROOT else ROOT
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"{module} is in no layer: add {top} to LAYERS (and to the README's map of the code)")


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


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


def modules_of(modules: Iterable[str], *tops: str) -> list[str]:
    """Those of `modules` that belong to the top-level modules or packages `tops`."""
    return sorted(m for m in modules if m.split(".")[1:2] and m.split(".")[1] in tops)




def test_the_graph_sees_imports_the_way_python_runs_them(tmp_path: Path) -> None:
    """A lazy import counts, an import under TYPE_CHECKING does not, a relative import is
    resolved, and importing a module of a package runs the package's __init__."""
    package = tmp_path / "transformer_mt"
    (package / "viz").mkdir(parents=True)
    module = package / "viz" / "figure.py"
    module.write_text("from typing import TYPE_CHECKING\nfrom . import curves\nimport matplotlib.pyplot\n"
                      "if TYPE_CHECKING:\n    from transformer_mt.runs.directory import RunDir\n"
                      "def draw():\n    from transformer_mt.training.loss import perplexity\n")
    found = imports_of(module, package)
    assert {"transformer_mt.viz.curves", "matplotlib.pyplot", "transformer_mt.training.loss"} <= found
    assert not {m for m in found if m.startswith("transformer_mt.runs.directory")}
    assert "transformer_mt.training.loss" not in imports_of(module, package, lazy=False)
    assert ancestors("transformer_mt.training.loss") == ["transformer_mt.training"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_no_import_cycle_in_the_package() -> None:
    """Lazy imports count: a cycle closed inside a function is a knot all the same. A module
    importing its own package (`from transformer_mt import __version__`, `from
    transformer_mt.training import fit` inside training/) is left out: Python runs that
    package's __init__ before the module, so it is there already."""
    graph = {name: {m for m in deps if not name.startswith(m + ".")} for name, deps in import_graph().items()}
    assert (cycle := find_cycle(graph)) is None, " -> ".join(cycle)


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    wrong = [f"{name} -> {dep}" for name, deps in sorted(import_graph().items()) for dep in sorted(deps)
             if layer_of(dep) > layer_of(name)]
    assert not wrong, "imports from a higher layer (LAYERS):\n" + "\n".join(wrong)


def test_config_imports_nothing_of_the_package() -> None:
    assert import_graph()["transformer_mt.common.config"] == set()


def test_model_code_imports_no_data_or_training_code() -> None:
    for name in modules_of(import_graph(), "model"):
        found = reachable(import_graph(), name)
        assert not modules_of(found, "data", "training"), name


@pytest.mark.parametrize("top", NEVER_TRAINING)
def test_inference_and_learner_code_never_imports_training(top: str) -> None:
    modules = modules_of(import_graph(), top)
    assert modules, top
    for name in modules:
        found = modules_of(reachable(import_graph(), name), "training")
        assert not found, f"{name} imports {', '.join(found)}"


def test_the_server_imports_neither_plots_nor_matplotlib() -> None:
    """Both views of the page (translation and generate) run without viz/ and matplotlib."""
    libraries = external_imports()
    for name in modules_of(import_graph(), "server"):
        found = reachable(import_graph(), name) | {name}
        assert not modules_of(found, "viz"), name
        assert not {m for m in found if "matplotlib" in libraries[m]}, name


def test_training_and_the_views_import_each_other_not() -> None:
    """training/, server/ and viz/ share a layer; none of them imports another."""
    for top, others in (("training", ("server", "viz")), ("server", ("training", "viz")), ("viz", ("training", "server"))):
        for name in modules_of(import_graph(), top):
            assert not modules_of(import_graph()[name], *others), name


def test_the_trainer_imports_neither_the_translator_nor_evaluation() -> None:
    """The loop's own imports (the training package's __init__, which offers `fit`, aside)."""
    assert "transformer_mt.inference.translator" in reachable(import_graph(), "transformer_mt.training.translation")  # the check sees
    graph = {name: deps - {"transformer_mt.training"} for name, deps in import_graph().items()}
    for module in ("transformer_mt.training.trainer", "transformer_mt.training.plan", "transformer_mt.training.task"):
        found = reachable(graph, module)
        assert not found & {"transformer_mt.inference.translator", "transformer_mt.common.evaluation"}, module
        assert not modules_of(found, "decoding"), module


def test_python_loads_no_more_than_the_graph_says() -> None:
    """The one interpreter: importing the server (both views) and the interop modules loads
    only package modules the graph reaches from them, no training, no viz, no matplotlib.
    It checks the reading above against Python's own (an import the parser missed shows here)."""
    starts = ["transformer_mt.server.app", *modules_of(import_graph(), "interop")]
    code = (f"import sys\nfor m in {starts!r}: __import__(m)\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('transformer_mt', 'matplotlib'))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    expected = set(starts).union(*(reachable(import_graph(), m) for m in starts)) | {ROOT}
    assert set(starts) <= loaded
    assert loaded <= expected, f"loaded but not in the graph: {sorted(loaded - expected)}"
    assert not {m for m in loaded if m.startswith(("transformer_mt.training", "transformer_mt.viz", "matplotlib"))}
