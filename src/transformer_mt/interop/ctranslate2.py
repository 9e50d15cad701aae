"""Export a run to CTranslate2, the C++ inference engine that OpenNMT, Marian and Hugging
Face translation models are converted to (`pip install 'transformer-mt[interop]'`):

    transformer-mt export ctranslate2 runs/demo --out runs/demo-ct2 [--quantization int8]

The folder holds model.bin, config.json, shared_vocabulary.json, the run's
tokenizer.model (CTranslate2 takes subword pieces, not text) and transformer_mt.json
(where the export came from and the limits below).

How the model maps onto `ctranslate2.specs.TransformerSpec` (read from ctranslate2 4.x's
specs and converters, and checked by tests/integration/test_ctranslate2_export.py):

- Pre-norm (`model.norm_first`) or the paper's post-norm: `pre_norm`. Each
  SublayerConnection's LayerNorm is the `layer_norm` of the sub-layer it wraps
  (self_attention, attention, ffn): CTranslate2 applies it to the sub-layer's input with
  pre-norm and to the residual sum with post-norm, as we do. The stacks' final LayerNorms
  exist with pre-norm only, in both. LayerNorm epsilon: the model's (1e-5).
- Self-attention: linear[0] = in_proj (W^Q; W^K; W^V stacked, the fused layout CTranslate2
  uses), linear[1] = out_proj. Cross-attention: linear[0] = W^Q, linear[1] = [W^K; W^V],
  linear[2] = out_proj. Feed-forward: linear_0 = w_1, ReLU, linear_1 = w_2.
- Embeddings are multiplied by the model's scale, sqrt(d_model) (`scale_embeddings` takes
  the value itself). Tied weights are written once (`spec.optimize` aliases equal tensors).
- Positions: our table (sin/cos interleaved, from position 0, or the learned table of
  model.positional learned, the same one to both stacks) is passed as
  `position_encodings`; CTranslate2 adds row t to the token at position t, row 0 to the
  first, and raises "No position encodings are defined for positions >= N" for a
  sequence longer than the table. Its own sinusoid ([sin | cos], from position 1, another
  frequency step) is never used.
- Generator: `decoder.projection`, weight and bias.
- Vocabulary: the sentencepiece pieces in id order, the same for source and target;
  `add_source_eos` (the encoder reads the subwords and </s>, no <s>); decoding starts
  from <s> and ends at </s>; <unk> for pieces outside the vocabulary.

Decoding with `ctranslate2.Translator.translate_batch` as `Translator.search` does (tested):
- `max_input_length=max_positions` (in transformer_mt.json): it counts </s>, so it keeps
  max_positions - 1 subwords, our truncation; without it a longer source raises.
- `max_decoding_length` <= max_positions (ours: max_len_a * (subwords + 1) + max_len_b,
  capped at max_positions - 1, plus </s>), and `min_decoding_length=0` (its default, 1,
  forbids an empty output).
- Greedy (`beam_size=1`) and beam search with `length_penalty=0` give our outputs token for
  token. With alpha > 0 CTranslate2 scores log P / |Y| ** alpha (|Y| with </s>), not our
  GNMT log P / ((5 + |Y|) / 6) ** alpha: the same alpha can pick other hypotheses.
The core package never imports ctranslate2; this module does, when called."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_mt import __version__
from transformer_mt.common.config import CHECKPOINT_CHOICES, Config
from transformer_mt.common.specials import BOS_ID, EOS_ID, UNK_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import require_joint
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_write_text
from transformer_mt.interop.folders import check_out_dir, write_folder
from transformer_mt.model.attention import MultiHeadAttention
from transformer_mt.model.transformer import EncoderDecoder
from transformer_mt.runs.directory import RunDir, load_run_model, require_ours

QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")
# model.activation (where a run has one; the paper's ReLU otherwise) -> CTranslate2's Activation name
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "swish": "SWISH", "silu": "SWISH"}
METADATA = "transformer_mt.json"


def export_ctranslate2(
    run_dir: str | Path,
    out_dir: str | Path,
    quantization: str = "float32",
    checkpoint: str = "best",
    force: bool = False,
) -> Path:
    """Write the run's model (`checkpoint`: best, last or average) as a CTranslate2 model
    folder `out_dir`, weights stored as `quantization`. The folder appears whole or not
    at all; an existing non-empty `out_dir` is replaced only with `force`. Returns it."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    if checkpoint not in CHECKPOINT_CHOICES:
        raise UserError(f"checkpoint must be one of {', '.join(CHECKPOINT_CHOICES)}, got {checkpoint!r}")
    run, out = RunDir(Path(run_dir)), Path(out_dir)
    require_ours(run, "the CTranslate2 export")
    import_ctranslate2()
    check_out_dir(out, run.root, force)
    cfg, tokenizer, model = load_run_model(run, checkpoint, arch="encoder_decoder")
    write_model_folder(run, cfg, tokenizer, model, out.resolve(), quantization, {"checkpoint": checkpoint})
    return out


