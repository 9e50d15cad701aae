"""The whole model: embeddings, encoder, decoder and generator (paper figure 1)."""

from __future__ import annotations

from typing import ContextManager

import torch
import torch.nn.functional as F
from torch import nn

from transformer_mt.common.config import ModelConfig
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.cache import DecoderCache
from transformer_mt.model.decoder import Decoder
from transformer_mt.model.embeddings import Embeddings, LearnedPositionalEmbedding, PositionalEncoding
from transformer_mt.model.encoder import Encoder
from transformer_mt.model.layers import PositionwiseFeedForward
from transformer_mt.model.recording import AttentionRecorder, record_attention


# A generator bias this low marks an output the model never gives probability to: exp of it
# (minus the log-sum-exp) underflows to exactly 0 in fp32 and bf16, yet it stays finite, so
# losses, gradients and weight checks stay finite. An imported Marian model's bos row is a
# copy of its decoder-start row that Marian's output layer does not have (interop/marian.py).
NEVER_LOGIT = -1e9


class Generator(nn.Module):
    """The final linear projection and softmax that turn decoder states into
    next-token log-probabilities (section 3.4)."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def never_emitted(self) -> list[int]:
        """The outputs whose bias is NEVER_LOGIT (or lower): probability exactly 0. The
        label-smoothed loss leaves them out; a trained model has none."""
        return (self.proj.bias.detach() <= NEVER_LOGIT / 2).nonzero().view(-1).tolist()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> unnormalised scores (B, T, vocab); the loss takes these."""
        return self.proj(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> log-probabilities (B, T, vocab)."""
        return F.log_softmax(self.proj(x).float(), dim=-1)


class EncoderDecoder(nn.Module):
    """A standard encoder-decoder: encode the source once, decode the target against it."""

    supports_cache = True  # decoding keeps its keys and values (a learner's model: False)

    def __init__(
        self,
        encoder: Encoder,
        decoder: Decoder,
        src_embed: Embeddings,
        tgt_embed: Embeddings,
        generator: Generator,
        positional: PositionalEncoding | LearnedPositionalEmbedding,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator
        self.positional = positional

    @property
    def max_positions(self) -> int:
        """The longest sequence the positional table takes, eos or bos included."""
        return self.positional.max_positions

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt_embed.lut.num_embeddings

    @property
    def n_heads(self) -> int:
        return self.encoder.layers[0].self_attn.n_heads

    @property
    def d_model(self) -> int:
        return self.encoder.layers[0].self_attn.d_model

    def attention_layers(self) -> dict[str, list[nn.Module]]:
        """The attention modules of each kind, one a layer: "encoder" and "decoder"
        self-attention, "cross" (the decoder's attention over the encoder output)."""
        return {"encoder": [layer.self_attn for layer in self.encoder.layers],
                "decoder": [layer.self_attn for layer in self.decoder.layers],
                "cross": [layer.src_attn for layer in self.decoder.layers]}

    def recorded_attention(self, modules: list[nn.Module]) -> ContextManager[AttentionRecorder]:
        """Record the weights of `modules` while the block runs (model/recording.py)."""
        return record_attention(*modules)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        """src (B, S) token ids, src_mask (B, 1, 1, S) -> memory (B, S, d_model)."""
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> torch.Tensor:
        """tgt (B, T) token ids -> decoder states (B, T, d_model).

        With `cache`, `tgt` holds only the newest position(s); keys and values of the
        earlier ones come from the cache, so each step costs one position, not all."""
        offset = cache.length() if cache is not None else 0
        x = self.positional(self.tgt_embed(tgt), offset=offset)
        return self.decoder(x, memory, src_mask, tgt_mask, cache)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Teacher-forced pass: decoder states (B, T, d_model) for every target position.
        Apply `generator` (log-probs) or `generator.logits` (for the loss) on top."""
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


def build_model(cfg: ModelConfig, pad_id: int = 0) -> EncoderDecoder:
    """Build and initialise a Transformer from a ModelConfig.

    Tying (section 3.4): the generator shares its weight with the target embedding when
    `tie_embeddings`; the source embedding shares it too when `share_vocab`. The weights
    start as `init_weights` says: Xavier-uniform for every matrix, the tied embedding
    included unless `embedding_init` is "normal" (initialize says what each gives), or with
    `init` "pytorch" PyTorch's own defaults, whose N(0, 1) embedding multiplied by
    sqrt(d_model) swamps the positional encoding.

    Positions (`positional`): the sinusoid of section 3.5, or a learned table (Table 3
    row E) that keeps its own initialisation (embeddings.LearnedPositionalEmbedding).

    Dropout: `dropout` is the paper's residual dropout (sub-layer outputs, embedding sums);
    the attention weights and the feed-forward activation take `attention_dropout` and
    `activation_dropout`, which default to `dropout` (-1 in the config)."""
    src_vocab = cfg.src_vocab_size
    tgt_vocab = cfg.tgt_vocab_size
    if src_vocab < 1 or tgt_vocab < 1:
        raise ValueError("model.src_vocab_size and model.tgt_vocab_size must be set (from the tokenizer)")
    if cfg.share_vocab and src_vocab != tgt_vocab:
        raise ValueError(f"share_vocab needs equal vocabularies, got {src_vocab} and {tgt_vocab}")
    layer_args = layer_arguments(cfg)
    tgt_embed = Embeddings(tgt_vocab, cfg.d_model, padding_idx=None, scale=cfg.scale_embeddings)
    src_embed = tgt_embed if cfg.share_vocab else Embeddings(src_vocab, cfg.d_model, scale=cfg.scale_embeddings)
    generator = Generator(cfg.d_model, tgt_vocab)
    model = EncoderDecoder(
        Encoder(layer_args, cfg.n_layers, cfg.norm_first),
        Decoder(layer_args, cfg.n_decoder_layers, cfg.norm_first),
        src_embed,
        tgt_embed,
        generator,
        positional_module(cfg),
    )
    init_weights(model, cfg)
    if cfg.tie_embeddings:
        generator.proj.weight = tgt_embed.lut.weight
    return model


def layer_arguments(cfg: ModelConfig) -> dict:
    """The arguments every encoder and decoder layer of `cfg` is built with."""
    return dict(d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff, dropout=cfg.dropout,
                activation=cfg.activation, attention_dropout=cfg.attention_p, activation_dropout=cfg.activation_p,
                norm=cfg.layer_norm)


def positional_module(cfg: ModelConfig) -> PositionalEncoding | LearnedPositionalEmbedding:
    """The positions model.positional names: "sinusoidal" (in model.positional_layout) or
    "learned" (the layout, a property of the sinusoid, does not apply)."""
    if cfg.positional == "learned":
        return LearnedPositionalEmbedding(cfg.d_model, cfg.dropout, cfg.max_positions)
    return PositionalEncoding(cfg.d_model, cfg.dropout, cfg.max_positions, cfg.positional_layout)


def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """The initial weights model.init names. "xavier": `initialize` (model.embedding_init
    choosing the token embedding's). "pytorch": every module keeps what PyTorch drew when it
    was built, as the study notes' make_model leaves it: an nn.Linear's weight and bias
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (W^Q, W^K and W^V stacked in one in_proj have the
    fan_in of each, d_model), an nn.Embedding N(0, 1), LayerNorm gains 1 and biases 0; a
    learned positional table keeps its own rule (embeddings.LearnedPositionalEmbedding).
    Scaled by sqrt(d_model), N(0, 1) token embeddings have an RMS of sqrt(d_model) (11.3
    at d_model 128) against the positional encoding's 0.71."""
    if cfg.init == "xavier":
        initialize(model, cfg.embedding_init)
    elif cfg.init == "notes":
        copy_like_make_model(model)
    elif cfg.init != "pytorch":
        raise ValueError(f"model.init must be 'xavier', 'pytorch' or 'notes', got {cfg.init!r}")


@torch.no_grad()
def copy_like_make_model(model: nn.Module) -> None:
    """The initial weights of the study notes' make_model (model.init: notes): PyTorch's
    draws, but `clones(nn.Linear(d_model, d_model), 4)` deep-copies one Linear into W^Q, W^K,
    W^V and W^O, `c(attn)` one MultiHeadedAttention into every self- and cross-attention,
    `c(ff)` one feed-forward network into every layer, and nothing re-draws them (their
    Modular_Transformer.py dropped the Annotated Transformer's Xavier loop): at step 0 every
    attention computes one function with Q = K = V, and the layers of a stack are equal.
    Embeddings (N(0, 1)) and the generator keep their own draws. The first attention's W^Q
    and the first feed-forward network are the ones copied."""
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    feed_forwards = [m for m in model.modules() if isinstance(m, PositionwiseFeedForward)]
    first = attentions[0]
    d_model = first.d_model
    weight, bias = first.in_proj.weight[:d_model].clone(), first.in_proj.bias[:d_model].clone()  # one Linear(d, d)
    for attention in attentions:
        attention.in_proj.weight.copy_(weight.repeat(3, 1))
        attention.in_proj.bias.copy_(bias.repeat(3))
        attention.out_proj.weight.copy_(weight)
        attention.out_proj.bias.copy_(bias)
    for feed_forward in feed_forwards[1:]:
        feed_forward.load_state_dict(feed_forwards[0].state_dict())


def initialize(model: nn.Module, embedding_init: str = "xavier") -> None:
    """Xavier-uniform for every matrix, zero biases. In attention, W^Q, W^K and W^V are
    each initialised as the d_model x d_model matrix the paper describes, though they are
    stored stacked in one (3 d_model, d_model) `in_proj`: its rows then have the spread
    of a d x d matrix (std sqrt(1 / d_model)), not of one 3d x d matrix (sqrt(1 / 2 d_model)).
    A learned positional table is drawn anew by its own rule (not Xavier).

    The token embedding (V, d_model): Xavier gives it a std of sqrt(2 / (V + d_model)), so
    with a vocabulary of 8,000 and d_model 128 a scaled embedding (times sqrt(d_model)) has
    entries of std ~0.18 against the positional encoding's ~0.71: the positions dominate
    the sum. `embedding_init` "normal" draws it from N(0, d_model^-0.5) instead, as
    tensor2tensor and fairseq do, so the scaled embedding has unit variance: the footing
    the sqrt(d_model) of section 3.4 assumes."""
    attention_parts = set()
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.reset_parameters()
            attention_parts.update((id(module.in_proj), id(module.out_proj)))
        if isinstance(module, LearnedPositionalEmbedding):
            module.reset_parameters()
            attention_parts.add(id(module.embedding))
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and id(module) not in attention_parts:
            nn.init.xavier_uniform_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    if embedding_init == "normal":
        for module in model.modules():
            if isinstance(module, Embeddings):
                nn.init.normal_(module.lut.weight, mean=0.0, std=module.d_model ** -0.5)
