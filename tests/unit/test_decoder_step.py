"""DecoderStep: the decoder's one-position step written over its weights gives the states
of the decoder's modules bit for bit, for every kind of decoder the presets and imports
build, through beam search's reordering and dropped rows; searches with it find the same
outputs and scores; where its result could differ from what a hook or dropout must see,
the modules run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_mt.common.config import ModelConfig
from transformer_mt.decoding.beam import beam_search
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.decoding.source import encode_source
from transformer_mt.decoding.step import DecoderStep
from transformer_mt.model.recording import ablate_heads, record_attention
from transformer_mt.model.transformer import EncoderDecoder, build_model
from transformer_mt.runs.quantize import prepare_model

PAD, BOS, EOS, VOCAB = 0, 2, 3, 40

# Every variant the step reads differently: pre- and post-norm (no final norm), the
# Annotated Transformer's LayerNorm (called as its module), other activations, learned
# positions, untied output, bf16 weights, int8 Linear modules (called as modules, after
# cross-attention's in_proj is split into q_proj and kv_proj).
VARIANTS = {
    "pre-norm": ({}, "float32"),
    "post-norm annotated gelu": (dict(norm_first=False, layer_norm="annotated", activation="gelu"), "float32"),
    "learned positions swish untied": (dict(positional="learned", activation="swish", tie_embeddings=False), "float32"),
    "bfloat16": ({}, "bfloat16"),
    "int8": ({}, "int8"),
}


def model_of(overrides: dict, dtype: str) -> EncoderDecoder:
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.1, src_vocab_size=VOCAB,
                      tgt_vocab_size=VOCAB, **overrides)
    return prepare_model(build_model(cfg), dtype)


def sources(lengths: list[int], width: int = 9) -> torch.Tensor:
    """Sentences of `lengths` tokens (eos last), right-padded to `width`."""
    torch.manual_seed(1)
    src = torch.randint(4, VOCAB, (len(lengths), width))
    for row, length in enumerate(lengths):
        src[row, length - 1] = EOS
        src[row, length:] = PAD
    return src


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("lengths", [[9, 3, 6, 1], [9, 9, 9]], ids=["padded", "unpadded"])
def test_step_gives_the_modules_states_bit_for_bit(variant: str, lengths: list[int]) -> None:
    model = model_of(*VARIANTS[variant])
    src = sources(lengths)
    fast, modules = encode_source(model, src, PAD), encode_source(model, src, PAD, step=False)
    assert fast.step is not None and modules.step is None
    torch.manual_seed(2)
    tokens = torch.randint(4, VOCAB, (len(lengths), 7))
    for t in range(tokens.size(1)):
        if t == 3:  # beam search's moves: reorder the hypotheses, then drop row 1 (a finished sentence)
            for source in (fast, modules):
                source.cache.reorder(torch.tensor([0, 0, 2] + list(range(3, len(lengths))))[: len(lengths)])
        if t == 5:
            keep = torch.tensor([0] + list(range(2, len(lengths))))
            for source in (fast, modules):
                source.select(keep)
            tokens = tokens.index_select(0, keep)
        step_tokens = tokens[:, t : t + 1]
        assert torch.equal(fast.decode(step_tokens), modules.decode(step_tokens)), f"step {t}"


@pytest.fixture
def without_step(monkeypatch: pytest.MonkeyPatch):
    """Searches with the decoder's modules at every step."""
    def search_with_modules(search, *args, **kwargs):
        with monkeypatch.context() as patch:
            patch.setattr(DecoderStep, "of", classmethod(lambda cls, decoder: None))
            return search(*args, **kwargs)
    return search_with_modules


def test_searches_find_the_same_outputs_and_scores(without_step) -> None:
    model = model_of({}, "float32")
    with torch.no_grad():
        model.generator.proj.weight.mul_(4.0)  # peaked distributions that depend on the input
    src, limits = sources([9, 3, 6, 1, 8, 5]), torch.tensor([12, 4, 9, 2, 11, 7])
    for search, args in ((beam_search, (3, limits)), (greedy_decode, (limits,))):
        fast = search(model, src, *args, BOS, EOS, PAD)
        modules = without_step(search, model, src, *args, BOS, EOS, PAD)
        assert torch.equal(fast[0], modules[0]) and torch.equal(fast[1], modules[1]), search.__name__


def test_the_modules_run_where_a_hook_or_dropout_must_see_them() -> None:
    model = model_of({}, "float32")
    decoder = model.decoder
    assert DecoderStep.of(decoder) is not None
    with record_attention(decoder):  # the attention views' weights hook
        assert DecoderStep.of(decoder) is None
    with ablate_heads(decoder.layers[1].src_attn, [0]):  # a heads hook
        assert DecoderStep.of(decoder) is None
    handle = decoder.layers[0].feed_forward.w_1.register_forward_hook(lambda *args: None)
    assert DecoderStep.of(decoder) is None
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
    assert DecoderStep.of(decoder) is None
    handle.remove()
    decoder.layers[0].feed_forward.train()  # dropout draws: only the modules do
    assert DecoderStep.of(decoder) is None
    model.eval()
    assert DecoderStep.of(decoder) is not None
