"""Equation 1 and multi-head attention (sections 3.2.1, 3.2.2) checked with the learner's own
projections: each attention module is called on a query, key and value of its own; the
nn.Linear applied to each is their W^Q, W^K, W^V, the one applied last their W^O; the
module's output is compared with MultiHead(Q, K, V) computed from those maps. Where it
differs, the usual slips are tried, one and two at a time, and the match names the part that
differs: the scale, the softmax's axis or the values (check `attention`), the split into heads,
their concatenation, their number or W^O (check `heads`); one map used for two of W^Q, W^K
and W^V fails `projections`."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields, replace

import torch
from torch import nn

from transformer_mt.learner.masks import may_attend
from transformer_mt.learner.recording import Call, linears
from transformer_mt.check.result import NotChecked, Outcome, close, difference, failed, passed
from transformer_mt.check.subject import Subject
from transformer_mt.model.attention import merge_heads, split_heads

Q_LEN, K_LEN = 5, 7  # unequal: a softmax over the wrong axis changes the numbers, not only the shapes


@dataclass(frozen=True)
class Form:
    """One way of computing MultiHead(Q, K, V); the defaults are the paper's."""

    scale: str = "sqrt(d_k)"  # what the scores are divided by
    axis: str = "keys"  # what the softmax normalises over
    weighted: str = "V"  # what the weights multiply
    split: str = "transpose"  # (B, T, d_model) -> (B, h, T, d_k): view(B, T, h, d_k).transpose(1, 2)
    merge: str = "transpose"  # (B, h, T, d_k) -> (B, T, d_model): transpose(1, 2) then view
    heads: int = 0  # 0: the h the model was built with
    w_o: bool = True
    masking: str = "before"  # hidden keys set to -1e9 before the softmax


PAPER = Form()
SLIPS = {  # field -> the other values a learner writes
    "scale": ("1", "d_k", "sqrt(d_model)", "times sqrt(d_k)"), "axis": ("queries", "heads"), "weighted": ("K",),
    "split": ("view",), "merge": ("view",), "heads": (1, 2, 8), "w_o": (False,),
}
MASKINGS = ("before", "after", "multiplied", "ignored")  # tried on a call with a mask, once the rest matched
ATTENTION_FIELDS = ("scale", "axis", "weighted", "masking")  # equation 1; the rest is multi-head (section 3.2.2)
SAYS = {
    ("scale", "1"): "the scores are not divided by sqrt(d_k)",
    ("scale", "d_k"): "the scores are divided by d_k, not sqrt(d_k)",
    ("scale", "sqrt(d_model)"): "the scores are divided by sqrt(d_model), not sqrt(d_k) = sqrt(d_model / h)",
    ("scale", "times sqrt(d_k)"): "the scores are multiplied by sqrt(d_k), not divided",
    ("axis", "queries"): "the softmax runs over the queries (dim=-2), not over the keys (dim=-1)",
    ("axis", "heads"): "the softmax runs over the heads (dim=1), not over the keys (dim=-1)",
    ("masking", "after"): "the mask is applied after the softmax: hidden keys are zeroed and the other weights no "
                          "longer sum to 1",
    ("masking", "multiplied"): "the scores are multiplied by the mask: a hidden key's score becomes 0, not -inf, "
                               "and still gets weight",
    ("masking", "ignored"): "the mask is not applied to the scores",
    ("masking", "unknown"): "with a mask, its output matches no way of hiding keys before the softmax",
    ("weighted", "K"): "the weights multiply the keys, not the values",
    ("split", "view"): "the heads are split without the transpose (view(B, h, T, d_k) mixes positions into heads)",
    ("merge", "view"): "the heads are merged without the transpose (view(B, T, d_model) of (B, h, T, d_k) mixes "
                       "heads and positions)",
    ("w_o", False): "no W^O projects the concatenated heads",
}
FIXES = {
    "scale": "divide the scores by math.sqrt(d_k), d_k = d_model // h: scores = q @ k.transpose(-2, -1) / "
             "math.sqrt(d_k)",
    "axis": "take the softmax over the keys: scores.softmax(dim=-1)",
    "masking": "hide keys before the softmax: scores = scores.masked_fill(mask == 0, -1e9)",
    "weighted": "multiply the weights by the values: weights @ v",
    "split": "split with x.view(B, T, h, d_k).transpose(1, 2)",
    "merge": "merge with x.transpose(1, 2).contiguous().view(B, T, h * d_k)",
    "heads": "split d_model into the h heads the model is built with (d_k = d_model // h)",
    "w_o": "apply W^O, an nn.Linear(d_model, d_model), to the concatenated heads",
}


def says(form: Form, name: str) -> str:
    value = getattr(form, name)
    return SAYS.get((name, value), f"the attention computes {value} heads, not the h it was built with")


