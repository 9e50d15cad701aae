"""benchmarks/lm_speed.py --quick --json runs end to end: both systems, each in its own
process, training in fp32 (and bf16 where the CPU has it natively) and generation at batch 1
and 16. Only that it runs and reports sensible numbers is checked: its speed goals are the
benchmark's business, never the tests'. Its main() runs in the test's process, as
`python benchmarks/lm_speed.py` runs it (the two systems' processes are its own)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from benchmark_loader import BENCHMARKS, load_benchmark
from transformer_mt.common.device import has_fast_bf16

pytest.importorskip("transformers", reason="the Hugging Face side needs transformers (the interop extra)")


def test_quick_run_reports_every_row(monkeypatch, capsys) -> None:
    """benchmarks/lm_speed.py --quick as a user runs it (~9 s): each system in a process of its own
    (ours, Hugging Face's GPT-2), a few steps of each row."""
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "lm_speed.py"), "--quick", "--json"])
    code = load_benchmark("lm_speed").main()
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    training = ["fp32", "bf16"] if has_fast_bf16(torch.device("cpu")) else ["fp32"]
    assert [(row["what"], row["setting"]) for row in summary["rows"]] == (
        [("train", dtype) for dtype in training] + [("generate", "batch1"), ("generate", "batch16")])
    for row in summary["rows"]:
        assert row["ours_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0, row
        assert row["ratio"] == pytest.approx(row["ours_tokens_per_s"] / row["hf_tokens_per_s"], rel=1e-2)
    assert summary["peak_gflops"]["fp32"] > 0 and summary["peak_gflops"]["bf16"] > 0
    assert summary["hf_attn_implementation"] == "sdpa"
    assert summary["threads"]["ours"] >= 1 and summary["threads"]["hf"] >= 1
    assert "ours/HF" in out  # the printed table
