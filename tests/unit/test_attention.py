"""Multi-head attention against torch.nn.MultiheadAttention and its own explicit path."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_mt.model.attention import MultiHeadAttention, attention
from transformer_mt.model.cache import KeyValueCache
from transformer_mt.model.masks import padding_mask, subsequent_mask
from transformer_mt.model.recording import ablate_heads, record_attention

D_MODEL, HEADS = 16, 4


def make_pair(seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    torch.manual_seed(seed)
    ours = MultiHeadAttention(D_MODEL, HEADS).eval()
    ours.reset_parameters()
    with torch.no_grad():
        ours.in_proj.bias.normal_()
        ours.out_proj.bias.normal_()
    ref = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


def test_explicit_attention_is_equation_one() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 1, 5, 8).unbind(0)
    out, weights = attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1, 5))


def test_self_attention_equals_torch_with_padding() -> None:
    ours, ref = make_pair()
    x = torch.randn(3, 7, D_MODEL)
    tokens = torch.tensor([[5] * 7, [5] * 4 + [0] * 3, [5] * 6 + [0]])
    mask = padding_mask(tokens, 0)
    expected, _ = ref(x, x, x, key_padding_mask=~mask[:, 0, 0])
    got = ours(x, mask=mask)
    valid = tokens != 0  # the reference leaves padded query rows unspecified
    torch.testing.assert_close(got[valid], expected[valid], atol=1e-5, rtol=1e-5)


def test_causal_self_attention_equals_torch() -> None:
    ours, ref = make_pair(1)
    x = torch.randn(2, 6, D_MODEL)
    causal = ~subsequent_mask(6)[0, 0]
    expected, _ = ref(x, x, x, attn_mask=causal)
    torch.testing.assert_close(ours(x, is_causal=True), expected, atol=1e-5, rtol=1e-5)


def test_cross_attention_equals_torch() -> None:
    ours, ref = make_pair(2)
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 9, D_MODEL)
    src = torch.tensor([[4] * 9, [4] * 5 + [0] * 4])
    mask = padding_mask(src, 0)
    expected, _ = ref(x, memory, memory, key_padding_mask=~mask[:, 0, 0])
    torch.testing.assert_close(ours(x, memory, mask=mask), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "padding+causal", "cross"])
def test_sdpa_path_equals_explicit_path(kind: str) -> None:
    ours, _ = make_pair(3)
    x, memory = torch.randn(2, 6, D_MODEL), torch.randn(2, 8, D_MODEL)
    tokens = torch.tensor([[3] * 6, [3] * 4 + [0] * 2])
    kwargs: dict = {}
    if "padding" in kind:
        kwargs["mask"] = padding_mask(tokens, 0)
    if "causal" in kind:
        kwargs["is_causal"] = True
    if kind == "cross":
        kwargs = {"memory": memory, "mask": padding_mask(torch.tensor([[3] * 8, [3] * 5 + [0] * 3]), 0)}
    fast = ours(x, **kwargs)
    with record_attention(ours) as recorded:
        explicit = ours(x, **kwargs)
    attn = recorded.weights(ours)
    torch.testing.assert_close(fast, explicit, atol=1e-6, rtol=1e-5)
    assert attn is not None
    torch.testing.assert_close(attn.sum(-1), torch.ones_like(attn.sum(-1)))
    if "causal" in kind:
        assert attn.triu(diagonal=1).abs().max() == 0
    if kind == "padding":
        assert attn[1, :, :, 4:].abs().max() == 0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_training_pass_and_gradients_equal_torch(causal: bool, bf16: bool) -> None:
    """CPU training takes SDPA in fp32 and the written-out path under bf16 autocast (the
    faster one there): output and gradients must be torch's either way, with padding and
    the subsequent mask (bf16 to bf16's precision)."""
    ours, ref = make_pair(5)
    ours.train(), ref.train()
    x = torch.randn(3, 7, D_MODEL)
    tokens = torch.tensor([[5] * 7, [5] * 4 + [0] * 3, [5] * 6 + [0]])
    mask = padding_mask(tokens, 0)
    attn_mask = ~subsequent_mask(7)[0, 0] if causal else None
    tolerance = {"atol": 3e-2, "rtol": 3e-2} if bf16 else {"atol": 1e-5, "rtol": 1e-5}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        expected, _ = ref(x, x, x, key_padding_mask=~mask[:, 0, 0], attn_mask=attn_mask, need_weights=False)
        got = ours(x, mask=mask, is_causal=causal)
    valid = tokens != 0
    torch.testing.assert_close(got[valid].float(), expected[valid].float(), **tolerance)
    got[valid].float().square().sum().backward()
    expected[valid].float().square().sum().backward()
    scale = ref.in_proj_weight.grad.abs().max()
    for mine, theirs in ((ours.in_proj.weight.grad, ref.in_proj_weight.grad),
                         (ours.out_proj.weight.grad, ref.out_proj.weight.grad)):
        torch.testing.assert_close(mine / scale, theirs / scale, **tolerance)


def test_cached_self_attention_equals_full_pass() -> None:
    ours, _ = make_pair(4)
    x = torch.randn(2, 5, D_MODEL)
    full = ours(x, is_causal=True)
    cache = KeyValueCache()
    steps = [ours(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)


def test_heads_must_divide_d_model() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_a_head_mask_silences_exactly_that_head() -> None:
    """ablate_heads multiplies each silenced head's output by 0 before W^O: with head 1 of
    4 kept, the output is W^O applied to that head's attention output alone (others zero)."""
    torch.manual_seed(0)
    module = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad(), ablate_heads(module, [0, 2, 3]):
        got = module(x)
    with torch.no_grad():
        q, k, v = (t.view(2, 5, 4, 4).transpose(1, 2) for t in module.in_proj(x).chunk(3, dim=-1))
        heads = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v  # (B, H, T, d_k)
        heads[:, [0, 2, 3]] = 0.0
        expected = module.out_proj(heads.transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(got, expected)
    with torch.no_grad():
        assert not torch.allclose(module(x), expected)
