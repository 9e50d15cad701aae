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
