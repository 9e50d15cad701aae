"""benchmarks/lm_speed.py --quick --json runs end to end: both systems, each in its own
process, training in fp32 (and bf16 where the CPU has it natively) and generation at batch 1
and 16. Only that it runs and reports sensible numbers is checked: its speed goals are the
benchmark's business, never the tests'."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmark_loader import BENCHMARKS
from transformer_mt.common.device import has_fast_bf16

pytest.importorskip("transformers", reason="the Hugging Face side needs transformers (the interop extra)")


def test_quick_run_reports_every_row() -> None:
    result = subprocess.run([sys.executable, str(BENCHMARKS / "lm_speed.py"), "--quick", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    training = ["fp32", "bf16"] if has_fast_bf16(torch.device("cpu")) else ["fp32"]
    assert [(row["what"], row["setting"]) for row in summary["rows"]] == (
        [("train", dtype) for dtype in training] + [("generate", "batch1"), ("generate", "batch16")])
    for row in summary["rows"]:
        assert row["ours_tokens_per_s"] > 0 and row["hf_tokens_per_s"] > 0, row
        assert row["ratio"] == pytest.approx(row["ours_tokens_per_s"] / row["hf_tokens_per_s"], rel=1e-2)
    assert summary["peak_gflops"]["fp32"] > 0 and summary["peak_gflops"]["bf16"] > 0
    assert summary["hf_attn_implementation"] == "sdpa"
    assert summary["threads"]["ours"] >= 1 and summary["threads"]["hf"] >= 1
    assert "ours/HF" in result.stdout  # the printed table