def deviations(form: Form) -> list[str]:
    return [f.name for f in fields(Form) if getattr(form, f.name) != getattr(PAPER, f.name)]


def candidate_forms(depth: int = 2) -> list[Form]:
    """The paper's form, then every form one slip away, then two."""
    singles = [(name, value) for name, values in SLIPS.items() for value in values]  # masking: see masked_form
    found = [PAPER]
    for count in range(1, depth + 1):
        for combination in itertools.combinations(singles, count):
            if len({name for name, _ in combination}) == count:
                found.append(replace(PAPER, **dict(combination)))
    return found


def multi_head(form: Form, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, maps: dict[str, nn.Module],
               h: int, keys: torch.Tensor | None = None) -> torch.Tensor:
    """MultiHead(Q, K, V) with their maps, computed the way `form` says; `keys` (B, Tk), True
    where a key may be attended to."""
    batch, d_model = q.size(0), q.size(-1)
    heads = form.heads or h
    d_k = d_model // heads

    def split(x: torch.Tensor) -> torch.Tensor:  # (B, T, d_model) -> (B, h, T, d_k)
        return x.reshape(batch, heads, -1, d_k) if form.split == "view" else split_heads(x, heads)

    query, key, value = split(maps["Q"](q)), split(maps["K"](k)), split(maps["V"](v))
    scores = query @ key.transpose(-2, -1)  # (B, h, Tq, Tk)
    divisor = {"sqrt(d_k)": math.sqrt(d_k), "1": 1.0, "d_k": float(d_k), "sqrt(d_model)": math.sqrt(d_model),
               "times sqrt(d_k)": 1 / math.sqrt(d_k)}[form.scale]
    scores = scores / divisor
    hidden = None if keys is None else ~keys[:, None, None, :]  # (B, 1, 1, Tk)
    if hidden is not None and form.masking == "before":
        scores = scores.masked_fill(hidden, -1e9)
    elif hidden is not None and form.masking == "multiplied":
        scores = scores * ~hidden
    weights = scores.softmax(dim={"keys": -1, "queries": -2, "heads": 1}[form.axis])
    if hidden is not None and form.masking == "after":
        weights = weights.masked_fill(hidden, 0.0)
    x = weights @ (value if form.weighted == "V" else key)  # (B, h, Tq, d_k)
    x = x.reshape(batch, -1, d_model) if form.merge == "view" else merge_heads(x)  # (B, Tq, d_model)
    return maps["O"](x) if form.w_o else x


@dataclass
class Found:
    """One attention module: the Linear applied to each of Q, K, V (and O), the form its
    output matched (None: none), or why it could not be analysed."""

    name: str
    applied: dict[str, list[nn.Linear]] = field(default_factory=dict)
    form: Form | None = None
    change: float = 0.0
    problem: str | None = None


