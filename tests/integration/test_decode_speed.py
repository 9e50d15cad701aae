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


@pytest.mark.parametrize("native_bf16", [True, False])
def test_ours_bf16_runs_by_default_only_where_the_cpu_has_native_bf16(native_bf16: bool, monkeypatch) -> None:
    import torch

    from transformer_mt.common import device

    monkeypatch.setattr(device, "has_fast_bf16", lambda _: native_bf16)
    systems = bench.default_systems(torch.device("cpu"))
    assert ("ours-bf16" in systems) == native_bf16
    assert [s for s in bench.SYSTEMS if s != "ours-bf16"] == [s for s in systems if s != "ours-bf16"]


def test_each_system_runs_in_its_own_process_and_ctranslate2_without_torch() -> None:
    """decode_speed.py on 2 sentences (~7 s): the time is each system's process starting, one
    importing torch, one CTranslate2 alone."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install 'transformer-mt[interop]')")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "decode_speed.py"), "--presets", "tiny", "--sentences", "2",
                             "--length", "3", "--systems", "ours-fp32", "export-float32", "--threads", "1", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])["rows"]
    assert {(r["system"], r["setting"]) for r in rows} == {
        (system, setting) for system in ("ours-fp32", "export-float32") for setting in bench.SETTINGS}
    assert all(r["best"] and not r["flag"] for r in rows)
    assert {r["system"]: r["torch_loaded"] for r in rows} == {"ours-fp32": True, "export-float32": False}


def test_profile_gives_our_rows_their_products_share_beside_ctranslate2s_whole_token() -> None:
    """--profile (in this process, at its thread count): an fp32 row's ms per target token in
    matrix products is part of its whole token; int8 rows, whose products the profiler does not
    name, and CTranslate2's rows get none; the printed line sets CTranslate2's token beside ours."""
    import torch

    counts = dict.fromkeys(bench.SETTINGS, 2)
    rows = bench.run_system("ours-fp32", "tiny", torch.get_num_threads(), counts, 3, {}, profile=True)
    assert [r["setting"] for r in rows] == list(bench.SETTINGS)
    for row in rows:
        assert 0 < row["products_ms_per_token"] < 1e3 / row["tokens_per_s"], row
    assert "products_ms_per_token" not in bench.run_system("ours-int8", "tiny", torch.get_num_threads(), counts, 3, {},
                                                           profile=True)[0]
    ct2 = {**rows[1], "system": "export-float32", "threads": 1, "tokens_per_s": 500.0}
    del ct2["products_ms_per_token"]
    lines = bench.product_lines(bench.mark_best([*rows, ct2]))
    assert lines[0].startswith("tiny beam4-batch32 ours-fp32") and "CTranslate2" not in lines[0]
    assert lines[1].endswith("CTranslate2 float32's whole token 2.000 (1 threads)"), lines