def write_model_folder(run: RunDir, cfg: Config, tokenizer: Tokenizer, model: EncoderDecoder, out: Path,
                       quantization: str, provenance: dict[str, Any]) -> None:
    """Write `model` (the run's, as loaded) as the CTranslate2 folder `out`, whole or not at
    all; transformer_mt.json holds `provenance` (the checkpoint, ...) with the limits below."""
    ctranslate2 = import_ctranslate2()
    check_exportable(cfg, tokenizer, f"{run.root}: ")
    spec = build_spec(model, tokenizer, getattr(cfg.model, "activation", "relu"), str(run.root))
    for path in run.tokenizer_files():  # tokenizer.model, or an imported run's vocab.json + spm models
        spec.register_file(str(path), path.name)
    try:
        spec.validate()
        spec.optimize(quantization=quantization)
    except ValueError as err:  # a spec the mapping above did not fill: a bug, said in one line
        raise UserError(f"{run.root}: CTranslate2 rejected the exported model ({str(err).strip()})") from None
    max_positions = model.positional.max_positions
    metadata = {
        "exported_from": str(run.root), **provenance, "quantization": quantization,
        "transformer_mt": __version__, "ctranslate2": ctranslate2.__version__,
        "max_positions": max_positions, "max_source_subwords": max_positions - 1,
        "decode": {key: getattr(cfg.decode, key) for key in ("beam", "length_penalty", "max_len_a", "max_len_b")},
    }

    def fill(folder: Path) -> None:
        spec.save(str(folder))
        atomic_write_text(folder / METADATA, json.dumps(metadata, indent=2) + "\n")

    write_folder(out, fill)


def check_exportable(cfg: Config, tokenizer: Tokenizer, where: str = "") -> None:
    """Refuse, in one line, a run this mapping cannot hold: separate vocabularies, or a
    layer normalisation CTranslate2 does not compute (`where` begins that line)."""
    require_joint(tokenizer, "the CTranslate2 export (shared_vocabulary.json)")
    if cfg.model.layer_norm != "pytorch":
        raise UserError(f"{where}model.layer_norm is {cfg.model.layer_norm}; CTranslate2 normalises as nn.LayerNorm "
                        "does (x - mean) / sqrt(var + eps), so this model cannot be exported")


def build_spec(model: EncoderDecoder, tokenizer: Tokenizer, activation: str = "relu", where: str = "the run"):
    """The `ctranslate2.specs.TransformerSpec` of `model` with the tokenizer's vocabulary
    (not yet validated or quantized). A model CTranslate2 cannot express is a UserError."""
    from ctranslate2.specs import common_spec, transformer_spec

    if activation not in ACTIVATIONS:
        raise UserError(f"{where}: model.activation={activation!r} has no CTranslate2 equivalent "
                        f"(it has {', '.join(ACTIVATIONS)}); this run cannot be exported")
    pieces = _vocabulary(model, tokenizer, where)
    pre_norm, final_norm = _normalisation(model, where)
    spec = transformer_spec.TransformerSpec.from_config(
        (len(model.encoder.layers), len(model.decoder.layers)), model.encoder.layers[0].self_attn.n_heads,
        pre_norm=pre_norm, no_final_norm=not final_norm,
        activation=getattr(common_spec.Activation, ACTIVATIONS[activation]),
    )
    take = _Weights()
    _set_stack_inputs(spec.encoder, model, model.src_embed, take)
    _set_stack_inputs(spec.decoder, model, model.tgt_embed, take)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.sublayer[0].norm, take)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.sublayer[1].norm, take)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.sublayer[0].norm, take)
        _set_cross_attention(layer_spec.attention, layer.src_attn, layer.sublayer[1].norm, take)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.sublayer[2].norm, take)
    if final_norm:
        _set_layer_norm(spec.encoder.layer_norm, model.encoder.norm, take)
        _set_layer_norm(spec.decoder.layer_norm, model.decoder.norm, take)
    _set_linear(spec.decoder.projection, model.generator.proj, take)
    take.check_all_used(model, where)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    config = spec.config
    config.add_source_bos, config.add_source_eos = False, True
    config.bos_token = config.decoder_start_token = pieces[BOS_ID]
    config.eos_token, config.unk_token = pieces[EOS_ID], pieces[UNK_ID]
    config.layer_norm_epsilon = take.layer_norm_eps(where)
    return spec


