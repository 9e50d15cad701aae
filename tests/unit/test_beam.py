"""Beam search: hand-checkable cases on fixed log-probabilities, and agreement with
greedy decoding and with itself (cached or not, batched or not) on a random model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_mt.config import ModelConfig
from transformer_mt.decoding.beam import beam_search, gnmt_penalty
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.model.transformer import build_model

PAD, BOS, EOS, A, B, C, D = 0, 2, 3, 4, 5, 6, 7
VOCAB = 8


class FixedLogProbs:
    """A stand-in for EncoderDecoder whose next-token distribution depends only on the
    previous token: P(next | previous) = table[previous]. Counts decoder calls."""

    def __init__(self, table: dict[int, dict[int, float]]) -> None:
        log_probs = torch.full((VOCAB, VOCAB), float("-inf"))
        log_probs[:, EOS] = 0.0  # after a token the table does not mention: eos
        for previous, row in table.items():
            log_probs[previous, EOS] = float("-inf")
            for token, p in row.items():
                log_probs[previous, token] = math.log(p)
        self.table = log_probs
        self.calls = 0
        self.decoder = self
        self.generator = self

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Scores before the softmax: here already log-probabilities, (B, V) from one-hot states."""
        return self.table[states.argmax(dim=-1)]

    def init_cache(self) -> list:
        return []

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, memory, src_mask, tgt, tgt_mask=None, cache=None) -> torch.Tensor:
        self.calls += 1
        return nn.functional.one_hot(tgt, VOCAB).float()  # (B, T, V)


def search(model, beam: int, max_len: int = 5, src=None, **kw) -> tuple[list[list[list[int]]], torch.Tensor]:
    src = torch.tensor([[A, EOS]]) if src is None else src
    tokens, scores = beam_search(model, src, beam, max_len, BOS, EOS, PAD, **kw)
    return [[[t for t in row if t != PAD] for row in rows] for rows in tokens.tolist()], scores


# Greedy takes A (0.6) and then is stuck with 0.35 for eos; B (0.4) ends with 0.9.
TRAP = {BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.35, A: 0.33, C: 0.32}, B: {EOS: 0.9, C: 0.1},
        C: {EOS: 1.0}}


def test_beam_beats_greedy_on_a_hand_checkable_case() -> None:
    greedy, greedy_score = search(FixedLogProbs(TRAP), beam=1, length_penalty=0.0)
    beam, beam_score = search(FixedLogProbs(TRAP), beam=2, length_penalty=0.0)
    assert greedy[0][0] == [A, EOS]
    assert greedy_score[0, 0].item() == pytest.approx(math.log(0.6 * 0.35))
    assert beam[0][0] == [B, EOS]
    assert beam_score[0, 0].item() == pytest.approx(math.log(0.4 * 0.9))


def test_nbest_lists_distinct_finished_hypotheses_best_first() -> None:
    found, scores = search(FixedLogProbs(TRAP), beam=3, nbest=3, length_penalty=0.0, max_len=9)
    assert found[0] == [[B, EOS], [A, EOS], [A, C, EOS]]
    expected = [math.log(0.4 * 0.9), math.log(0.6 * 0.35), math.log(0.6 * 0.32)]
    assert scores[0].tolist() == pytest.approx(expected)


def test_length_penalty_is_gnmt_and_can_prefer_the_longer_output() -> None:
    # "B eos": p = 0.3, 2 tokens; "A C eos": p = 0.7 * 0.4 = 0.28, 3 tokens
    table = {BOS: {A: 0.7, B: 0.3}, B: {EOS: 1.0}, A: {C: 0.4, D: 0.6}, C: {EOS: 1.0}, D: {EOS: 0.5, C: 0.5}}
    plain, _ = search(FixedLogProbs(table), beam=2, max_len=2, length_penalty=0.0)
    assert plain[0][0] == [B, EOS]
    assert gnmt_penalty(3, 2.0) == pytest.approx((8 / 6) ** 2)
    penalized, score = search(FixedLogProbs(table), beam=2, max_len=2, length_penalty=2.0)
    assert penalized[0][0] == [A, C, EOS]  # log 0.28 / (8/6)^2 = -0.72 beats log 0.3 / (7/6)^2 = -0.88
    assert score[0, 0].item() == pytest.approx(math.log(0.28) / (8 / 6) ** 2)


def test_finished_hypotheses_stop_growing_and_search_stops_early() -> None:
    # eos is always likely, so both hypotheses finish at step 2 although max_len is 40
    table = {BOS: {A: 0.5, B: 0.5}, A: {EOS: 0.9, C: 0.1}, B: {EOS: 0.8, C: 0.2}, C: {C: 0.5, EOS: 0.5}}
    model = FixedLogProbs(table)
    found, _ = search(model, beam=2, nbest=2, max_len=40)
    assert found[0] == [[A, EOS], [B, EOS]]
    assert model.calls == 2


