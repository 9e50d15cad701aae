"""The docs point at code that exists: every `path.py::name` of docs/paper.md names a file
of the repository that defines `name` (a class or function; `Class.method` too)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
