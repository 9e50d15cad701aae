"""benchmarks/ablations.py runs two tiny rows end to end and keeps finished rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmark_loader import load_benchmark
from run_helpers import write_multi30k


def test_two_tiny_rows_run_and_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    ablations = load_benchmark("ablations")
    write_multi30k(tmp_path / "data")
    out = tmp_path / "runs"
    argv = ["ablations.py", "--data", str(tmp_path / "data"), "--out", str(out), "--rows", "notes,ours",
            "--steps", "4", "--quick", "--json"]
    monkeypatch.setattr(sys, "argv", argv)
    assert ablations.main() == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["row"] for r in rows] == ["notes", "ours"]
    assert all(r["steps"] == 4 and 0 <= r["bleu"] <= 100 and r["parameters"] > 0 for r in rows)
    assert (out / "notes" / "source.model").is_file()  # the notes' separate word vocabularies
    assert (out / "ours" / "tokenizer.model").is_file()  # ours: one joint BPE vocabulary
    kept = (out / "results.jsonl").read_text()
    monkeypatch.setattr(sys, "argv", argv + ["--markdown", "--chart", str(tmp_path / "chart.png")])
    assert ablations.main() == 0  # a second sitting: both rows are skipped, nothing trains again
    assert (out / "results.jsonl").read_text() == kept
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1]) == rows
    assert any(line.startswith("| `notes` |") for line in printed)  # the Markdown table
    assert any(line.startswith("| `ours` |") and "(A) h=4: 25.5" in line for line in printed)
    assert (tmp_path / "chart.png").stat().st_size > 1000


def test_every_row_is_a_valid_config() -> None:
    """Each row's overrides load on the preset (keys and values checked), and the rows the
    issue names are there."""
    from transformer_mt.config import load_config

    ablations = load_benchmark("ablations")
    rows = ablations.variants()
    assert {"notes", "notes_10k", "notes_n4", "notes_n6", "ours", "E_learned"} <= set(rows)
    for name, (_, overrides) in rows.items():
        cfg = load_config("multi30k_de_en", ablations.data_overrides(Path("data")) + overrides)
        assert cfg.model.n_layers >= 1, name
    notes = load_config("multi30k_de_en", rows["notes"][1])
    assert (notes.data.vocab_type, notes.data.joint_vocab, notes.train.schedule) == ("word", False, "constant")
    # the preset's keys the rows were measured with, whatever the preset says today
    ours = load_config("multi30k_de_en", ablations.PRESET_AS_MEASURED + rows["ours"][1])
    assert (ours.train.budget_minutes, ours.train.lr_scale, ours.model.attention_dropout) == (0, 0.4, -1)
    assert (ours.model.n_layers, ours.model.d_model, ours.model.d_ff, ours.data.max_tokens) == (2, 128, 256, 4096)