def test_maximum_length_ends_hypotheses_without_eos() -> None:
    table = {BOS: {A: 1.0}, A: {A: 0.9, EOS: 0.1}}
    found, _ = search(FixedLogProbs(table), beam=2, max_len=3, length_penalty=0.0)
    assert found[0][0] == [A, A, A, A]  # max_len + 1 tokens, the place eos would take


def test_min_len_bans_eos_until_then() -> None:
    table = {BOS: {A: 1.0}, A: {EOS: 0.9, A: 0.1}}
    found, _ = search(FixedLogProbs(table), beam=2, max_len=9, min_len=3)
    assert found[0][0] == [A, A, A, EOS]
    forced, _ = search(FixedLogProbs(table), beam=2, max_len=4, min_len=5)
    assert forced[0][0] == [A] * 5


def test_nbest_larger_than_beam_is_rejected() -> None:
    with pytest.raises(ValueError, match="nbest"):
        search(FixedLogProbs(TRAP), beam=2, nbest=3)


@pytest.fixture(scope="module")
def model() -> nn.Module:
    """A random model whose outputs vary with the input (no pad or bos emitted)."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, tie_embeddings=False,
                      share_vocab=False, max_len=64, src_vocab_size=20, tgt_vocab_size=20)
    model = build_model(cfg).eval()
    with torch.no_grad():
        model.generator.proj.weight.mul_(4)
        model.generator.proj.bias[[PAD, BOS]] = -100.0
    return model


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    torch.manual_seed(1)
    src = torch.randint(4, 20, (6, 9))
    src[:, -1] = EOS
    for row, length in enumerate([9, 3, 6, 1, 8, 5]):  # right-padded sentences of varied length
        src[row, length - 1] = EOS
        src[row, length:] = PAD
    return src


@pytest.mark.parametrize("beam", [1, 3, 5])
def test_cached_and_uncached_decoding_agree(model, sources, beam: int) -> None:
    limits = torch.tensor([12, 4, 9, 2, 11, 7])
    cached = beam_search(model, sources, beam, limits, BOS, EOS, PAD, nbest=min(beam, 2))
    uncached = beam_search(model, sources, beam, limits, BOS, EOS, PAD, nbest=min(beam, 2), use_cache=False)
    assert torch.equal(cached[0], uncached[0])
    torch.testing.assert_close(cached[1], uncached[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("min_len", [0, 6])
def test_beam_one_is_greedy(model, sources, min_len: int) -> None:
    greedy, greedy_scores = greedy_decode(model, sources, 10, BOS, EOS, PAD, min_len=min_len)
    tokens, scores = beam_search(model, sources, 1, 10, BOS, EOS, PAD, length_penalty=0.0, min_len=min_len)
    assert (greedy.ne(PAD).sum(dim=1) > min_len).all()  # eos (or the limit) only after min_len tokens
    assert torch.equal(tokens[:, 0], greedy[:, : tokens.size(2)])
    assert greedy[:, tokens.size(2):].eq(PAD).all()
    # the same sums; beam search drops finished sentences from the batch, which may
    # change the last bit of a matrix product
    torch.testing.assert_close(scores[:, 0], greedy_scores, atol=1e-5, rtol=0)
    penalized, _ = beam_search(model, sources, 1, 10, BOS, EOS, PAD, length_penalty=0.6, min_len=min_len)
    assert torch.equal(penalized, tokens)


def test_batched_search_equals_one_sentence_at_a_time(model, sources) -> None:
    limits = torch.tensor([12, 4, 9, 2, 11, 7])
    tokens, scores = beam_search(model, sources, 4, limits, BOS, EOS, PAD, nbest=3)
    for row in range(sources.size(0)):
        src = sources[row : row + 1, : int(sources[row].ne(PAD).sum())]
        alone, alone_scores = beam_search(model, src, 4, limits[row : row + 1], BOS, EOS, PAD, nbest=3)
        width = alone.size(2)
        assert torch.equal(tokens[row, :, :width], alone[0])
        assert tokens[row, :, width:].eq(PAD).all()
        torch.testing.assert_close(scores[row], alone_scores[0], atol=1e-5, rtol=0)
        lengths = tokens[row].ne(PAD).sum(dim=1)
        assert (lengths <= limits[row] + 1).all()


def test_beam_search_under_bf16_autocast(model, sources) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tokens, scores = beam_search(model, sources, 3, 8, BOS, EOS, PAD, nbest=2)
    assert scores.dtype == torch.float32 and scores.isfinite().all()
    assert tokens.shape[:2] == (sources.size(0), 2)
    assert (scores[:, 0] >= scores[:, 1]).all()
