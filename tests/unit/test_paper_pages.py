"""The pages that explain the paper cannot drift from the code they show.

docs/paper.md and docs/paper.zh.md: every ```python block is one of two kinds. An excerpt
starts with a line `# path/to/file.py` and its lines, split into pieces at `# ...` lines
(lines left out), appear verbatim and in order in that file. An example is followed by a
```text block: the test runs it and it must print exactly that text. The Chinese page shows
the same blocks as the English one.

docs/plots.md: every `plot ...` command it shows parses with the CLI's own parser, and an
example drawn on the demo run names a layer the demo model has."""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAPER_PAGES = ["docs/paper.md", "docs/paper.zh.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
EXCERPT = re.compile(r"# ((?:src|tests|benchmarks)/[\w/.-]+\.py)\n")
GAP = "# ..."
LONGEST_EXCERPT = 15  # lines: an excerpt sits next to its equation, it does not replace the file


@dataclass(frozen=True)
class Block:
    language: str
    body: str
    start: int  # offsets in the page
    end: int


def fenced_blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [Block(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]


def split_page(page: str) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """The excerpts (file, pieces) and the examples (code, expected output) of `page`; fails
    on a python block of neither kind, so no code on the page goes unchecked."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = fenced_blocks(page)
    excerpts, examples = [], []
    for block, after in zip(blocks, [*blocks[1:], None]):
        if block.language != "python":
            continue
        marker = EXCERPT.match(block.body)
        if marker:
            lines = block.body[marker.end():].splitlines()
            pieces = ["\n".join(group) for gap, group in itertools.groupby(lines, lambda line: line.strip() == GAP)
                      if not gap]
            excerpts.append((marker.group(1), pieces))
        elif after is not None and after.language == "text" and not text[block.end:after.start].strip():
            examples.append((block.body, after.body))
        else:
            pytest.fail(f"{page}: a python block that is neither an excerpt (first line `# path.py`) nor an "
                        f"example followed by its ```text output: {block.body[:80]!r}")
    return excerpts, examples


@pytest.mark.parametrize("page", PAPER_PAGES)
def test_every_excerpt_is_verbatim_in_the_file_it_names(page: str) -> None:
    excerpts, _ = split_page(page)
    assert len(excerpts) >= 8, "the page lost its code excerpts"
    drifted = []
    for path, pieces in excerpts:
        source = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else ""
        assert pieces and sum(piece.count("\n") + 1 for piece in pieces) <= LONGEST_EXCERPT, (path, pieces)
        position = 0
        for piece in pieces:
            found = source.find(f"\n{piece}\n", position)  # whole lines only
            if found < 0:
                drifted.append(f"{path}: {piece.splitlines()[0].strip()!r}")
                break
            position = found + len(piece) + 1
    assert not drifted, f"{page} shows code that is not (or no longer) in its file: {drifted}"


EXAMPLES = split_page("docs/paper.md")[1]


@pytest.mark.parametrize("code, expected", EXAMPLES, ids=[f"example{i + 1}" for i in range(len(EXAMPLES))])
def test_every_example_prints_the_output_shown_under_it(code: str, expected: str) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/paper.md", "exec"), {"__name__": "paper_example"})  # noqa: S102 (the page's own code)
    assert printed.getvalue().rstrip("\n") == expected.rstrip("\n")


def test_the_page_has_its_examples() -> None:
    assert len(EXAMPLES) >= 5, "docs/paper.md lost its runnable examples"
    walk_through = next(code for code, output in EXAMPLES if "log-probabilities" in output)
    assert "build_model" in walk_through and "tokenizer.encode" in walk_through


def test_the_chinese_page_shows_the_same_code_and_output() -> None:
    def code(page: str) -> list[tuple[str, str]]:
        return [(block.language, block.body) for block in fenced_blocks(page) if block.language in ("python", "text")]

    assert code("docs/paper.zh.md") == code("docs/paper.md")


# ---- docs/plots.md --------------------------------------------------------------------
PLOT_COMMAND = re.compile(r"`(?:transformer-mt )?(plot [^`]+)`")
PLACEHOLDERS = {"RUN": "runs/demo", "FILE": "figure.png", "CONFIG": "base"}


def plot_commands() -> list[str]:
    text = (ROOT / "docs/plots.md").read_text(encoding="utf-8").replace("\\|", "|")
    commands = [" ".join(command.split()) for command in PLOT_COMMAND.findall(text)]
    return [command for command in commands if command.split()[1].islower()]  # not `plot FIGURE`


def argument_lists(command: str) -> list[list[str]]:
    """The command with its optional parts ([...]) given, placeholders filled, and one
    argument list per alternative of a choice written a|b|c."""
    words = [PLACEHOLDERS.get(word, word) for word in shlex.split(command.replace("[", "").replace("]", ""))]
    choices = [word.split("|") if "|" in word else [word] for word in words]
    widest = max(len(options) for options in choices)
    return [[options[min(i, len(options) - 1)] for options in choices] for i in range(widest)]


def test_every_plot_command_of_plots_md_parses() -> None:
    from transformer_mt.cli import build_parser

    commands = plot_commands()
    assert len(commands) >= 10, "docs/plots.md lost its commands"
    figures = {command.split()[1] for command in commands}
    assert figures >= {"encodings", "heads", "embeddings", "masks", "schedule", "smoothing", "curves", "attention"}
    for command in commands:
        for argv in argument_lists(command):
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"docs/plots.md: `transformer-mt {command}` does not parse ({argv})")


def test_attention_examples_on_the_demo_name_a_layer_it_has() -> None:
    from transformer_mt.common.config import load_config

    model = load_config("demo").model
    layers = min(model.n_layers, model.decoder_layers or model.n_layers)
    shown = [command for command in plot_commands() if "runs/demo" in command and "--layer" in command]
    assert shown, "docs/plots.md shows no single-head example on the demo run"
    for command in shown:
        layer = int(re.search(r"--layer (\d+)", command).group(1))
        head = int(re.search(r"--head (\d+)", command).group(1))
        assert 1 <= layer <= layers and 1 <= head <= model.n_heads, command


def test_the_python_example_of_plots_md_imports_what_exists() -> None:
    text = (ROOT / "docs/plots.md").read_text(encoding="utf-8")
    code = next(m.group(2) for m in FENCE.finditer(text) if m.group(1) == "python")
    imports = "\n".join(line for line in code.splitlines() if line.startswith(("from ", "import ")))
    assert imports
    exec(compile(imports, "docs/plots.md", "exec"), {})  # noqa: S102
