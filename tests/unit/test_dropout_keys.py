"""model.attention_dropout and model.activation_dropout: validated, -1 means model.dropout
(the presets' behaviour before the keys existed), 0 leaves attention weights and the
feed-forward activation undropped while the residual dropout stays."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_mt.common.config import ConfigError, ModelConfig, load_config
from transformer_mt.model import build_model
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.layers import PositionwiseFeedForward
from transformer_mt.model.transformer import EncoderDecoder

SIZES = dict(n_layers=2, d_model=32, d_ff=64, n_heads=4, src_vocab_size=40, tgt_vocab_size=40, max_positions=32)


def model_of(**kw: float) -> EncoderDecoder:
    torch.manual_seed(0)
    return build_model(ModelConfig(**SIZES, **kw)).train()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(4, 40, (3, 7), generator=generator), torch.randint(4, 40, (3, 6), generator=generator)


def training_output(model: EncoderDecoder, seed: int = 5) -> torch.Tensor:
    src, tgt = batch()
    torch.manual_seed(seed)
    return model(src, tgt, None)


@pytest.mark.parametrize("key", ["attention_dropout", "activation_dropout"])
@pytest.mark.parametrize("value", ["1.0", "-0.5", "2"])
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [f"--model.{key}={value}"])
    message = str(err.value)
    assert message.startswith(f"--model.{key}={value}: must be in [0, 1), or -1 for the same as model.dropout")
    assert "\n" not in message


def test_good_values_load_and_are_not_shapes() -> None:
    cfg = load_config("tiny", ["--model.attention_dropout=0", "--model.activation_dropout=0.25"])
    assert (cfg.model.attention_dropout, cfg.model.activation_dropout) == (0.0, 0.25)
    assert not {"attention_dropout", "activation_dropout"} & set(ModelConfig.shape_keys())


@pytest.mark.parametrize("name", ["tiny", "demo", "small", "base", "big"])
def test_presets_keep_dropping_attention_and_activation_as_before(name: str) -> None:
    model = load_config(name).model
    assert (model.attention_dropout, model.activation_dropout) == (-1, -1)


@pytest.mark.parametrize("name", ["wmt14_en_de_base", "wmt14_en_de_big", "multi30k_en_de", "multi30k_de_en"])
def test_wmt14_and_multi30k_presets_drop_as_the_paper(name: str) -> None:
    """Residual dropout only, as the paper (and Transformer-Tiny, which the multi30k recipe follows)."""
    model = load_config(name).model
    assert (model.attention_dropout, model.activation_dropout) == (0, 0) and model.dropout > 0


def test_minus_one_is_the_same_model_as_dropout_written_out() -> None:
    default, explicit = model_of(dropout=0.3), model_of(dropout=0.3, attention_dropout=0.3, activation_dropout=0.3)
    assert torch.equal(training_output(default), training_output(explicit))


def test_zero_differs_from_the_default_only_in_the_attention_and_ffn_dropout() -> None:
    paper = model_of(dropout=0.3, attention_dropout=0.0, activation_dropout=0.0)
    reference = model_of(dropout=0.3)
    assert paper.state_dict().keys() == reference.state_dict().keys()
    reference.load_state_dict(paper.state_dict())
    dropped = training_output(reference)
    for module in reference.modules():  # what the two keys are meant to switch off, by hand
        if isinstance(module, (MultiHeadAttention, PositionwiseFeedForward)):
            module.dropout.p = 0.0
    assert torch.equal(training_output(paper), training_output(reference))
    assert not torch.allclose(training_output(paper), dropped)
    assert not torch.allclose(training_output(paper, seed=5), training_output(paper, seed=6)), "residual dropout is gone"


def test_zero_leaves_attention_rows_summing_to_one_and_the_ffn_activation_whole() -> None:
    model = model_of(dropout=0.3, attention_dropout=0.0, activation_dropout=0.0)
    row_sums, ffn_pairs = [], []
    handles = [m.register_weights_hook(lambda _m, w, *_: row_sums.append(w.sum(-1)))
               for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for ffn in (m for m in model.modules() if isinstance(m, PositionwiseFeedForward)):
        inputs: list[torch.Tensor] = []
        handles.append(ffn.register_forward_pre_hook(lambda _m, args, seen=inputs: seen.append(args[0])))
        handles.append(ffn.w_2.register_forward_pre_hook(
            lambda _m, args, ffn=ffn, seen=inputs: ffn_pairs.append((F.relu(ffn.w_1(seen[-1])), args[0]))))
    training_output(model)
    for handle in handles:
        handle.remove()
    assert len(row_sums) == 2 + 2 * 2 and len(ffn_pairs) == 2 + 2
    assert all(torch.allclose(s, torch.ones_like(s)) for s in row_sums)
    assert all(torch.equal(expected, seen) for expected, seen in ffn_pairs)


def test_the_default_does_drop_attention_weights() -> None:
    """The check above would pass vacuously if the hook never saw dropped weights."""
    model = model_of(dropout=0.3)
    row_sums: list[torch.Tensor] = []
    handles = [m.register_weights_hook(lambda _m, w, *_: row_sums.append(w.sum(-1)))
               for m in model.modules() if isinstance(m, MultiHeadAttention)]
    training_output(model)
    for handle in handles:
        handle.remove()
    assert not all(torch.allclose(s, torch.ones_like(s)) for s in row_sums)
