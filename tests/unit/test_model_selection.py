"""benchmarks/model_selection.py: per-sentence statistics that sum to sacreBLEU's corpus
BLEU, rules that pick on one half and are scored on the other, a run without an average or
checkpoints refused in one line. (Decoding real runs: tests/integration/test_time_to_quality.py.)"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from benchmark_loader import load_benchmark

ms = load_benchmark("model_selection")
WORDS = "ein Mann eine Frau Hund Kind spielt läuft auf der Straße im Park mit einem Ball , .".split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def noisy(lines: list[str], keep: float, seed: int) -> list[str]:
    """Each word kept with probability `keep`, else replaced by another."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in line.split()) for line in lines]


def test_summed_sentence_statistics_give_sacrebleus_corpus_bleu_of_any_subset() -> None:
    refs = sentences(60, seed=1)
    hyps = noisy(refs, keep=0.7, seed=2)
    stats = ms.sentence_stats(hyps, refs)
    assert stats.shape == (60, 10)
    rng = random.Random(3)
    for _ in range(5):
        subset = sorted(rng.sample(range(60), 30))
        expected = BLEU().corpus_score([hyps[i] for i in subset], [[refs[i] for i in subset]]).score
        assert ms.corpus_bleu(stats[np.asarray(subset)]) == pytest.approx(expected, abs=1e-9)


def test_rules_pick_on_one_half_and_are_scored_on_the_other() -> None:
    refs = sentences(80, seed=4)
    candidates = {
        "step_100": ms.sentence_stats(noisy(refs, 0.5, seed=5), refs),
        "step_200": ms.sentence_stats(refs, refs),  # perfect on every sentence: any half prefers it
        "average": ms.sentence_stats(noisy(refs, 0.8, seed=6), refs),
    }
    held_out = ms.held_out_bleu(candidates, splits=5)
    assert held_out["trainer"] == held_out["best checkpoint"] == held_out["last"] == pytest.approx(100.0)
    assert 20 < held_out["average"] < 100


def test_the_average_wins_the_trainers_rule_only_where_it_beats_the_best_checkpoint() -> None:
    assert ms.rule_trainer({"step_1": 30.0, "step_2": 31.0, "average": 30.5}) == "step_2"
    assert ms.rule_trainer({"step_1": 30.0, "step_2": 31.0, "average": 31.5}) == "average"
    assert ms.rule_last({"step_1": 30.0, "step_2": 29.0, "average": 31.5}) == "step_2"


def test_a_run_without_an_average_or_checkpoints_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "config.yaml").write_text("model: {}\n")
    (tmp_path / "tokenizer.model").write_bytes(b"")
    assert ms.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "average.safetensors: missing" in err
    (tmp_path / "average.safetensors").write_bytes(b"")
    assert ms.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no step_N.pt checkpoint" in err
