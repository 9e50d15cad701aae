"""benchmarks/step_proxy_search.py: candidates parsed from the command line, the budget's
plan given as overrides the config accepts, and a failed run reported with its log's end."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from benchmark_loader import load_benchmark

from transformer_mt.config import load_config


def test_candidates_are_parsed_or_refused_in_one_line() -> None:
    search = load_benchmark("step_proxy_search")
    c = search.parse_candidate("dec71@8360=--model.n_layers=7,--model.decoder_layers=1", 7600)
    assert (c.name, c.steps, c.overrides) == ("dec71", 8360, ["--model.n_layers=7", "--model.decoder_layers=1"])
    base = search.parse_candidate("base=", 7600)
    assert (base.name, base.steps, base.overrides) == ("base", 7600, [])
    for text, message in [("nothing", "write NAME[@STEPS]=OVERRIDE"), ("a@many=--train.seed=2", "whole number"),
                          ("a=train.seed=2", "is not an override")]:
        with pytest.raises(SystemExit, match=re.escape(message)):
            search.parse_candidate(text, 7600)


def test_the_plan_is_what_the_config_then_trains() -> None:
    search = load_benchmark("step_proxy_search")
    train = load_config("multi30k_en_de", search.plan_overrides(7600)).train
    assert (train.max_steps, train.budget_minutes, train.schedule) == (7600, 0, "linear")
    assert (train.valid_every, train.average_last, train.average_every) == (3800, 5, 152)
    assert (train.patience, train.max_seconds) == (0, 0)


def test_a_failed_run_is_counted_and_its_log_end_printed(tmp_path: Path, capsys) -> None:
    search = load_benchmark("step_proxy_search")
    args = argparse.Namespace(parallel=2, preset="multi30k_en_de", out=tmp_path / "out", data=tmp_path)
    finished = []
    bad = search.parse_candidate("typo=--train.sede=2", 10)
    assert search.run_all([bad], args, finished.append) == 1 and finished == []
    out = capsys.readouterr().out
    assert "typo: failed (exit 2)" in out and "train.sede: unknown key" in out
    assert (tmp_path / "out" / "typo.log").is_file()
