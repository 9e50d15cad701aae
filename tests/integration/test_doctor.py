"""`transformer-mt doctor` end to end: a run trained here, a preset before training, the
page's panel, and bad input (one line, exit code 2). The checks themselves are tested one
by one in tests/unit/test_diagnosis.py; an imported checkpoint in test_annotated_import.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_mt.cli import main
from transformer_mt.diagnosis.report import CHECKS


def doctor_json(capsys, *args: str) -> dict:
    assert main(["-q", "doctor", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def ids(report: dict) -> list[str]:
    return [f["id"] for f in report["findings"]]


def test_a_trained_run_is_examined_with_its_validation_set(tiny_run: Path, capsys) -> None:
    report = doctor_json(capsys, str(tiny_run), "--limit", "40")
    assert sorted(ids(report) + report["checked"] + list(report["not_checked"])) == sorted(CHECKS)
    # the copy task learnt, to its ceiling: a healthy run, no finding at all
    assert ids(report) == []
    assert {"unknown_words", "source_ignored", "length", "truncation", "misaligned_pairs"} <= set(report["checked"])


def test_the_demos_recorded_training_gives_no_false_claim() -> None:
    """The metrics of a real `make demo` run (tests/data/demo_metrics.jsonl: its training loss near
    0.00 wobbles, its validation still moves at 99.9 char BLEU): no divergence, no undertraining,
    no memorization."""
    from transformer_mt.common.config import load_config
    from transformer_mt.diagnosis.case import Case
    from transformer_mt.diagnosis.metrics import memorization, schedule, undertrained
    from transformer_mt.runs.directory import read_events

    events = read_events(Path(__file__).resolve().parents[1] / "data" / "demo_metrics.jsonl")
    case = Case("demo", load_config("demo"), model=None, events=events)  # the metrics' checks read no weights
    assert [check(case) for check in (schedule, undertrained, memorization)] == [None, None, None]
    assert case.measured["schedule/diverged"] < 0.1 and case.measured["memorization"] < 0  # both measured
    assert "undertrained/loss" not in case.measured  # at its ceiling (99.8% exact): nothing left to gain


def test_a_preset_before_training_checks_its_initial_weights(capsys) -> None:
    before = doctor_json(capsys, "tiny", "--model.init=pytorch")
    assert "embedding_scale" in ids(before) and "source_ignored" in before["not_checked"]
    assert "embedding_scale" in doctor_json(capsys, "tiny")["checked"]
    assert main(["-q", "doctor", "tiny"]) == 0
    assert "checked, nothing found: embedding_scale" in capsys.readouterr().out


def test_the_page_shows_the_doctors_report(tiny_run: Path) -> None:
    from fastapi.testclient import TestClient

    from transformer_mt.server import TranslateLimits, TranslationService, create_app
    from transformer_mt.inference.translator import Translator

    translator = Translator.from_run(tiny_run, device="cpu")
    served = TestClient(create_app(TranslationService(translator, "tiny", TranslateLimits(), run=tiny_run)))
    report = served.get("/api/doctor").json()
    assert sorted(ids(report) + report["checked"] + list(report["not_checked"])) == sorted(CHECKS)
    assert 'id="doctor-panel"' in served.get("/").text
    alone = TestClient(create_app(TranslationService(translator, "tiny", TranslateLimits())))
    assert "transformer-mt doctor RUN" in alone.get("/api/doctor").json()["error"]


@pytest.mark.parametrize("args, message", [
    (["nowhere"], "nowhere: no such config file or preset"),
    (["tiny", "--src", "x.txt"], "give --src and --ref together"),
    (["RUN", "--model.d_model=8"], "overrides go with a preset or a config file"),
    (["tiny", "--model.n_heads=5"], "must be divisible by model.n_heads"),
])
def test_bad_input_is_one_line(tiny_run: Path, capsys, args: list[str], message: str) -> None:
    args = [str(tiny_run) if a == "RUN" else a for a in args]
    assert main(["-q", "doctor", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
