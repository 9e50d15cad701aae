"""The embeddings and positional encodings (sections 3.4, 3.5), found by behaviour: two passes
whose tokens differ on one side are recorded, and between the nn.Embedding called with those
tokens and the first attention, the first tensor of the form c * E[token] + P[position] is
the sum the layers get. c is the embeddings' scale wherever it is applied (the Annotated
Transformer's Embeddings, seed 003's PositionalEncoder); P is compared with section 3.5's
sinusoid; c * E against P is the doctor's embedding_scale measure (embedding_init)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from transformer_mt.learner.recording import Call, is_attention_call, record
from transformer_mt.check.result import EMBEDDING_TO_POSITION, NotChecked, Outcome, close, failed, passed
from transformer_mt.check.subject import Subject, changed_everywhere
from transformer_mt.learner.building import SRC_LEN, TGT_LEN
from transformer_mt.model.embeddings import sinusoidal_encoding
from transformer_mt.model.measures import embedding_to_position, rms

SIDES = ("source", "target")
XAVIER_LOOP = "for p in model.parameters(): if p.dim() > 1: nn.init.xavier_uniform_(p)"


@dataclass
class Step:
    """What one side's embedding step does: `embedding` (their nn.Embedding) times `scale`,
    plus `positions` (L, d_model); where the scale and the positions first show."""

    embedding: nn.Embedding
    scale: float
    positions: torch.Tensor
    scaled_in: str
    added_in: str
    by_sentence: bool = False  # what is added depends on the sentence's row in the batch, not on the position


def events(first: list[Call], second: list[Call], after: int, length: int, d_model: int):
    """(time, tensor of pass 1, tensor of pass 2, where it was made) for each (B, length,
    d_model) tensor going into or out of a module after time `after`, up to the first attention."""
    found = []
    for a, b in zip(first, second):
        if a.start > after and is_attention_call(a, d_model):
            break
        made_by = first[a.parent].label() if a.parent is not None else "the model"
        found += [(a.start, x, y, made_by) for x, y in zip(a.floats, b.floats) if a.start > after]
        if a.end > after and a.output is not None and a.output.is_floating_point() and b.output is not None:
            found.append((a.end, a.output, b.output, a.label()))
    shape = (first[0].inputs[0].size(0), length, d_model) if first and first[0].inputs else None
    return sorted((e for e in found if tuple(e[1].shape) == shape), key=lambda e: e[0])


def as_scaled_sum(y1: torch.Tensor, y2: torch.Tensor, e1: torch.Tensor,
                  e2: torch.Tensor) -> tuple[float, torch.Tensor] | None:
    """(c, P (B, L, d_model)) when y = c * e + P with one c and a P that does not depend on the tokens."""
    de, dy = (e1 - e2).double(), (y1 - y2).double()
    c = float((dy * de).sum() / (de * de).sum().clamp_min(1e-12))
    if not close(dy, c * de):
        return None
    return c, (y1.double() - c * e1.double()).float()


def embedding_step(subject: Subject, side: str) -> Step:
    """The `side` embedding step of the subject's model, measured once."""
    key = f"step {side}"
    if key not in subject.cache:
        src, tgt = subject.src, subject.tgt
        ids = src if side == "source" else tgt
        other = changed_everywhere(ids, subject.sizes.src_vocab if side == "source" else subject.sizes.tgt_vocab)
        first = record(subject.model, lambda: subject.forward(src, tgt))
        second = record(subject.model, lambda: subject.forward(*((other, tgt) if side == "source" else (src, other))))
        subject.cache[key] = measured_step(first, second, ids, side, subject.sizes.d_model)
    return subject.cache[key]


