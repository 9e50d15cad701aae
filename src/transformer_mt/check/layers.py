"""The position-wise feed-forward network (section 3.3, equation 2) and the layer
normalisation around each sub-layer (section 3.1), checked by calling the learner's modules on
inputs of their own and comparing with the formulas."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_mt.learner.recording import Network, calls_of, feed_forward_modules, norm_modules
from transformer_mt.check.result import NotChecked, Outcome, close, difference, failed, passed
from transformer_mt.check.subject import Subject
from transformer_mt.learner.building import SRC_LEN, TGT_LEN

Activation = Callable[[torch.Tensor], torch.Tensor]
FEED_FORWARD_FORMS: dict[str, tuple[Activation, Activation]] = {  # what is applied after W_1, after W_2
    "max(0, x W_1 + b_1) W_2 + b_2": (F.relu, lambda x: x),
    "no ReLU between W_1 and W_2: the two maps are one linear map": (lambda x: x, lambda x: x),
    "GELU in place of ReLU (a later choice: GPT, BERT)": (F.gelu, lambda x: x),
    "SiLU (swish) in place of ReLU": (F.silu, lambda x: x),
    "a ReLU after W_2 as well": (F.relu, F.relu),
    "the ReLU after W_2 instead of between the maps": (lambda x: x, F.relu),
    "tanh in place of ReLU": (torch.tanh, lambda x: x),
    "a sigmoid in place of ReLU": (torch.sigmoid, lambda x: x),
}
PAPER_FFN = next(iter(FEED_FORWARD_FORMS))


def probe(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Inputs whose positions differ in scale (0.5 to 3) and offset (-2 to 2), as residual
    streams do: a normalisation over the wrong axis or by the variance shows."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g)
    scale = 0.5 + 2.5 * torch.rand(*shape[:-1], 1, generator=g)
    return base * scale + 4 * torch.rand(*shape[:-1], 1, generator=g) - 2


def feed_forward_form(module: nn.Module, w_1: nn.Linear, w_2: nn.Linear, x: torch.Tensor) -> str | None:
    out = module(x)
    if not torch.equal(out, module(x)):
        raise NotChecked("a feed-forward network's output changes between two calls in eval mode (see dropout)")
    for form, (inner, outer) in FEED_FORWARD_FORMS.items():
        if close(out, outer(w_2(inner(w_1(x))))):
            return form
    return None


def feed_forwards(subject: Subject, required: bool = True) -> dict[str, Network]:
    """name -> (module, W_1, W_2) of each feed-forward network that runs in a pass (a module of
    its own: nn.TransformerEncoderLayer keeps its W_1 and W_2 beside the attention, and has none)."""
    attention = {id(call.module) for call in subject.attention_calls()}
    ran = {id(call.module) for call in subject.recorded()}
    networks = feed_forward_modules(subject.model, attention, subject.sizes.d_model)
    found = {name: network for name, network in networks.items() if id(network[0]) in ran}
    if not found and required:
        raise NotChecked("no module of its own holds an nn.Linear d_model -> d_ff and one d_ff -> d_model outside "
                         "the attention")
    return found


def inner_size(subject: Subject) -> int:
    """d_ff as built: the width of a Linear d_model -> d_ff followed by one d_ff -> d_model,
    outside the attention modules."""
    networks = feed_forwards(subject, required=False)
    if networks:
        return next(iter(networks.values()))[1].out_features
    d_model = subject.sizes.d_model
    attention = {id(p) for call in subject.attention_calls() for p in call.module.parameters()}
    outside = [m for m in subject.model.modules() if isinstance(m, nn.Linear) and id(m.weight) not in attention]
    for w_1 in outside:
        if w_1.in_features == d_model and any(w.in_features == w_1.out_features and w.out_features == d_model
                                              for w in outside if w is not w_1):
            return w_1.out_features
    raise NotChecked("no nn.Linear d_model -> d_ff followed by one d_ff -> d_model outside the attention")


def feed_forward(subject: Subject) -> Outcome:
    networks = feed_forwards(subject)
    x = probe((3, 5, subject.sizes.d_model), seed=5)
    for name, (module, w_1, w_2) in networks.items():
        label = f"{name} ({type(module).__name__})"
        if w_1.bias is None or w_2.bias is None:
            return failed(f"{label}: {'W_1' if w_1.bias is None else 'W_2'} has no bias; equation 2 adds b_1 and b_2",
                          "build both maps with nn.Linear(..., bias=True), the default")
        form = feed_forward_form(module, w_1, w_2, x)
        if form != PAPER_FFN:
            change = difference(module(x), w_2(F.relu(w_1(x))))
            found = form or f"something else (it differs from equation 2 by {change:.2g})"
            return failed(f"{label} computes {found}, not FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 with its own W_1 "
                          "and W_2", "return self.w_2(self.dropout(F.relu(self.w_1(x))))")
    module, w_1, _ = next(iter(networks.values()))
    return passed(f"FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 in all {len(networks)} feed-forward networks "
                  f"({type(module).__name__}, d_ff {w_1.out_features})")


# ---- layer normalisation ---------------------------------------------------------------------
def standardised(x: torch.Tensor, dim: int, divide: str = "std", centre: bool = True) -> torch.Tensor:
    mean = x.mean(dim, keepdim=True) if centre else 0
    variance = x.var(dim, unbiased=False, keepdim=True)
    divisor = {"std": (variance + 1e-5).sqrt(), "variance": variance + 1e-5, "nothing": 1}[divide]
    return (x - mean) / divisor


NORM_FORMS = {
    "each position normalised over its features": lambda x: standardised(x, -1),
    "divides by the variance, not the standard deviation": lambda x: standardised(x, -1, "variance"),
    "does not subtract the mean": lambda x: standardised(x, -1, centre=False),
    "does not divide by the standard deviation": lambda x: standardised(x, -1, "nothing"),
    "normalises over the positions (dim=1), not over the features (dim=-1)": lambda x: standardised(x, 1),
    "normalises over the batch (dim=0), not over the features (dim=-1)": lambda x: standardised(x, 0),
}
PAPER_NORM = next(iter(NORM_FORMS))


def fits(y: torch.Tensor, z: torch.Tensor) -> tuple[bool, torch.Tensor]:
    """Whether y = gain * z + bias for one gain and bias per feature (least squares over the
    positions), and the fitted gain."""
    ys, zs = y.reshape(-1, y.size(-1)).double(), z.reshape(-1, z.size(-1)).double()
    zc, yc = zs - zs.mean(0), ys - ys.mean(0)
    gain = (zc * yc).sum(0) / (zc * zc).sum(0).clamp_min(1e-12)
    fitted = gain * zc + ys.mean(0)
    return close(fitted, ys, 1e-3), gain


def norm_form(module: nn.Module, x: torch.Tensor) -> tuple[str | None, torch.Tensor]:
    y = module(x)
    for form, normalise in NORM_FORMS.items():
        ok, gain = fits(y, normalise(x))
        if ok:
            return form, gain
    return None, torch.ones(1)


def variance_note(module: nn.Module, gain: torch.Tensor, d_model: int) -> str:
    """Which variance a norm with a gain of ones (as built) divides by: the fitted gain is 1
    for the biased variance (nn.LayerNorm) and sqrt((d-1)/d) for the unbiased std."""
    ones = [p for p in module.parameters(recurse=False) if p.dim() == 1 and bool((p == 1).all())]
    if not ones:
        return ""
    ratio = float(gain.mean())
    if abs(ratio - math.sqrt((d_model - 1) / d_model)) < 1e-3:
        return "; the unbiased std (d_model - 1), as the Annotated Transformer's LayerNorm, which the paper leaves open"
    return "; the biased variance, as nn.LayerNorm" if abs(ratio - 1) < 1e-3 else ""


def layer_norm(subject: Subject) -> Outcome:
    d_model, n = subject.sizes.d_model, subject.sizes.N
    norms = norm_modules(subject.model, d_model)
    calls = calls_of(subject.recorded(), norms)
    if not calls:
        return failed("no layer normalisation runs: no nn.LayerNorm, and no module with a gain and a bias of d_model "
                      "features is called", "wrap each sub-layer as LayerNorm(x + Sublayer(x)) (section 3.1)")
    per_side = {side: sum(1 for c in calls if c.floats and c.floats[0].size(1) == length)
                for side, length in (("encoder", SRC_LEN), ("decoder", TGT_LEN))}
    for side, sub_layers in (("encoder", 2 * n), ("decoder", 3 * n)):
        if per_side[side] < sub_layers:
            return failed(f"the {side} runs {per_side[side]} layer normalisations; its {sub_layers} sub-layers "
                          f"(N = {n}) have one each", "normalise around every sub-layer: LayerNorm(x + Sublayer(x)), "
                          "or x + Sublayer(LayerNorm(x))")
    x = probe((3, 5, d_model), seed=6)
    notes = ""
    for module in {id(c.module): c.module for c in calls}.values():
        form, gain = norm_form(module, x)
        label = f"{next(c.label() for c in calls if c.module is module)}"
        if form != PAPER_NORM:
            return failed(f"{label} {form or 'does not normalise each position over its features'}",
                          "(x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps), then gain "
                          "and bias; or nn.LayerNorm(d_model)")
        notes = notes or variance_note(module, gain, d_model)
    return passed(f"each position normalised over its features in all {len(calls)} calls "
                  f"({per_side['encoder']} in the encoder, {per_side['decoder']} in the decoder){notes}")
