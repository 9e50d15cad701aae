"""The doctor's checks, each on a constructed case that must fire and one that must not.

The cases are tiny untrained models (d_model 32) with word vocabularies; what a check reads
of training (metrics, translations, losses) is given directly, so every case takes
milliseconds. Expected values are computed here from their definitions, not by the checks."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from pathlib import Path

import numpy
import pytest
import torch

from transformer_mt.common.config import Config, DataConfig, ModelConfig, TrainConfig
from transformer_mt.data.tokenizers.word_vocab import WordVocabTokenizer, build_vocabulary
from transformer_mt.diagnosis import thresholds
from transformer_mt.diagnosis.case import Case, NotChecked
from transformer_mt.diagnosis.metrics import memorization, schedule, undertrained
from transformer_mt.diagnosis.outputs import length, repetition, source_ignored
from transformer_mt.diagnosis.report import CHECKS, diagnose
from transformer_mt.diagnosis.text import misaligned_pairs, truncation, unknown_words
from transformer_mt.diagnosis.weights import cloned_init, embedding_scale, tied_scale
from transformer_mt.model.transformer import build_model
from transformer_mt.runs.directory import RunDir
from transformer_mt.inference.translator import Hypothesis

SOURCES = ["ein mann fährt rad", "eine frau liest", "zwei hunde spielen im park", "ein kind lacht"]
REFERENCES = ["a man rides a bike", "a woman reads", "two dogs play in the park", "a child laughs"]


def case_of(init: str = "xavier", tie: bool = False, norm_first: bool = True, schedule_name: str = "paper",
            sources: list[str] = SOURCES, references: list[str] = REFERENCES, **fields) -> Case:
    tokenizer = WordVocabTokenizer(build_vocabulary(SOURCES), build_vocabulary(REFERENCES), 50)
    model_cfg = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, init=init, tie_embeddings=tie,
                            share_vocab=False, norm_first=norm_first, src_vocab_size=tokenizer.source_size,
                            tgt_vocab_size=len(tokenizer))
    plan = TrainConfig(schedule=schedule_name, max_steps=1)  # the given events ran their plan to its end
    cfg = Config(model=model_cfg, data=DataConfig(joint_vocab=False), train=plan)
    torch.manual_seed(0)
    return Case("test", cfg, build_model(model_cfg).eval(), tokenizer, sources=list(sources),
                references=list(references), pairs_from="the test pairs", **fields)


def given(case: Case, hypotheses: list[str] | None = None, losses: tuple[float, float] | None = None,
          finished: list[bool] | None = None) -> Case:
    """The case with its translations and losses given instead of computed."""
    if hypotheses is not None:
        done = finished or [True] * len(hypotheses)
        case.__dict__["hypotheses"] = [Hypothesis(h, h.split(), [], 0.0, f) for h, f in zip(hypotheses, done)]
    if losses is not None:
        case.__dict__["losses"] = losses
    return case


def train_events(*losses: float) -> list[dict]:
    return [{"event": "train", "step": i + 1, "loss": loss} for i, loss in enumerate(losses)]


def valid_event(step: int, loss: float, bleu: float) -> dict:
    return {"event": "valid", "step": step, "valid_loss": loss, "bleu": bleu}


# ---- weights ---------------------------------------------------------------------------------------
def test_embedding_scale_fires_on_pytorchs_n01_embeddings_times_sqrt_d_model() -> None:
    found = embedding_scale(case_of(init="pytorch"))
    # N(0, 1) x sqrt(32) against the sinusoid's RMS of sqrt(1/2) (sin^2 + cos^2 = 1 per pair)
    assert found is not None and found.value == pytest.approx(math.sqrt(32) / math.sqrt(0.5), rel=0.1)
    assert embedding_scale(case_of(init="xavier")) is None


def test_cloned_init_fires_on_deep_copies_and_on_copies_that_drifted() -> None:
    assert cloned_init(case_of(init="notes")).value == pytest.approx(1.0)  # the notes' make_model
    case = case_of()
    assert cloned_init(case) is None  # independent draws
    with torch.no_grad():
        first = case.model.encoder.layers[0].self_attn
        first.in_proj.weight[32:64] = first.in_proj.weight[:32]  # W^K = W^Q, as one Linear deep-copied
        found = cloned_init(case)
        assert found is not None and found.value == pytest.approx(1.0) and "W^Q and" in found.message
        first.in_proj.weight[32:64] += 0.3 * first.in_proj.weight[:32].std() * torch.randn(32, 32)
        assert cloned_init(case).value == pytest.approx(1 / math.sqrt(1 + 0.3 ** 2), abs=0.03)


def test_tied_scale_fires_on_a_tied_n01_embedding_only() -> None:
    found = tied_scale(case_of(init="pytorch", tie=True))
    assert found is not None and found.value == pytest.approx(math.sqrt(32), rel=0.1)
    assert tied_scale(case_of(init="xavier", tie=True)) is None
    assert tied_scale(case_of(init="pytorch", tie=False)) is None


# ---- text ------------------------------------------------------------------------------------------
def test_unknown_words_counts_the_words_outside_either_vocabulary() -> None:
    found = unknown_words(case_of(sources=["ein mann fährt motorrad", "eine katze liest"],
                                  references=["a man rides a bike", "a woman reads"]))
    assert found is not None and found.value == pytest.approx(2 / 7, abs=1e-4)  # motorrad, katze of 7 source words
    assert unknown_words(case_of()) is None
    with pytest.raises(NotChecked):
        unknown_words(case_of(sources=[], references=[]))


@pytest.mark.parametrize("filtered, fires", [(50, True), (5, False)])
def test_truncation_reads_what_prepare_counted(tmp_path: Path, filtered: int, fires: bool) -> None:
    (tmp_path / "prepared").mkdir()
    counts = {"lines": 1010, "skipped": 10, "filtered": filtered}
    (tmp_path / "prepared" / "manifest.json").write_text(json.dumps({"counts": {"train": counts}}))
    found = truncation(case_of(run=RunDir(tmp_path)))
    assert (found is not None) == fires and (not fires or found.value == pytest.approx(filtered / 1000))


def test_truncation_is_not_checked_without_prepared_data(tmp_path: Path) -> None:
    with pytest.raises(NotChecked):
        truncation(case_of(run=RunDir(tmp_path)))


# ---- metrics ----------------------------------------------------------------------------------------
def test_memorization_compares_the_training_and_validation_losses() -> None:
    found = memorization(case_of(events=[*train_events(0.5), valid_event(1, 3.0, 12.0)]))
    assert found is not None and found.value == pytest.approx(2.5)
    assert memorization(case_of(events=[*train_events(2.0), valid_event(1, 2.4, 30.0)])) is None


def test_memorization_of_an_imported_checkpoint_uses_its_saved_loss_and_the_sentences() -> None:
    found = memorization(given(case_of(imported={"loss": 0.4}), losses=(3.0, 3.5)))
    assert found is not None and found.value == pytest.approx(2.6)
    with pytest.raises(NotChecked):
        memorization(case_of())


def test_schedule_fires_on_post_norm_at_a_constant_rate() -> None:
    assert schedule(case_of(norm_first=False, schedule_name="constant")).value == "post-norm, constant rate"
    assert schedule(case_of(norm_first=False, schedule_name="paper")) is None
    assert schedule(case_of(norm_first=True, schedule_name="constant")) is None


def test_schedule_fires_on_a_smoothed_loss_that_rose_by_a_margin_in_nats() -> None:
    """Divergence is a rise of the smoothed loss by more than thresholds.DIVERGED nats; one noisy
    batch is not one, and neither is a loss near 0 that wobbles (the demo: 0.00 to 0.01)."""
    rising = [6.0, 5.0, 4.0, 3.0, 3.0, 3.0, 3.0, 3.0, 4.0, 5.0, 6.0, 6.0, 6.0, 6.0]
    found = schedule(case_of(events=train_events(*rising)))
    low, last = statistics.median(rising[3:8]), statistics.median(rising[-5:])
    assert found is not None and found.value == pytest.approx(last - low) and "diverged" in found.message
    assert schedule(case_of(events=train_events(1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0))) is None
    assert schedule(case_of(events=train_events(*[0.001] * 10, *[0.012] * 10))) is None
    assert schedule(case_of(events=train_events(3.0, 2.0, float("nan")))).value == "not finite"


def test_schedule_fires_on_a_loss_stopped_at_the_unigram_entropy() -> None:
    tokens = Counter(w for r in REFERENCES for w in [*r.split(), "</s>"])
    entropy = -sum(n / sum(tokens.values()) * math.log(n / sum(tokens.values())) for n in tokens.values())
    found = schedule(case_of(events=train_events(entropy, entropy)))
    assert found is not None and found.value == pytest.approx(1.0)
    assert schedule(case_of(events=train_events(0.5 * entropy, 0.5 * entropy))) is None


def test_a_plateau_is_advised_from_the_rate_the_run_logged() -> None:
    """docs/ablations.md measured equation 3's peak (4.1e-3 at d_model 128) to cost a small model
    2.1 BLEU: the doctor advises a lower peak there, and a higher rate where the rate was tiny."""
    def plateau(lr: float) -> str:
        events = [{"event": "train", "step": i, "loss": 5.0, "lr": lr} for i in range(1, 4)]
        return schedule(case_of(events=events, references=["a a a a", "a a a a"] * 2)).fix
    assert "lower peak" in plateau(4.1e-3) and "--train.schedule=paper" not in plateau(4.1e-3)
    assert "higher rate" in plateau(1e-6)


def test_undertrained_reads_gains_that_matter_in_the_last_two_validations() -> None:
    rising = [valid_event(1000, 3.0, 10.0), valid_event(2000, 2.8, 12.0)]
    assert undertrained(case_of(events=rising)).value == pytest.approx(2.0)
    flat = [valid_event(1000, 3.0, 10.0), valid_event(2000, 2.995, 10.2)]
    assert undertrained(case_of(events=flat)) is None
    near_zero = [valid_event(400, 0.04, 99.0), valid_event(800, 0.03, 99.2)]  # 25% of a tiny loss: 0.01 nats
    assert undertrained(case_of(events=near_zero)) is None
    with pytest.raises(NotChecked):
        undertrained(case_of(events=flat[:1]))


def test_undertrained_never_fires_at_the_tasks_ceiling_and_names_a_plan_cut_short() -> None:
    done = [{**valid_event(400, 0.5, 90.0), "exact_match": 0.6}, {**valid_event(800, 0.1, 99.0), "exact_match": 0.97}]
    assert undertrained(case_of(events=done)) is None
    cut = case_of(events=[valid_event(100, 3.0, 10.0), valid_event(200, 2.8, 12.0)])
    cut.cfg = Config(model=cut.cfg.model, train=TrainConfig(max_steps=900, max_seconds=30))
    assert "stopped at step 200 of its plan's 900: train.max_seconds=30 cut it" in undertrained(cut).message
    cut.events += train_events(9.0, 9.0)  # at the unigram plateau, but cut short: not the schedule's fault
    assert schedule(cut) is None


# ---- translations --------------------------------------------------------------------------------------
def test_source_ignored_fires_on_one_translation_for_every_source() -> None:
    found = source_ignored(given(case_of(), ["a man in a red"] * 4, (3.0, 3.1)))
    assert found is not None and found.value == 1.0
    assert source_ignored(given(case_of(), REFERENCES, (1.5, 4.0))) is None


def test_source_ignored_fires_when_shuffled_sources_cost_no_loss() -> None:
    found = source_ignored(given(case_of(), REFERENCES, (3.9, 4.0)))
    assert found is not None and found.value == pytest.approx(0.1 / 4.0)


def test_length_compares_word_counts() -> None:
    short = [" ".join(r.split()[: len(r.split()) // 2]) for r in REFERENCES]
    found = length(given(case_of(), short))
    words = sum(len(r.split()) for r in REFERENCES)
    assert found is not None and found.value == pytest.approx(sum(len(s.split()) for s in short) / words, abs=1e-3)
    assert length(given(case_of(), REFERENCES)) is None


def test_repetition_counts_loops_not_outputs_cut_at_the_length_limit() -> None:
    looping = ["a man in a red and a red and a red", *REFERENCES[1:]]
    assert repetition(given(case_of(), looping)).value == 0.25
    assert repetition(given(case_of(), REFERENCES, finished=[True, False, True, True])) is None
    assert repetition(given(case_of(), REFERENCES)) is None


def test_outputs_cut_at_the_length_limit_are_a_length_finding_naming_the_limit() -> None:
    cut = [" ".join(r.split()[:2]) for r in REFERENCES]
    found = length(given(case_of(), cut, finished=[False, False, True, False]))
    assert found is not None and found.value == 0.75
    assert "decode.max_len_a" in found.message and "decode.max_len_b = 50" in found.message


def training_text(tmp_path: Path, targets: list[str]) -> RunDir:
    """A run folder whose config names training files: SOURCES' sentences and `targets`."""
    sources = [f"{s} {'und ' * (i % 7)}" for i, s in enumerate(SOURCES * 10)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "train.tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    run = RunDir(tmp_path / "run")
    run.root.mkdir(parents=True)
    run.write_config(Config(data=DataConfig(train_src=str(tmp_path / "train.src"), train_tgt=str(tmp_path / "train.tgt"))))
    return run


def test_misaligned_pairs_fires_on_targets_shuffled_against_their_sources(tmp_path: Path) -> None:
    """A sentence and its translation are long or short together; shuffled lines are not."""
    aligned = [f"{r} {'and ' * (i % 7)}" for i, r in enumerate(REFERENCES * 10)]
    assert misaligned_pairs(case_of(run=training_text(tmp_path / "a", aligned))) is None
    shuffled = aligned[:]
    random.Random(0).shuffle(shuffled)
    found = misaligned_pairs(given(case_of(run=training_text(tmp_path / "b", shuffled)), losses=(4.0, 4.05)))
    xs = [len(f"{s} {'und ' * (i % 7)}") for i, s in enumerate(SOURCES * 10)]
    ys = [len(t) for t in shuffled]
    assert found is not None and found.value == pytest.approx(float(numpy.corrcoef(xs, ys)[0, 1]), abs=1e-3)
    assert "1.2%" in found.message and "line alignment" in found.fix
    with pytest.raises(NotChecked):
        misaligned_pairs(case_of())


def test_a_finding_that_may_follow_from_another_says_so() -> None:
    report = diagnose(given(case_of(init="pytorch"), ["a man in a red and a red and a red"] * 4, (3.0, 3.05)))
    by_id = {f.id: f for f in report.findings}
    assert by_id["embedding_scale"].follows_from == ()
    assert by_id["repetition"].follows_from == ("embedding_scale",)
    assert "may follow from embedding_scale: fix that first" in report.text()


def test_every_check_is_run_once_and_reported_in_one_place() -> None:
    report = diagnose(given(case_of(init="pytorch"), REFERENCES, (1.0, 3.0)))
    ids = [f.id for f in report.findings] + report.checked + list(report.not_checked)
    assert sorted(ids) == sorted(CHECKS) and "embedding_scale" in [f.id for f in report.findings]
    assert set(report.to_dict()) == {"findings", "checked", "not_checked"}
    assert all(set(f) == {"id", "value", "limit", "message", "fix", "cost", "follows_from"}
               for f in report.to_dict()["findings"])


def test_every_threshold_states_its_reason() -> None:
    found = [getattr(thresholds, name) for name in dir(thresholds) if isinstance(getattr(thresholds, name), thresholds.Threshold)]
    assert len(found) >= 12 and all(len(limit.reason) > 40 for limit in found)
