"""benchmarks/doctor_zoo.py: how a run is judged and scored, every id accounted for, and the
recorded zoo's result (benchmarks/results/doctor_zoo.jsonl, from a real run: the runs take tens
of minutes, the tests read the record)."""

from __future__ import annotations

import json

import pytest

from benchmark_loader import load_benchmark
from transformer_mt.diagnosis.report import CHECKS, FOLLOWS

zoo = load_benchmark("doctor_zoo")


def test_a_run_is_judged_on_its_root_cause_and_what_may_follow_from_it() -> None:
    run = zoo.Run("diverged", "a rate far too high", ("schedule",))
    assert set(run.may_follow) == {"undertrained", *FOLLOWS["schedule"]}
    row = zoo.judge(run, ["schedule", "repetition", "unknown_words"])
    assert row["missed"] == [] and row["false"] == ["unknown_words"]
    assert zoo.judge(run, ["repetition"])["missed"] == ["schedule"]
    assert zoo.judge(zoo.Run("demo", "", (), ()), ["undertrained"])["false"] == ["undertrained"]


def test_recall_and_precision_count_hits_misses_and_false_alarms() -> None:
    rows = [zoo.judge(zoo.Run("a", "", ("schedule",)), ["schedule"]),
            zoo.judge(zoo.Run("b", "", ("schedule",)), []),
            zoo.judge(zoo.Run("c", "", (), ()), ["schedule", "length"])]
    found = zoo.scores(rows)
    assert found["ids"]["schedule"] == {"tp": 1, "fn": 1, "fp": 1, "recall": 0.5, "precision": 0.5}
    assert found["ids"]["length"]["precision"] == 0.0 and found["ids"]["length"]["recall"] is None
    assert found["recall"] == pytest.approx(1 / 2) and found["precision"] == pytest.approx(1 / 3)


def test_every_id_is_provoked_by_a_fault_or_listed_with_why() -> None:
    provoked = {check for run in zoo.RUNS for check in run.expected}
    assert provoked | set(zoo.NOT_PROVOKED) == set(CHECKS) and not provoked & set(zoo.NOT_PROVOKED)
    assert all(run.expected == () for run in zoo.RUNS if run.name.startswith("healthy"))
    assert all(run.allowed in ((), ("undertrained",)) for run in zoo.RUNS)  # the rest is report.FOLLOWS


def test_the_recorded_zoo_has_no_miss_and_no_false_alarm() -> None:
    records = [json.loads(line) for line in zoo.RESULTS.read_text(encoding="utf-8").splitlines()]
    last = records[-1]
    assert {row["run"] for row in last["runs"]} == {run.name for run in zoo.RUNS}
    assert last["recall"] == 1.0 and last["precision"] == 1.0
    assert all(row["found"] == [] for row in last["runs"] if row["run"] in ("healthy_demo", "healthy_copy"))
