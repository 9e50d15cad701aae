"""model.source_word_dropout (word dropout, Sennrich and Zhang, 2019): in training a source
token's whole embedding is zeroed, never part of it; the target side, evaluation and a
probability of 0 are untouched; bad values are refused in one line that names the key."""

from __future__ import annotations

import pytest
import torch

from transformer_mt.config import ConfigError, ModelConfig, load_config
from transformer_mt.model import build_model
from transformer_mt.model.dropout import WordDropout
from transformer_mt.model.transformer import EncoderDecoder

SIZES = dict(n_layers=2, d_model=32, d_ff=64, n_heads=4, src_vocab_size=40, tgt_vocab_size=40, max_positions=64)


def model_of(**kw: float) -> EncoderDecoder:
    torch.manual_seed(0)
    return build_model(ModelConfig(**SIZES, dropout=0.0, **kw)).train()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(4, 40, (8, 50), generator=generator), torch.randint(4, 40, (8, 40), generator=generator)


def positional_inputs(model: EncoderDecoder, seed: int = 3) -> list[torch.Tensor]:
    """What reaches the positional module: the source embeddings, then the target's."""
    seen: list[torch.Tensor] = []
    handle = model.positional.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    src, tgt = batch()
    torch.manual_seed(seed)
    model(src, tgt, None)
    handle.remove()
    return seen


def test_whole_source_rows_are_dropped_and_the_rest_scaled() -> None:
    p = 0.25
    model = model_of(source_word_dropout=p)
    src, tgt = batch()
    source_in, target_in = positional_inputs(model)
    embedded = model.src_embed(src).detach()                     # (B, S, d_model), no token has a zero row
    dropped = source_in.eq(0).all(-1)                            # (B, S)
    assert torch.equal(source_in.eq(0).any(-1), dropped), "a token lost only part of its embedding"
    assert 0.15 < dropped.float().mean().item() < 0.35           # 400 tokens at p = 0.25
    kept = ~dropped
    torch.testing.assert_close(source_in[kept], embedded[kept] / (1 - p))
    torch.testing.assert_close(target_in, model.tgt_embed(tgt).detach(), rtol=0, atol=0)


def test_evaluation_and_zero_are_the_model_without_it() -> None:
    plain, with_it = model_of(), model_of(source_word_dropout=0.3)
    assert plain.state_dict().keys() == with_it.state_dict().keys()
    src, tgt = batch()
    torch.manual_seed(4)
    reference = plain(src, tgt, None)
    assert torch.equal(torch.get_rng_state(), torch.manual_seed(4).get_state()), "0 drew random numbers"
    torch.manual_seed(4)
    assert not torch.allclose(with_it(src, tgt, None), reference)
    with_it.eval()
    torch.testing.assert_close(with_it(src, tgt, None), reference, rtol=0, atol=0)


def test_the_same_seed_drops_the_same_words() -> None:
    model = model_of(source_word_dropout=0.2)
    assert torch.equal(positional_inputs(model, seed=7)[0], positional_inputs(model, seed=7)[0])
    assert not torch.equal(positional_inputs(model, seed=7)[0], positional_inputs(model, seed=8)[0])


@pytest.mark.parametrize("value", ["1.0", "-0.1", "2"])
def test_bad_values_name_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [f"--model.source_word_dropout={value}"])
    assert "model.source_word_dropout: must be in [0, 1) (0 = none)" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_language_model_has_no_source_to_drop() -> None:
    with pytest.raises(ConfigError, match="model.source_word_dropout: drops a translator's source words"):
        load_config("lm_tiny", ["--model.source_word_dropout=0.1"])


def test_it_loads_and_is_not_a_shape() -> None:
    assert load_config("tiny", ["--model.source_word_dropout=0.1"]).model.source_word_dropout == 0.1
    assert "source_word_dropout" not in ModelConfig.shape_keys()


def test_the_module_refuses_a_probability_of_one() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        WordDropout(1.0)
