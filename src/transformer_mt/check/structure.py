"""How the learner's layers are put together: each sub-layer's input added back (residual,
section 3.1), N layers that are N distinct modules (shared_layers, section 3.3: "different
parameters from layer to layer"), weight matrices drawn independently (cloned_init: the
study notes' deep copies never re-drawn), the number of parameters (parameter_count) and every
module and trainable tensor registered where PyTorch trains and saves it (registered)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Any, Iterator

import torch
from torch import nn

from transformer_mt.check.layers import feed_forwards, inner_size
from transformer_mt.check.positions import XAVIER_LOOP, SIDES, embedding_step, learned
from transformer_mt.learner.recording import Call, attention_role, record
from transformer_mt.check.result import COPIES, Outcome, differs, failed, passed
from transformer_mt.check.subject import Subject, changed_everywhere
from transformer_mt.learner.building import SRC_LEN, TGT_LEN
from transformer_mt.learner.faults import unregistered_state
from transformer_mt.model.measures import near_copies


def sub_layers(subject: Subject) -> dict[int, nn.Module]:
    """id -> module of every attention and feed-forward network that runs."""
    found = {id(call.module): call.module for call in subject.attention_calls()}
    found.update({id(module): module for module, _, _ in feed_forwards(subject, required=False).values()})
    return found


@contextlib.contextmanager
def silenced(modules: dict[int, nn.Module]) -> Iterator[None]:
    """Every module in `modules` gives zeros of its output's shape while the block runs."""
    def zero(module: nn.Module, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (torch.zeros_like(output[0]), *output[1:])
        return torch.zeros_like(output)

    handles = [module.register_forward_hook(zero) for module in modules.values()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def normalised(x: torch.Tensor) -> bool:
    """Every position of x (B, T, d_model) has mean 0 and standard deviation 1 over its features."""
    return bool((x.mean(-1).abs() < 1e-3).all()) and bool(((x.std(-1, unbiased=False) - 1).abs() < 2e-2).all())


def norm_placement(subject: Subject) -> str:
    """Pre-norm or post-norm, read off the first encoder attention's input, and whether the
    encoder's output is normalised (a final LayerNorm)."""
    calls = subject.attention_calls()
    first = next((c for c in calls if attention_role(c, SRC_LEN, TGT_LEN) == "encoder self"), None)
    cross = next((c for c in calls if attention_role(c, SRC_LEN, TGT_LEN) == "cross"), None)
    if first is None:
        return ""
    if not normalised(first.floats[0]):
        return "post-norm, LayerNorm(x + Sublayer(x)), as the paper"
    final = "with" if cross is not None and normalised(cross.floats[1]) else "without"
    return f"pre-norm, x + Sublayer(LayerNorm(x)), {final} a final LayerNorm (the Annotated Transformer's; the paper " \
        "leaves room for it)"


def residual(subject: Subject) -> Outcome:
    """With every sub-layer giving zeros, a residual connection passes its input on: the
    stream after a sub-layer still depends on the tokens. Without one it is constant."""
    src, tgt = subject.src, subject.tgt
    other = (changed_everywhere(src, subject.sizes.src_vocab), changed_everywhere(tgt, subject.sizes.tgt_vocab))
    outputs: list[torch.Tensor] = []
    modules = sub_layers(subject)
    with silenced(modules):
        first = record(subject.model, lambda: outputs.append(subject.forward(src, tgt)))
        second = record(subject.model, lambda: outputs.append(subject.forward(*other)))
    pairs = [(a, b) for a, b in zip(first, second) if id(a.module) in modules and a.floats]
    for side, length in (("encoder", SRC_LEN), ("decoder", TGT_LEN)):
        on_side = [(a, b) for a, b in pairs if a.floats[0].size(1) == length]
        seen = [(a.floats[0], b.floats[0]) for a, b in on_side] + [stream_after(side, pairs, outputs)]
        for (a, _), (before, after) in zip(on_side, zip(seen, seen[1:])):
            if after is not None and differs(*before) and not differs(*after):
                return failed(f"{a.label()}: after this {side} sub-layer the stream no longer depends on the tokens "
                              "when the sub-layer gives zeros: its input is not added back",
                              "return x + self.dropout(sublayer(self.norm(x))) (pre-norm), or "
                              "self.norm(x + self.dropout(sublayer(x))) (the paper's post-norm)")
    placement = norm_placement(subject)
    return passed("each sub-layer's input is added back" + (f": {placement}" if placement else ""))


def stream_after(side: str, pairs: list[tuple[Call, Call]], outputs: list[torch.Tensor]) -> tuple[Any, Any] | None:
    """What follows the last sub-layer of a side: the encoder's output as the first
    encoder-decoder attention gets it, or the model's output."""
    if side == "decoder":
        return outputs[0], outputs[1]
    cross = next(((a, b) for a, b in pairs if attention_role(a, SRC_LEN, TGT_LEN) == "cross"), None)
    return (cross[0].floats[1], cross[1].floats[1]) if cross else None


def registered(subject: Subject) -> Outcome:
    """Every module and trainable tensor held where nn.Module registers it: not in a plain
    list or dict (then the optimizer, state_dict and .eval() never reach it)."""
    if problem := unregistered_state(subject.model, subject.path):
        return failed(problem, "hold layers in nn.ModuleList or nn.ModuleDict, trainable tensors in nn.Parameter")
    return passed("every module and trainable tensor is registered (the optimizer, the saved weights and .eval() "
                  "reach them all)")


def shared_layers(subject: Subject) -> Outcome:
    calls = subject.attention_calls()
    networks = feed_forwards(subject, required=False)
    ffn_ids = {id(module) for module, _, _ in networks.values()}
    runs = Counter(id(c.module) for c in calls)
    runs.update(id(c.module) for c in subject.recorded() if id(c.module) in ffn_ids)
    labels = {id(c.module): c.label() for c in subject.recorded()}
    n = subject.sizes.N
    if repeated := [key for key, count in runs.items() if count > 1]:
        return failed(f"{labels[repeated[0]]} runs {runs[repeated[0]]} times in one pass: the N = {n} layers of its "
                      "stack are one layer object", "build N layers: nn.ModuleList([copy.deepcopy(layer) for _ in "
                      "range(N)]), then re-draw their weights (see cloned_init)")
    owners: dict[int, str] = {}
    for key, module in sub_layers(subject).items():
        for parameter in module.parameters():
            if id(parameter) in owners and owners[id(parameter)] != labels[key]:
                return failed(f"{owners[id(parameter)]} and {labels[key]} share their weights",
                              "give each layer its own modules (copy.deepcopy, then re-draw the weights)")
            owners[id(parameter)] = labels[key]
    roles = Counter(attention_role(c, SRC_LEN, TGT_LEN) for c in calls)
    if roles["encoder self"] < n or roles["decoder self"] < n:
        return failed(f"the encoder runs {roles['encoder self']} self-attention layers and the decoder "
                      f"{roles['decoder self']}; N = {n} were asked", "build and run N layers in each stack")
    return passed(f"{len(runs) - len(networks)} attention modules and {len(networks)} feed-forward networks, each "
                  f"run once: the N = {n} layers of each stack are distinct")


def weight_matrices(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every trained matrix once: a tied one (one tensor, or one storage) under its first name;
    vectors (gains, biases) and constants (requires_grad False) left out."""
    found, storages = {}, set()
    for name, parameter in model.named_parameters():
        if parameter.dim() >= 2 and parameter.requires_grad and parameter.data_ptr() not in storages:
            storages.add(parameter.data_ptr())
            found[name] = parameter
    return found


def cloned_init(subject: Subject) -> Outcome:
    matrices = weight_matrices(subject.model)
    pairs = near_copies(matrices, COPIES)
    if not pairs:
        return passed(f"no two of the {len(matrices)} weight matrices are copies of each other")
    copied = {name for _, a, b in pairs for name in (a, b)}
    _, a, b = max(pairs, key=lambda pair: len(os.path.commonprefix(pair[1:])))  # copies within one module first
    return failed(f"{len(copied)} of {len(matrices)} weight matrices are copies of another as built ({len(pairs)} "
                  f"pairs, e.g. {a} and {b}): deep copies of one module (copy.deepcopy, clones(), c(attn)) that "
                  "nothing re-drew, so an attention's W^Q, W^K, W^V and W^O start equal and the layers of a stack "
                  "start as one function that training must first pull apart",
                  f"re-draw every matrix after building the model: {XAVIER_LOOP} (docs/ablations.md measures what "
                  "the copies cost the notes' model: `+independent_init`)")


def paper_totals(d: int, widths: list[int], n: int, src_vocab: int, tgt_vocab: int) -> dict[int, str]:
    """total -> how: the paper's parameter count for these sizes under each choice it leaves
    open (projection biases, final LayerNorms, tied embeddings, an output bias); `widths`: the
    d_ff of each of the 2N feed-forward networks, as built."""
    found: dict[int, str] = {}
    ffns, norm = sum(2 * d * d_ff + d_ff + d for d_ff in widths), 2 * d
    tyings = {"separate embeddings and output layer": (src_vocab + 2 * tgt_vocab) * d,
              "the output layer tied to the target embedding": (src_vocab + tgt_vocab) * d}
    if src_vocab == tgt_vocab:
        tyings |= {"all three tied": tgt_vocab * d, "one embedding for both sides": 2 * tgt_vocab * d}
    for bias in (True, False):
        attention = 4 * d * d + (4 * d if bias else 0)
        layers = n * (attention + 2 * norm) + n * (2 * attention + 3 * norm) + ffns
        for finals in (2, 0, 1):
            for tying, embeddings in tyings.items():
                for output_bias in (True, False):
                    final = ("no final LayerNorm", "one final LayerNorm", "a final LayerNorm in each stack")[finals]
                    how = (f"{'with' if bias else 'without'} projection biases, {final}, {tying}, "
                           f"{'an' if output_bias else 'no'} output bias")
                    found.setdefault(layers + finals * norm + embeddings + (tgt_vocab if output_bias else 0), how)
    return found


def explained(difference: int, units: dict[str, int]) -> str:
    for name, size in units.items():
        if size and difference % size == 0 and 0 < abs(difference // size) <= 12:
            return f" ({difference // size:+d} x {name})"
    return ""


def ffn_widths(subject: Subject) -> list[int]:
    """The d_ff of each of the paper's 2N feed-forward networks, as their model builds them."""
    widths = [w_1.out_features for _, w_1, _ in feed_forwards(subject, required=False).values()]
    count = 2 * subject.sizes.N
    if len(widths) != count:
        widths = [Counter(widths).most_common(1)[0][0] if widths else inner_size(subject)] * count
    return widths


def parameter_count(subject: Subject) -> Outcome:
    sizes = subject.sizes
    widths = ffn_widths(subject)
    d_ff = Counter(widths).most_common(1)[0][0]
    parameters = {id(p): p for p in subject.model.parameters() if p.requires_grad}
    total = sum(p.numel() for p in parameters.values())
    positions = {learned(subject, embedding_step(subject, side).positions) for side in SIDES} - {None}
    extra = sum(p.numel() for name, p in subject.model.named_parameters() if name in positions)
    totals = {count + extra: how for count, how in
              paper_totals(sizes.d_model, widths, sizes.N, sizes.src_vocab, sizes.tgt_vocab).items()}
    built = sorted(set(widths) - {sizes.d_ff})
    note = (f" (d_ff {', '.join(map(str, built))} as built: the d_ff given, {sizes.d_ff}, does not reach every "
            "feed-forward network)") if built else ""
    if total in totals:
        return passed(f"{total:,} parameters: the paper's count for these sizes {totals[total]}{note}")
    nearest = min(totals, key=lambda count: abs(count - total))
    d = sizes.d_model
    units = {"nn.Linear(d_model, d_model)": d * d + d, "d_model x d_model matrix": d * d,
             "d_model x d_ff matrix": d * d_ff, "vocabulary x d_model table": sizes.tgt_vocab * d,
             "vector of d_ff": d_ff, "vector of d_model": d}
    return failed(f"{total:,} parameters; the paper's model at these sizes has {nearest:,} ({totals[nearest]}): "
                  f"{total - nearest:+,}{explained(total - nearest, units)}{note}",
                  "compare each module's parameters with the paper's: 4 d_model x d_model projections per attention, "
                  "W_1 and W_2 with biases per feed-forward network, a gain and a bias per LayerNorm")

