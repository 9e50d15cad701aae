"""benchmarks/decode_speed.py: every system at every thread count in its own process, a
CTranslate2 process without torch, each system shown at its best thread count, and a
system that does other work flagged, not ranked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmark_loader import BENCHMARKS, load_benchmark

bench = load_benchmark("decode_speed")


@pytest.mark.parametrize("cores,expected", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])])
def test_thread_counts_double_up_to_the_cores(cores: int, expected: list[int]) -> None:
    assert bench.thread_counts(cores) == expected


def test_a_system_that_emits_other_work_is_flagged() -> None:
    work = bench.make_workload(5, length=4)
    _, _, flag = bench.measure(lambda batch, beam, length: len(batch) * length, work, beam=1, batch_size=2)
    assert flag == ""
    _, _, flag = bench.measure(lambda batch, beam, length: len(batch) * (length - 1), work, beam=1, batch_size=2)
    assert flag == "emitted 15 target tokens, not 20"


def test_the_best_thread_count_is_per_system_and_never_a_flagged_row() -> None:
    def row(system: str, threads: int, speed: float, flag: str = "") -> dict:
        return {"preset": "small", "setting": "greedy-batch1", "system": system, "threads": threads,
                "tokens_per_s": speed, "flag": flag}

    rows = bench.mark_best([row("ours-fp32", 1, 300.0), row("ours-fp32", 2, 350.0),
                            row("ct2-int8", 1, 900.0), row("ct2-int8", 2, 90.0),
                            row("hf", 1, 500.0, flag="emitted 1 target tokens, not 20"), row("hf", 2, 200.0)])
    assert [(r["system"], r["threads"]) for r in rows if r["best"]] == [("ours-fp32", 2), ("ct2-int8", 1), ("hf", 2)]


def test_each_system_runs_in_its_own_process_and_ctranslate2_without_torch() -> None:
    """--profile: our rows carry the ms per token of their matrix products (less than the whole
    token), printed beside CTranslate2's whole token; CTranslate2's rows carry none."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install 'transformer-mt[interop]')")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "decode_speed.py"), "--presets", "tiny", "--sentences", "2",
                             "--length", "3", "--systems", "ours-fp32", "export-float32", "--threads", "1", "--json",
                             "--profile"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])["rows"]
    assert {(r["system"], r["setting"]) for r in rows} == {
        (system, setting) for system in ("ours-fp32", "export-float32") for setting in bench.SETTINGS}
    assert all(r["best"] and not r["flag"] for r in rows)
    assert {r["system"]: r["torch_loaded"] for r in rows} == {"ours-fp32": True, "export-float32": False}
    for row in rows:
        if row["system"] == "ours-fp32":
            assert 0 < row["products_ms_per_token"] < 1e3 / row["tokens_per_s"]
        else:
            assert "products_ms_per_token" not in row
    assert "greedy-batch1 ours-fp32 (1 threads)" in result.stdout and "CTranslate2 float32's whole token" in result.stdout