class _Weights:
    """Hands out float32 copies of the model's tensors and remembers which parameters
    and LayerNorms were used: a parameter the mapping does not know means a model option
    this export does not express, and is refused rather than silently dropped."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.eps: set[float] = set()

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        self.used.add(id(tensor))
        return tensor.detach().to("cpu", torch.float32).clone()

    def check_all_used(self, model: nn.Module, where: str) -> None:
        unused = [name for name, p in model.named_parameters() if id(p) not in self.used]
        if unused:
            raise UserError(f"{where}: the model has parameters the CTranslate2 export does not map "
                            f"({', '.join(unused[:4])}{', ...' if len(unused) > 4 else ''}); "
                            "this kind of run cannot be exported")

    def layer_norm_eps(self, where: str) -> float:
        if len(self.eps) != 1:
            raise UserError(f"{where}: LayerNorms with different epsilons ({sorted(self.eps)}); "
                            "CTranslate2 has one per model")
        return float(next(iter(self.eps)))


def _vocabulary(model: EncoderDecoder, tokenizer: Tokenizer, where: str) -> list[str]:
    """The tokenizer's pieces in id order, checked against both embeddings."""
    pieces = tokenizer.id_to_piece(list(range(len(tokenizer))))
    sizes = {model.src_embed.lut.num_embeddings, model.tgt_embed.lut.num_embeddings, model.generator.proj.out_features}
    if sizes != {len(pieces)}:
        raise UserError(f"{where}: the model's vocabularies ({sorted(sizes)}) differ from the tokenizer's "
                        f"{len(pieces)} pieces; the export needs one joint vocabulary")
    if len(set(pieces)) != len(pieces):
        raise UserError(f"{where}: the tokenizer has repeated pieces; CTranslate2 maps pieces to ids one to one")
    return pieces


def _normalisation(model: EncoderDecoder, where: str) -> tuple[bool, bool]:
    """(pre-norm, final stack LayerNorms): one choice for every sub-layer and both stacks,
    as CTranslate2 has; a post-norm stack ending with a LayerNorm it cannot express."""
    flags = {sublayer.norm_first for stack in (model.encoder, model.decoder)
             for layer in stack.layers for sublayer in layer.sublayer}
    finals = {not isinstance(stack.norm, nn.Identity) for stack in (model.encoder, model.decoder)}
    if len(flags) != 1 or len(finals) != 1 or (finals == {True} and flags == {False}):
        raise UserError(f"{where}: sub-layers mix pre- and post-norm, or the stacks' final LayerNorms differ; "
                        "CTranslate2 cannot express this model")
    return flags.pop(), finals.pop()


def _set_stack_inputs(stack_spec: Any, model: EncoderDecoder, embed: nn.Module, take: _Weights) -> None:
    """Embeddings (one table for the encoder), their scale, and our positional table: the
    sinusoid or the learned one alike, as CTranslate2 adds whichever table it is given."""
    embeddings = stack_spec.embeddings[0] if isinstance(stack_spec.embeddings, list) else stack_spec.embeddings
    embeddings.weight = take(embed.lut.weight)
    stack_spec.scale_embeddings = float(embed.scale)  # the value itself (1.0: no scaling), not a flag
    stack_spec.position_encodings.encodings = take(model.positional.table())  # a parameter when learned


def _set_linear(linear_spec: Any, linear: nn.Linear, take: _Weights) -> None:
    linear_spec.weight = take(linear.weight)
    if linear.bias is not None:
        linear_spec.bias = take(linear.bias)


def _set_layer_norm(norm_spec: Any, norm: nn.LayerNorm, take: _Weights) -> None:
    if not isinstance(norm, nn.LayerNorm) or norm.weight is None or norm.bias is None:
        raise UserError(f"the model has a {type(norm).__name__} without weight and bias where CTranslate2 "
                        "expects a LayerNorm; this run cannot be exported")
    norm_spec.gamma = take(norm.weight)
    norm_spec.beta = take(norm.bias)
    take.eps.add(norm.eps)


def _set_self_attention(spec: Any, attn: MultiHeadAttention, norm: nn.LayerNorm, take: _Weights) -> None:
    """linear[0]: the fused (3 d_model, d_model) Q, K, V projection; linear[1]: W^O."""
    _set_linear(spec.linear[0], attn.in_proj, take)
    _set_linear(spec.linear[1], attn.out_proj, take)
    _set_layer_norm(spec.layer_norm, norm, take)


def _set_cross_attention(spec: Any, attn: MultiHeadAttention, norm: nn.LayerNorm, take: _Weights) -> None:
    """linear[0]: W^Q (of the decoder states); linear[1]: [W^K; W^V] (of the encoder output); linear[2]: W^O."""
    d = attn.d_model
    weight, bias = take(attn.in_proj.weight), take(attn.in_proj.bias)
    spec.linear[0].weight, spec.linear[0].bias = weight[:d].clone(), bias[:d].clone()
    spec.linear[1].weight, spec.linear[1].bias = weight[d:].clone(), bias[d:].clone()
    _set_linear(spec.linear[2], attn.out_proj, take)
    _set_layer_norm(spec.layer_norm, norm, take)


def _set_feed_forward(spec: Any, ffn: nn.Module, norm: nn.LayerNorm, take: _Weights) -> None:
    _set_linear(spec.linear_0, ffn.w_1, take)
    _set_linear(spec.linear_1, ffn.w_2, take)
    _set_layer_norm(spec.layer_norm, norm, take)


# ---- the output folder --------------------------------------------------------------------
def import_ctranslate2():
    """The ctranslate2 module, or one line saying how to install it (the `interop` extra)."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError("ctranslate2 is not installed; pip install 'transformer-mt[interop]' "
                        "(or pip install 'ctranslate2>=4.5')") from None
    return ctranslate2
