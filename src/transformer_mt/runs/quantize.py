"""The weights a model decodes with: float32, bfloat16, or int8 on the CPU.

`prepare_model(model, dtype)` is the one place that turns a dtype name into a model
ready to decode (translate, evaluate, serve and `Translator.from_run` go through it):

- float32: as trained;
- bfloat16: every weight cast to bf16 (fast where the CPU has native bf16);
- int8: dynamic int8 quantization of the Linear layers (`torch.ao.quantization.quantize_dynamic`,
  the x86 backend's kernels): each weight matrix is stored as int8 with one scale per
  output row; the activations entering a Linear are quantized to 8 bits (7 on CPUs
  without AVX-512 VNNI: REDUCE_RANGE) at every call from their own range (hence
  "dynamic": no calibration data), multiplied in int8 with int32 sums, and come out in
  float32. Embeddings, LayerNorms, softmax and the attention products stay float32;
  decoding runs without autocast (float32 activations).

Every Linear layer becomes int8: the feed-forward networks, the attention output
projections, self-attention's fused Q/K/V `in_proj`, cross-attention's W^Q and [W^K; W^V],
and the generator. Cross-attention computes its projections from slices of
`in_proj.weight`, which a quantized Linear does not have, so each cross-attention's
in_proj is first split into two Linear modules (`MultiHeadAttention.split_in_proj`,
exactly the same products in float32). Leaving that in_proj in float32 would be slower:
every decoding step reads W^Q whole, 4 times the bytes in float32. The generator's weight is tied to the target embedding: the int8 generator
holds its own packed copy, and the embedding lookup keeps reading the float32 table.

Weight-only int8 (`torch.ops.aten._weight_int8pack_mm`) is not used: at the row counts of
beam search over a batch it is several times slower, and with float32 activations slower
at every size.

`torch.ao.quantization` is deprecated upstream in favour of torchao but present and
working in the torch this package pins (2.13); its deprecation warnings are silenced here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from transformer_mt.common.errors import UserError
from transformer_mt.model.transformer import EncoderDecoder

DTYPES = ("float32", "bfloat16", "int8")


def check_dtype(dtype: str) -> str:
    """`dtype` if it is a name of DTYPES, else a one-line UserError."""
    if dtype not in DTYPES:
        raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def int8_device(device: str) -> str:
    """The device name an int8 model runs on: the quantized kernels are CPU-only, so
    'auto' means the CPU and any other device is refused."""
    if device in ("auto", "cpu"):
        return "cpu"
    raise UserError(f"--dtype int8 runs on the CPU only, got --device {device}; "
                    "use --device cpu, or --dtype float32/bfloat16 on the GPU")


def int8_precision(precision: str) -> str:
    """The decoding precision of an int8 model: float32 activations, no autocast ('auto'
    and 'fp32' give 'fp32'); 'bf16' is refused, since the int8 kernels take float32 input."""
    if precision == "bf16":
        raise UserError("precision bf16 cannot be combined with dtype int8 (the int8 layers take float32 "
                        "activations); use precision fp32 or auto, or dtype bfloat16")
    return "fp32"


def prepare_model(model: nn.Module, dtype: str) -> nn.Module:
    """`model` (an EncoderDecoder on the CPU, float32 as loaded) converted in place for
    decoding in `dtype` (see the module docstring), in eval mode."""
    check_dtype(dtype)
    model.eval()
    if dtype == "bfloat16":
        return model.to(torch.bfloat16)
    model.float()
    return quantize_int8(model) if dtype == "int8" else model


# torch's int8 Linear quantizes its input to 7 bits (`reduce_range`), so that the 16-bit
# pair sums of the AVX2 / AVX-512 kernels cannot overflow. CPUs with AVX-512 VNNI sum in
# 32 bits: there the full 8 bits are safe, as fast, and a finer grid for the activations
# (docs/benchmarks.md, "What the fast paths cost in quality").
REDUCE_RANGE = not torch.cpu.get_capabilities().get("avx512_vnni", False)


class Int8Linear(DynamicQuantizedLinear):
    """torch's dynamically quantized Linear, with 8-bit activations where REDUCE_RANGE allows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=REDUCE_RANGE)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every Linear layer of `model` by a dynamically quantized int8 one
    (per-output-row weight scales), in place, after splitting each cross-attention's
    in_proj (see the module docstring); returns `model`."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    for layer in model.decoder.layers if isinstance(model, EncoderDecoder) else ():  # a learner's: as it is
        layer.src_attn.split_in_proj()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notices of torch.ao.quantization
        quantized = quantize_dynamic(model.eval(), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                     mapping={nn.Linear: Int8Linear}, inplace=True)
    return quantized.eval()  # the int8 modules are created in training mode


def is_int8(model: nn.Module) -> bool:
    """Whether `model` holds int8 (dynamically quantized) Linear layers."""
    return any(isinstance(module, DynamicQuantizedLinear) for module in model.modules())
