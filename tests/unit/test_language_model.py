"""The decoder-only language model: built from the translation model's own layers, causal
(no future leak), cached generation equal to uncached, sampling filters equal to Hugging
Face's logits processors, seeded sampling reproducible."""

from __future__ import annotations

import pytest
import torch

from transformer_mt.common.config import ModelConfig
from transformer_mt.decoding.sampling import Sampling, generate, shaped_logits, top_k_filter, top_p_filter
from transformer_mt.model.decoder import DecoderLayer
from transformer_mt.model.language_model import build_any_model, build_language_model

VOCAB = 40


def tiny_lm(**changes) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(arch="decoder_only", n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0,
                      max_positions=64, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **changes)
    return build_language_model(cfg).eval()


def test_the_language_model_is_the_decoder_without_cross_attention() -> None:
    model = tiny_lm()
    layers = [m for m in model.modules() if isinstance(m, DecoderLayer)]
    assert len(layers) == 2 and all(layer.src_attn is None and len(layer.sublayer) == 2 for layer in layers)
    assert model.generator.proj.weight is model.tgt_embed.lut.weight  # tied (section 3.4)
    assert isinstance(model.decoder.norm, torch.nn.LayerNorm)  # pre-norm ends in a LayerNorm
    assert not hasattr(model, "encoder")
    translation = build_any_model(ModelConfig(n_layers=1, d_model=16, d_ff=32, n_heads=2,
                                              src_vocab_size=VOCAB, tgt_vocab_size=VOCAB))
    assert hasattr(translation, "encoder")


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_no_future_leak(positional: str) -> None:
    """Changing token t + 1 leaves the logits at positions <= t unchanged."""
    model = tiny_lm(positional=positional)
    tokens = torch.randint(0, VOCAB, (3, 12))
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % VOCAB
    with torch.no_grad():
        a, b = model.logits(tokens), model.logits(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3  # the change is seen from its own position on


def test_unscaled_embeddings_and_gelu_tanh_differ_from_the_paper_defaults() -> None:
    tokens = torch.randint(0, VOCAB, (2, 5))
    with torch.no_grad():
        paper = tiny_lm().logits(tokens)
        assert not torch.allclose(paper, tiny_lm(scale_embeddings=False).logits(tokens))
        assert not torch.allclose(paper, tiny_lm(activation="gelu_tanh").logits(tokens))


def test_cached_generation_equals_uncached() -> None:
    model = tiny_lm()
    prompt = torch.randint(4, VOCAB, (3, 5))
    greedy = generate(model, prompt, 20, use_cache=True)
    assert torch.equal(greedy, generate(model, prompt, 20, use_cache=False))
    sampling = Sampling(temperature=1.5, top_k=10, top_p=0.9)
    runs = [generate(model, prompt, 20, sampling=sampling, generator=torch.Generator().manual_seed(7),
                     use_cache=cache) for cache in (True, False)]
    assert torch.equal(runs[0], runs[1])


def test_greedy_generation_takes_the_argmax_of_the_full_forward_pass() -> None:
    model = tiny_lm()
    prompt = torch.randint(4, VOCAB, (2, 4))
    new = generate(model, prompt, 6)
    sequence = prompt
    for step in range(6):
        with torch.no_grad():
            expected = model.logits(sequence)[:, -1].argmax(-1)
        assert torch.equal(new[:, step], expected)
        sequence = torch.cat([sequence, expected[:, None]], 1)


def test_generation_stops_at_eos_and_pads_finished_rows_with_it() -> None:
    model = tiny_lm()
    prompt = torch.randint(4, VOCAB, (4, 3))
    free = generate(model, prompt, 10)
    eos = int(free[0, 2])  # make the third token of row 0 the end
    stopped = generate(model, prompt, 10, eos_id=eos)
    row = stopped[0].tolist()
    assert row[: row.index(eos) + 1] == free[0, : row.index(eos) + 1].tolist()
    assert all(token == eos for token in row[row.index(eos):])


def test_seeded_sampling_is_reproducible_and_seeds_differ() -> None:
    model = tiny_lm()
    prompt = torch.randint(4, VOCAB, (2, 3))
    draw = lambda seed: generate(model, prompt, 30, sampling=Sampling(2.0), generator=torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draw(1), draw(1))
    assert not torch.equal(draw(1), draw(2))


def test_a_prompt_that_fills_the_positions_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        generate(tiny_lm(), torch.zeros(1, 64, dtype=torch.long), 1)


@pytest.mark.parametrize("k", [1, 5, 39, 40, 100])
def test_top_k_equals_hugging_face(k: int) -> None:
    from transformers.generation.logits_process import TopKLogitsWarper

    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(k))
    expected = TopKLogitsWarper(top_k=k)(None, logits.clone())
    assert torch.equal(top_k_filter(logits, k).isinf(), expected.isinf())
    assert torch.equal(top_k_filter(logits, k)[~expected.isinf()], logits[~expected.isinf()])


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.99])
def test_top_p_equals_hugging_face(p: float) -> None:
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = 3 * torch.randn(16, VOCAB, generator=torch.Generator().manual_seed(int(100 * p)))
    expected = TopPLogitsWarper(top_p=p)(None, logits.clone())
    ours = top_p_filter(logits, p)
    assert torch.equal(ours.isinf(), expected.isinf())
    assert (~ours.isinf()).sum(-1).min() >= 1


def test_temperature_top_k_top_p_in_hugging_faces_order() -> None:
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(3))
    expected = logits.clone()
    for warper in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(12), TopPLogitsWarper(0.8)):
        expected = warper(None, expected)
    ours = shaped_logits(logits, Sampling(0.7, 12, 0.8))
    assert torch.equal(ours.isinf(), expected.isinf())
    assert torch.allclose(ours[~ours.isinf()], expected[~expected.isinf()])


@pytest.mark.parametrize("settings, message", [
    (dict(temperature=0.0), "temperature must be > 0"),
    (dict(temperature=-1.0), "temperature must be > 0"),
    (dict(top_p=0.0), "top-p must be in"),
    (dict(top_p=1.5), "top-p must be in"),
    (dict(top_k=-1), "top-k must be at least 1"),
])
def test_impossible_sampling_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Sampling(**settings)