def added(positions: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether P of y = c * E + P holds more than float32's rounding of y: nn.Embedding's N(0, 1)
    times sqrt(128) leaves |P| ~ 1e-6 where nothing was added, section 3.5's sinusoid gives 1."""
    return float(positions.abs().max()) > 1e-5 * (1 + float(y.abs().max()))


def measured_step(first: list[Call], second: list[Call], ids: torch.Tensor, side: str, d_model: int) -> Step:
    lookups = (c for c in first if isinstance(c.module, nn.Embedding) and c.inputs and torch.equal(c.inputs[0], ids))
    lookup = next(lookups, None)
    if lookup is None:
        raise NotChecked(f"no nn.Embedding is called with the {side} tokens")
    e1, e2 = lookup.output, second[lookup.index].output
    length = SRC_LEN if side == "source" else TGT_LEN
    scaled_in, unadded = "", None
    for _, y1, y2, made_by in events(first, second, lookup.end, length, d_model):
        found = as_scaled_sum(y1, y2, e1, e2)
        if found is None:
            continue
        scale, positions = found
        scaled_in = scaled_in or (made_by if abs(scale - 1) > 1e-3 else "")
        if added(positions, y1):
            by_sentence = not close(positions, positions[:1].expand_as(positions))
            return Step(lookup.module, scale, positions[0], scaled_in or made_by, made_by, by_sentence)
        unadded = scale
    if unadded is None:
        raise NotChecked(f"the {side} embeddings reach the first attention in a form the check cannot read "
                         "(not c * E[token] + P[position])")
    return Step(lookup.module, unadded, torch.zeros(length, d_model), scaled_in or lookup.label(), "")


def sinusoid_slips(length: int, d_model: int) -> list[tuple[str, torch.Tensor, bool]]:
    """(what the report says, the table, whether the paper allows it): section 3.5's table,
    its other layout, and the tables of the usual slips."""
    paper = sinusoidal_encoding(length, d_model)
    swapped = paper.clone()
    swapped[:, 0::2], swapped[:, 1::2] = paper[:, 1::2], paper[:, 0::2]
    position = torch.arange(length, dtype=torch.float64)[:, None]
    index = torch.arange(d_model, dtype=torch.float64)
    own = (position / 10000 ** (index / d_model)).float()  # each dimension at its own index's frequency
    doubled = (position / 10000 ** (2 * index / d_model)).float()  # 2j / d_model for dimension j
    per_dimension, twice = paper.clone(), paper.clone()
    per_dimension[:, 1::2] = own.cos()[:, 1::2]
    twice[:, 0::2], twice[:, 1::2] = doubled.sin()[:, 0::2], doubled.cos()[:, 1::2]
    return [
        ("section 3.5's sinusoid", paper, True),
        ("the sinusoid with its sines and cosines side by side (halves, as Marian's)",
         sinusoidal_encoding(length, d_model, "halves"), True),
        ("the sinusoid with sine and cosine swapped (cos on the even dimensions, sin on the odd)", swapped, False),
        ("the sinusoid with each cosine at its own dimension's frequency, 10000^((2i+1)/d_model), not its pair's",
         per_dimension, False),
        ("the sinusoid with the exponent doubled: 10000^(2j/d_model) for dimension j, not for pair i", twice, False),
        ("the sinusoid from position 1, not 0", sinusoidal_encoding(length + 1, d_model)[1:], False),
        ("the sinusoid times sqrt(d_model) (the scale is the embeddings' alone)", paper * math.sqrt(d_model), False),
    ]


def learned(subject: Subject, positions: torch.Tensor) -> str | None:
    """The name of the parameter whose first rows are `positions` (learned positions)."""
    for name, parameter in subject.model.named_parameters():
        table = parameter.detach().reshape(-1, parameter.size(-1)) if parameter.dim() >= 2 else None
        if table is not None and table.shape[0] >= positions.size(0) and table.size(-1) == positions.size(-1) \
                and close(table[: positions.size(0)], positions):
            return name
    return None


def positional_encoding(subject: Subject) -> Outcome:
    said = []
    for side in SIDES:
        step = embedding_step(subject, side)
        if not step.added_in:
            return failed(f"nothing is added to the {side} embeddings for the positions before the first layer: "
                          "the model cannot tell word order", "add the sinusoid of section 3.5 to the embeddings "
                          "(x + pe[:, :x.size(1)]), on both sides")
        if step.by_sentence:
            return failed(f"what {step.added_in} adds to the {side} embeddings depends on the sentence's row in the "
                          "batch, not on the token's position: the table is indexed along the batch axis "
                          "(x.size(0); a sequence-first (max_len, 1, d_model) table used with batch-first input)",
                          "index the table along the sequence axis: x + pe[:, :x.size(1)] with pe of shape "
                          "(1, max_len, d_model)")
        length, d_model = step.positions.shape
        matched, allowed = next(((form, ok) for form, table, ok in sinusoid_slips(length, d_model)
                                 if close(step.positions, table)), (None, False))
        if matched is None and (name := learned(subject, step.positions)):
            matched, allowed = f"learned positions ({name}; the paper's Table 3 row E finds them as good)", True
        if not allowed:
            paper = sinusoidal_encoding(length, d_model)
            row, col = divmod(int((step.positions - paper).abs().argmax()), d_model)
            what = matched or "something other than section 3.5's sinusoid"
            return failed(f"the {side} side adds {what} (in {step.added_in}): "
                          f"PE({row}, {col}) is {float(step.positions[row, col]):.4f}, the paper's "
                          f"{float(paper[row, col]):.4f}",
                          "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), "
                          "i the pair's index: pe[:, 0::2] = torch.sin(position * div_term); pe[:, 1::2] = "
                          "torch.cos(position * div_term)")
        said.append(matched)
    return passed(f"both sides add {said[0]}" if said[0] == said[1] else f"source: {said[0]}; target: {said[1]}")


def embedding_scale(subject: Subject) -> Outcome:
    root = math.sqrt(subject.sizes.d_model)
    steps = {side: embedding_step(subject, side) for side in SIDES}
    for side, step in steps.items():
        if abs(step.scale / root - 1) > 1e-3:
            return failed(f"the {side} embeddings are multiplied by {step.scale:.3g}, not by sqrt(d_model) = "
                          f"{root:.3g}, before the positions are added",
                          "multiply the embedding by math.sqrt(d_model) where it is looked up: "
                          "self.lut(x) * math.sqrt(self.d_model)")
    where = {step.scaled_in for step in steps.values()}
    return passed(f"both sides multiply the embeddings by sqrt(d_model) = {root:.3g} (in {', '.join(sorted(where))}; "
                  "the paper leaves where open)")


def embedding_init(subject: Subject) -> Outcome:
    measured = {}
    for side in SIDES:
        step = embedding_step(subject, side)
        if not step.added_in:
            raise NotChecked(f"no positional encoding on the {side} side to compare with (see positional_encoding)")
        rows = step.embedding.weight.detach()
        if step.embedding.padding_idx is not None:
            rows = torch.cat([rows[: step.embedding.padding_idx], rows[step.embedding.padding_idx + 1:]])
        positions = step.positions
        if learned(subject, positions):  # a learned table starts small and grows: against the sinusoid's size
            positions = sinusoidal_encoding(*positions.shape)
        measured[side] = (embedding_to_position(rows, step.scale, positions), rms(rows), step.scale)
    side, (worst, drawn, scale) = max(measured.items(), key=lambda item: item[1][0].ratio)
    if worst.ratio <= EMBEDDING_TO_POSITION:
        return passed(f"the token embeddings as added are {worst.ratio:.2g} times the positional encoding (RMS "
                      f"{worst.added:.2g} against {worst.positions:.2g}; limit {EMBEDDING_TO_POSITION:g})")
    init = "nn.Embedding's default N(0, 1)" if abs(drawn - 1) < 0.1 else f"drawn with RMS {drawn:.2g}"
    return failed(f"the {side} embeddings as the model adds them ({init}, times {scale:.3g}: RMS "
                  f"{worst.added:.3g}) are {worst.ratio:.1f} times the positional encoding (RMS "
                  f"{worst.positions:.2g}): the positions are {worst.position_share:.1%} of the sum, so the model "
                  "barely sees word order",
                  f"re-draw the weights after building the model, as the Annotated Transformer's make_model ends: "
                  f"{XAVIER_LOOP} (docs/ablations.md measures what this cost the notes' model: `+xavier`)")
