"""Step-by-step decoding: it ends where `translate` ends, each step's record is
consistent with the model's own probabilities, and a forced prefix is honoured."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.decoding.trace import FINISHED, KEPT, PRUNED
from transformer_mt.common.errors import UserError
from transformer_mt.model.masks import padding_mask
from transformer_mt.inference.translator import Translator


@pytest.fixture(scope="module")
def translator(tiny_run: Path) -> Translator:
    return Translator.from_run(tiny_run, device="cpu")


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(10)}" for _ in range(rng.randint(1, 9))) for _ in range(n)]


def teacher_forced_log_probs(translator: Translator, sentence: str, ids: list[int]) -> torch.Tensor:
    """log P(ids[t] | ids[:t], source) for every t, in one forward pass (an independent path)."""
    src = torch.tensor([translator.tokenizer.encode([sentence])[0] + [EOS_ID]])
    tgt_in = torch.tensor([[BOS_ID] + ids[:-1]])
    with torch.inference_mode():
        states = translator.model(src, tgt_in, padding_mask(src, PAD_ID))
        log_probs = translator.model.generator.logits(states[0]).float().log_softmax(-1)
    return log_probs[torch.arange(len(ids)), torch.tensor(ids)]


@pytest.mark.parametrize("beam", [1, 2, 4])
def test_the_steps_end_with_the_translation_search_gives(translator: Translator, beam: int) -> None:
    lines = sentences(12, seed=beam)
    settings = translator.settings(beam)
    for line, found in zip(lines, translator.search(lines, settings)):
        trace = translator.steps(line, settings)
        output = trace.ids[:-1] if trace.ids[-1:] == [EOS_ID] else trace.ids
        assert output == found[0].ids
        assert math.isclose(trace.score, found[0].score, rel_tol=1e-4, abs_tol=1e-5)


def test_greedy_steps_choose_the_most_probable_token_and_record_its_probability(translator: Translator) -> None:
    line = "w3 w1 w4 w1 w5 w9 w2"
    trace = translator.steps(line, translator.settings(1), top_k=4)
    chosen = [step.chosen for step in trace.steps]
    assert chosen == trace.ids  # beam 1: the chosen tokens are the output, eos included
    reference = teacher_forced_log_probs(translator, line, chosen).exp()
    for step, prob in zip(trace.steps, reference.tolist()):
        assert step.chosen == step.top_ids[0] and step.top_probs == sorted(step.top_probs, reverse=True)
        assert math.isclose(step.chosen_prob, prob, rel_tol=1e-4) and math.isclose(step.top_probs[0], prob, rel_tol=1e-4)
        assert len(step.top_ids) == 4 and sum(step.top_probs) <= 1 + 1e-6


def test_each_step_keeps_the_beam_and_scores_are_log_probabilities(translator: Translator) -> None:
    line = "w7 w7 w2 w0 w5"
    trace = translator.steps(line, translator.settings(3), top_k=3)
    previous = [[]]
    for step in trace.steps:
        kept = [c for c in step.candidates if c.status == KEPT]
        assert len(kept) <= 3 and {c.status for c in step.candidates} <= {KEPT, FINISHED, PRUNED}
        assert [c.score for c in step.candidates if c.status != FINISHED] == sorted(
            (c.score for c in step.candidates if c.status != FINISHED), reverse=True)
        for candidate in kept:  # a kept hypothesis extends its parent by one token
            assert candidate.ids[:-1] == previous[candidate.parent]
            expected = teacher_forced_log_probs(translator, line, candidate.ids).sum().item()
            assert math.isclose(candidate.score, expected, rel_tol=1e-4, abs_tol=1e-4)
        previous = [c.ids for c in kept]
        cross = step.cross
        assert cross.shape[:2] == (2, 4) and torch.allclose(cross.sum(-1), torch.ones(cross.shape[:2]), atol=1e-5)


def test_a_forced_prefix_is_emitted_first_then_the_model_continues(translator: Translator) -> None:
    line = "w3 w1 w4"
    free = translator.steps(line, translator.settings(2))
    pieces = translator.tokenizer.id_to_piece
    forced = [p for p in pieces(list(range(4, len(translator.tokenizer)))) if p != pieces([free.steps[0].chosen])[0]][:1]
    trace = translator.steps(line, translator.settings(2), prefix=forced)
    assert trace.steps[0].forced and not trace.steps[1].forced
    assert pieces(trace.ids[:1]) == forced and trace.ids != free.ids
    expected = teacher_forced_log_probs(translator, line, trace.ids[:1]).exp().item()
    assert math.isclose(trace.steps[0].chosen_prob, expected, rel_tol=1e-4)


@pytest.mark.parametrize("prefix", [["no-such-piece"], ["</s>"], ["<pad>"]])
def test_unknown_or_special_prefix_tokens_are_refused(translator: Translator, prefix: list[str]) -> None:
    with pytest.raises(UserError, match="not a subword"):
        translator.steps("w1 w2", prefix=prefix)
