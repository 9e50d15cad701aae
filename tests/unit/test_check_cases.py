"""`transformer-mt check` judged on learner's code (tests/check_cases/): the two correct
implementations pass every check, the study notes' make_model fails cloned_init and
embedding_init and nothing the paper's equations define, each of the bugs fails its check
and crashes nothing, and each choice the paper leaves open passes. The checks run in this
process (--quick: learns_copy is tests/integration/test_check_cli.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from check_cases.cases import BUGS, HERE, NOTES, OPEN_CHOICES, Case
from check_cases.mistakes import MISTAKES, Mistake
from transformer_mt.check.report import Report, run_checks
from transformer_mt.check.subject import open_subject
from transformer_mt.learner.building import Sizes

COULD_NOT_RUN = "could not run"


# The multi30k_en_de preset's sizes with its tokenizer's vocabularies, as train --model builds them.
MULTI30K = Sizes(src_vocab=8000, tgt_vocab=8000, N=4, d_model=128, d_ff=256, h=4, dropout=0.3, max_len=256)
# The bugs that let the decoder see the future: train --model refuses them by `causal`.
LOOK_AHEAD = ("inverted_mask", "no_decoder_mask", "upper_triangular_mask", "diagonal_hidden")


def checked(path: Path, sizes: Sizes = Sizes()) -> Report:
    return run_checks(open_subject(path, sizes=sizes), quick=True)


def statuses(report: Report) -> dict[str, str]:
    return {result.id: result.status for result in report.results if result.id != "learns_copy"}


def assert_ran(report: Report) -> None:
    """No check met an error of the kit's own (their code's errors are failures at their line)."""
    assert not [r for r in report.results if COULD_NOT_RUN in r.message], report.text()


@pytest.mark.parametrize("base", ["annotated", "tutorial"])
def test_a_correct_implementation_passes_every_check(base: str) -> None:
    report = checked(HERE / f"{base}.py")
    assert set(statuses(report).values()) == {"pass"}, report.text()
    assert not report.failed


@pytest.mark.parametrize("sizes", [Sizes(), MULTI30K], ids=["check", "multi30k"])
def test_the_notes_make_model_fails_its_initialisation_and_nothing_else(tmp_path: Path, sizes: Sizes) -> None:
    report = checked(NOTES.write(tmp_path), sizes)
    failed = {key for key, status in statuses(report).items() if status != "pass"}
    assert failed == {"cloned_init", "embedding_init"}, report.text()
    text = report.text()
    assert "nn.Embedding's default N(0, 1)" in text and "nn.init.xavier_uniform_(p)" in text


@pytest.mark.parametrize("case", BUGS, ids=[case.name for case in BUGS])
def test_each_bug_fails_its_check(tmp_path: Path, case: Case) -> None:
    report = checked(case.write(tmp_path))
    assert_ran(report)
    result = next(r for r in report.results if r.id == case.fails)
    assert result.status == "fail", report.text()
    assert result.fix and report.failed
    if case.name in LOOK_AHEAD:
        assert statuses(report)["causal"] == "fail", report.text()


@pytest.mark.parametrize("case", OPEN_CHOICES, ids=[case.name for case in OPEN_CHOICES])
def test_what_the_paper_leaves_open_passes(tmp_path: Path, case: Case) -> None:
    report = checked(case.write(tmp_path))
    assert_ran(report)
    found = statuses(report)
    if case.name == "no_mask_functions":  # nothing of theirs to check: the kit's own masks
        assert found.pop("mask") == "not_checked"
    assert set(found.values()) == {"pass"}, report.text()


def test_an_adapter_of_a_few_lines_checks_another_shape() -> None:
    """docs/check.md's adapter: the tutorial's model wrapped in encode, decode and generator."""
    report = checked(HERE / "adapter.py")
    assert report.subject.convention.name == "annotated"
    assert set(statuses(report).values()) == {"pass"}, report.text()


def test_what_the_checks_cannot_read_is_not_checked_never_failed() -> None:
    """torch.nn.Transformer inside: a fused attention and no feed-forward module of its own."""
    report = checked(HERE / "pytorch_modules.py")
    found = statuses(report)
    assert "fail" not in found.values(), report.text()
    assert found["attention"] == found["feed_forward"] == "not_checked"
    assert found["causal"] == found["padding"] == found["parameter_count"] == "pass"


def test_the_failures_name_the_part_and_the_slip(tmp_path: Path) -> None:
    """What a learner reads: the module, what was measured, against what the paper gives."""
    by_name = {case.name: case for case in BUGS}
    expected = {
        "softmax_over_queries": ("encoder.layers.0.self_attn (MultiHeadedAttention)", "over the queries (dim=-2)"),
        "heads_merged_without_transpose": ("MultiHeadedAttention", "merged without the transpose"),
        "sin_cos_swapped": ("src_embed.1 (PositionalEncoding)", "sine and cosine swapped"),
        "norm_divides_by_variance": ("sublayer.0.norm (LayerNorm)", "divides by the variance"),
        "no_relu": ("PositionwiseFeedForward", "no ReLU between W_1 and W_2"),
        "one_map_for_q_and_k": ("encoder.layers.0.attn (MultiHeadAttention)", "W^Q and W^K"),
        "upper_triangular_mask": ("create_masks", "upper-triangular"),
        "exponent_doubled": ("encoder.pe (PositionalEncoder)", "exponent doubled"),
    }
    for name, parts in expected.items():
        case = by_name[name]
        report = run_checks(open_subject(case.write(tmp_path)), only=[case.fails])
        message = report.results[0].message
        assert all(part in message for part in parts), (name, message)


def test_a_bug_in_one_place_points_there(tmp_path: Path) -> None:
    """dropout still active in eval: the finding names the feed-forward network's line that drops."""
    case = next(case for case in BUGS if case.name == "dropout_in_eval")
    path = case.write(tmp_path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "F.dropout(hidden, 0.1)" in text)
    report = run_checks(open_subject(path), only=["dropout"])
    assert f"dropout_in_eval.py:{line}: `return self.w_2(F.dropout(hidden, 0.1))`" in report.results[0].message


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m.check], ids=lambda m: m.case.name)
def test_a_learners_mistake_fails_its_own_check_in_its_own_words(tmp_path: Path, mistake: Mistake) -> None:
    """Layers in a plain list, dropout forced on, a padding id of their own, a residual added in
    place: each fails the check named for it, saying so (not `causal`: the decoder sees no future)."""
    report = checked(mistake.case.write(tmp_path))
    failed = {result.id: result.message for result in report.results if result.status == "fail"}
    assert mistake.check in failed and "causal" not in failed, report.text()
    for part in mistake.says:
        assert part in failed[mistake.check], failed[mistake.check]
