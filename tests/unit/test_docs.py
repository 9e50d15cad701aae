"""The docs point at what exists: every `path.py::name` of docs/paper.md names a file of the
repository that defines `name` (a class or function; `Class.method` too), every link and anchor
resolves, every config key they name is an option, and the time-to-quality figures are the
committed results' means."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from benchmark_loader import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`((?:src|tests)/[\w/]+\.py)::([A-Za-z_][\w.]*)`")


def references(doc: Path) -> list[tuple[str, str]]:
    return REFERENCE.findall(doc.read_text(encoding="utf-8").replace("\n  ", " "))


@pytest.mark.parametrize("doc", ["docs/paper.md", "docs/paper.zh.md"])
def test_every_code_reference_exists(doc: str) -> None:
    found = references(ROOT / doc)
    assert len(found) > 40, "the page lost its references"
    missing = []
    for path, name in found:
        source = ROOT / path
        defined = source.is_file() and all(
            re.search(rf"^\s*(?:def|class) {re.escape(part)}\b", source.read_text(encoding="utf-8"), re.M)
            for part in name.split("."))
        if not defined:
            missing.append(f"{path}::{name}")
    assert not missing, f"{doc} names code that does not exist: {missing}"


def test_both_languages_name_the_same_code() -> None:
    english, chinese = (set(references(ROOT / doc)) for doc in ("docs/paper.md", "docs/paper.zh.md"))
    assert english == chinese


LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown page: lower case, punctuation dropped,
    spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {target.split("#")[0] for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "pages under docs/ that the README does not link"


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_and_anchor_exists(page: str) -> None:
    source = ROOT / page
    broken = []
    for target in LINK.findall(source.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s): not checked offline
        path, _, anchor = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{page} links to what does not exist: {broken}"


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    """CI and a newcomer run exactly these; the first code block of the README must stay them."""
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S).group(1)
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == ["make demo", "make test"]


def test_the_readme_and_the_measurements_stay_reference_pages() -> None:
    """The README is instructions and pointers, docs/benchmarks.md one current table per benchmark:
    the history stays in git and benchmarks/results/."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
    assert len((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()) < 400


KEY = re.compile(r"`-{0,2}(model|data|train|decode)\.(\w+)")


@pytest.mark.parametrize("page", PAGES)
def test_every_config_key_a_page_names_is_an_option(page: str) -> None:
    from transformer_mt.common.config import Config

    sections = typing.get_type_hints(Config)
    options = {section: {field.name for field in dataclasses.fields(sections[section])} for section in sections}
    named = KEY.findall((ROOT / page).read_text(encoding="utf-8"))
    unknown = sorted({f"{section}.{key}" for section, key in named if key not in options[section]})
    assert not unknown, f"{page} names config keys that do not exist: {unknown}"


def test_the_time_to_quality_figures_are_the_committed_results_means() -> None:
    """The README's sentence and docs/benchmarks.md's table give each recipe's test_2016 BLEU as
    the mean of its recorded runs on the usual hosts (the runs of a much faster host apart, as
    the chart draws them): en->de and de->en, the hour and the half hour."""
    ttq = load_benchmark("time_to_quality")
    records = [json.loads(line) for line in ttq.RESULTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    runs = {preset: ttq.todays_runs(records, preset) for preset in ("multi30k_en_de", "multi30k_de_en")}
    charted = [r for by_label in runs.values() for label, rs in by_label.items()
               if not label.endswith(ttq.LOWERCASED) for r in rs]

    def mean(preset: str, label: str, budget: float) -> str:
        typical, _ = ttq.split_by_host(runs[preset][label], charted)
        bleu = [r["test"]["test_2016_flickr"]["bleu"] for r in typical if float(r["budget_minutes"]) == budget]
        assert bleu, (preset, label, budget)
        return f"{sum(bleu) / len(bleu):.1f}"

    hour, half = ("", 60.0), (" (dropout 0.2)", 30.0)
    en_hour, de_hour = mean("multi30k_en_de", *hour), mean("multi30k_de_en", *hour)
    en_half, de_half = mean("multi30k_en_de", *half), mean("multi30k_de_en", *half)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"\*\*How long to a good translator\?\*\*(.*?)\n\n", readme, re.S).group(1)
    assert re.findall(r"\b\d\d\.\d\b", sentence) == [en_hour, de_hour, en_half, de_half]
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = page[page.index("## Time to quality"):page.index("### What was tried")]
    assert re.findall(r"\*\*(\d\d\.\d)\*\*", section) == [en_hour, en_half, de_hour, de_half]


def test_the_learner_models_table_is_the_committed_results() -> None:
    """docs/your_model.md and its Chinese page show the table benchmarks/learner_models.py --page
    makes of its committed records, number for number."""
    learner = load_benchmark("learner_models")
    table = learner.page_table(learner.read_records())
    assert table.count("\n") >= 3  # the demo rows at least
    for page in ("docs/your_model.md", "docs/your_model.zh.md"):
        assert table in (ROOT / page).read_text(encoding="utf-8"), page