def called(module: nn.Module, template: Call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Their module on (q, k, v): without a mask, or with one that hides nothing, shaped and
    encoded like the mask it got in the model."""
    try:
        out = module(q, k, v)
    except Exception:
        masks = [t for t in template.inputs if not t.is_floating_point() or t.size(-1) != q.size(-1)]
        if not masks:
            raise
        open_value = masks[0].reshape(-1)[0]  # the first key of the first sentence is real: its value lets in
        out = module(q, k, v, open_value.expand(q.size(0), 1, k.size(1)).clone())
    return out[0] if isinstance(out, (tuple, list)) else out


def analysed(subject: Subject, name: str, module: nn.Module, template: Call) -> Found:
    found = Found(name)
    g = torch.Generator().manual_seed(4)
    d_model = subject.sizes.d_model
    q, k, v = (torch.randn(3, length, d_model, generator=g) for length in (Q_LEN, K_LEN, K_LEN))
    seen: list[tuple[nn.Linear, torch.Tensor]] = []
    hooks = [lin.register_forward_hook(lambda m, args, out: seen.append((m, args[0]))) for lin in linears(module)]
    try:
        out = called(module, template, q, k, v)
    finally:
        for hook in hooks:
            hook.remove()
    if not torch.equal(out, called(module, template, q, k, v)):
        found.problem = "its output changes between two calls in eval mode (see dropout)"
        return found
    found.applied = {role: [m for m, x in seen if x.shape == t.shape and torch.equal(x, t)]
                     for role, t in (("Q", q), ("K", k), ("V", v))}
    if not all(found.applied.values()):
        missing = [role for role, maps in found.applied.items() if not maps]
        found.problem = f"no nn.Linear is applied to its {', '.join(missing)} input (W^Q, W^K, W^V not found)"
        return found
    inputs = (q, k, v)
    last = [m for m, x in seen if not any(x.shape == t.shape and torch.equal(x, t) for t in inputs)]
    maps = {role: applied[0] for role, applied in found.applied.items()} | {"O": last[-1] if last else nn.Identity()}
    found.change = difference(out, multi_head(PAPER, q, k, v, maps, subject.sizes.h))
    for form in candidate_forms():
        if not form.w_o or last:
            try:
                if close(out, multi_head(form, q, k, v, maps, subject.sizes.h)):
                    found.form = masked_form(form, module, template, (q, k, v), maps, subject.sizes.h)
                    break
            except RuntimeError:  # a number of heads that does not divide d_model
                continue
    return found


def key_mask(template: Call, batch: int, keys: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(their mask as the model got it, (B, Tk) True where a key may be attended to): a source
    mask (B, 1, S) or (B, 1, 1, S) of the recorded call, read by its first entry (a real key)."""
    for mask in template.inputs:
        if mask.shape in ((batch, 1, keys), (batch, 1, 1, keys)) and not bool((mask == mask.reshape(-1)[0]).all()):
            encoding = "blocked" if mask.dtype == torch.bool and not bool(mask.reshape(-1)[0]) else "attend"
            return mask, may_attend(mask, encoding).reshape(batch, keys)
    return None


def masked_form(form: Form, module: nn.Module, template: Call, inputs: tuple[torch.Tensor, ...],
                maps: dict[str, nn.Module], h: int) -> Form:
    """`form`, with how the module hides keys: called with the mask it got in the model."""
    q, k, v = inputs
    found = key_mask(template, q.size(0), k.size(1))
    if found is None:
        return form
    mask, keys = found
    out = module(q, k, v, mask)
    out = out[0] if isinstance(out, (tuple, list)) else out
    for masking in MASKINGS:
        if close(out, multi_head(replace(form, masking=masking), q, k, v, maps, h, keys)):
            return replace(form, masking=masking)
    return replace(form, masking="unknown")


def attention_modules(subject: Subject) -> list[Found]:
    """Every attention module of one pass, analysed once per subject."""
    if "attention" not in subject.cache:
        first: dict[int, Call] = {}
        for call in subject.attention_calls():
            first.setdefault(id(call.module), call)
        subject.cache["attention"] = [analysed(subject, call.label(), call.module, call) for call in first.values()]
    found = subject.cache["attention"]
    if not found:
        raise NotChecked("no module is called with a query, a key and a value of d_model features")
    return found


def judged(subject: Subject, part: tuple[str, ...], says_ok: str) -> Outcome:
    """Pass when no module's matched form deviates in `part`; fail on the first that does."""
    modules = attention_modules(subject)
    for found in modules:
        if found.problem:
            raise NotChecked(f"{found.name}: {found.problem}")
    for found in modules:
        if found.form is None:
            if part != ATTENTION_FIELDS:
                raise NotChecked(f"{found.name} differs from the paper in a way the check does not know "
                                 "(see attention)")
            return failed(f"{found.name}: its output differs from MultiHead(Q, K, V) computed with its own W^Q, W^K, "
                          f"W^V and W^O by {found.change:.2g}, and matches none of the usual slips",
                          "compute softmax(Q K^T / sqrt(d_k)) V per head step by step and compare with your module")
        slips = [name for name in deviations(found.form) if name in part]
        if slips:
            return failed(f"{found.name}: {'; '.join(says(found.form, name) for name in slips)} (its output matches "
                          "that, not the paper's)", "; ".join(FIXES[name] for name in slips))
    return passed(f"{says_ok}, in all {len(modules)} attention modules ({modules[0].name}, ...)")


def attention(subject: Subject) -> Outcome:
    return judged(subject, ATTENTION_FIELDS, "softmax(Q K^T / sqrt(d_k)) V over the keys (equation 1)")


def heads(subject: Subject) -> Outcome:
    sizes = subject.sizes
    fields_ = tuple(name for name in SLIPS if name not in ATTENTION_FIELDS)
    return judged(subject, fields_, f"h = {sizes.h} heads of d_k = {sizes.d_model // sizes.h}, concatenated, then W^O")


def projections(subject: Subject) -> Outcome:
    for found in attention_modules(subject):
        if found.problem:
            raise NotChecked(f"{found.name}: {found.problem}")
        shared = [(a, b) for a, b in (("Q", "K"), ("Q", "V"), ("K", "V"))
                  if any(m is n for m in found.applied[a] for n in found.applied[b])]
        if shared:
            pairs = ", ".join(f"W^{a} and W^{b}" for a, b in shared)
            return failed(f"{found.name}: one nn.Linear serves as {pairs}: the query, key and value are projected "
                          "by the same map", "give the query, the key and the value an nn.Linear each "
                          "(q_linear, k_linear, v_linear), and apply each to its own input")
    return passed("W^Q, W^K and W^V are three maps in every attention module")
