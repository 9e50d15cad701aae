"""Checks of the whole model's behaviour, from outside: its masks (mask), the decoder never
seeing later target tokens (causal), padding never seen (padding), the output depending on
the source (source_used), what the last step gives (output), dropout on in training and off
in eval (dropout), and a gradient for every parameter (gradients)."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from transformer_mt.common.specials import PAD_ID
from transformer_mt.learner.faults import DROPOUT_FIX, EVAL_RANDOM, EVAL_RANDOM_FIX, eval_dropout_message
from transformer_mt.learner.masks import ENCODINGS, MaskPair, kit_masks, may_attend, squeezed
from transformer_mt.learner.recording import attention_calls, attention_role, first_difference, record
from transformer_mt.check.result import NotChecked, Outcome, difference, differs, failed, passed
from transformer_mt.check.subject import Subject, changed_everywhere
from transformer_mt.learner.building import BATCH, SRC_LEN, SRC_LENGTHS, TGT_LEN, TGT_LENGTHS, padded

MakeMasks = Callable[[torch.Tensor, torch.Tensor], MaskPair]
PAD_FIX = "take the padding id as a parameter of your mask function (the toolkit passes its own, 0)"


def leaks_future(subject: Subject, make: MakeMasks) -> tuple[int, float] | None:
    """(t, change): the first output position t that changes when only target tokens after
    it change; None when none does."""
    src, tgt = subject.src, subject.tgt
    for t in (0, TGT_LEN // 2, TGT_LEN - 2):
        later = with_later_changed(tgt, t, subject.sizes.tgt_vocab)
        first, second = subject.forward(src, tgt, make(src, tgt)), subject.forward(src, later, make(src, later))
        if differs(first[:, : t + 1], second[:, : t + 1]):
            return t, difference(first[:, : t + 1], second[:, : t + 1])
    return None


def with_later_changed(tgt: torch.Tensor, t: int, vocab: int) -> torch.Tensor:
    """tgt with other tokens after position t."""
    later = tgt.clone()
    later[:, t + 1:] = changed_everywhere(tgt[:, t + 1:], vocab)
    return later


def with_padding_changed(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """ids whose padded positions hold real tokens instead (the masks stay those of `ids`)."""
    others = torch.arange(ids.numel()).view_as(ids) % (vocab - 1) + 1
    return torch.where(ids == PAD_ID, others, ids)


def leaks_padding(subject: Subject, make: MakeMasks) -> tuple[str, float] | None:
    """(side, change): real output positions that change when only padded tokens change."""
    src, tgt = padded(subject.src, SRC_LENGTHS), padded(subject.tgt, TGT_LENGTHS)
    masks = make(src, subject.tgt)
    first = subject.forward(src, subject.tgt, masks)
    second = subject.forward(with_padding_changed(src, subject.sizes.src_vocab), subject.tgt, masks)
    if differs(first, second):
        return "source", difference(first, second)
    masks = make(subject.src, tgt)
    real = tgt != PAD_ID  # (B, T)
    first = subject.forward(subject.src, tgt, masks)[real]
    second = subject.forward(subject.src, with_padding_changed(tgt, subject.sizes.tgt_vocab), masks)[real]
    return ("target", difference(first, second)) if differs(first, second) else None


def model_encoding(subject: Subject) -> str | None:
    """The mask encoding under which the model is causal and hides padding with the kit's
    masks ("attend", "blocked", "additive"), or None (then its attention is at fault)."""
    if "encoding" not in subject.cache:
        subject.cache["encoding"] = None
        for encoding in ENCODINGS:
            make = functools.partial(kit_masks, encoding=encoding)
            try:
                if leaks_future(subject, make) is None and leaks_padding(subject, make) is None:
                    subject.cache["encoding"] = encoding
                    break
            except Exception:  # an encoding their attention cannot take
                continue
    return subject.cache["encoding"]


def located(subject: Subject, first: Callable[[], object], second: Callable[[], object],
            where: Callable[[torch.Tensor, torch.Tensor], bool]) -> str:
    """' (first in the code of NAME (Class))': where two passes that should agree part."""
    found = first_difference(record(subject.model, first), record(subject.model, second), where)
    return f" (first in {found})" if found else ""


# ---- mask -----------------------------------------------------------------------------
def look_ahead_problem(pattern: torch.Tensor) -> str | None:
    """What is wrong with a (B, T, T) "may attend" pattern of an unpadded target, or None."""
    size = pattern.size(-1)
    lower = torch.ones(size, size, dtype=torch.bool).tril()
    rows = [row for row in pattern]
    if all(torch.equal(row, lower) for row in rows):
        return None
    shapes = {"upper-triangular: each position sees itself and every later position, not the earlier ones": lower.T,
              "inverted: each position sees only the later positions": ~lower,
              "without its diagonal: a position cannot see itself": lower & ~torch.eye(size, dtype=torch.bool),
              "all open: nothing hides the later positions": torch.ones(size, size, dtype=torch.bool)}
    for problem, shape in shapes.items():
        if all(torch.equal(row, shape) for row in rows):
            return problem
    wrong = int((pattern != lower).sum())
    return f"different from the lower triangle at {wrong} of {pattern.numel()} entries"


def source_padding_problem(pattern: torch.Tensor) -> str | None:
    """What is wrong with a (B, Q, S) "may attend" pattern of the padded source, or None."""
    for row, length in enumerate(SRC_LENGTHS):
        expected = torch.arange(SRC_LEN) < length
        if not bool((pattern[row] == expected).all()):
            hidden = (~pattern[row]).nonzero()[:, -1].unique().tolist()
            shown = ", ".join(map(str, hidden)) if hidden else "none"
            return (f"sentence {row} has {length} real tokens of {SRC_LEN} (padding at positions {length} to "
                    f"{SRC_LEN - 1}), and the mask hides key positions: {shown}")
    return None


def mask(subject: Subject) -> Outcome:
    """Their mask function: the look-ahead part lower-triangular with the diagonal, source
    padding hidden, read in the encoding their model's attention uses."""
    if not subject.masks.functions:
        raise NotChecked("the file has no mask function of its own to check (create_masks, make_std_mask, "
                         "subsequent_mask or nopeak_mask)")
    if subject.masks.pad_problem:  # every token of that id hidden: the look-ahead part too looks wrong
        return failed(subject.masks.pad_problem, PAD_FIX)
    encoding = model_encoding(subject)
    src_mask, _ = subject.masks.make(padded(subject.src, SRC_LENGTHS), subject.tgt)
    _, tgt_mask = subject.masks.make(subject.src, subject.tgt)
    src_mask, tgt_mask = squeezed(torch.as_tensor(src_mask)), squeezed(torch.as_tensor(tgt_mask))
    if encoding is None and tgt_mask.dtype == torch.bool:  # read it as it reads itself: position 0 sees itself
        encoding = "attend" if bool(tgt_mask[0, 0, 0]) else "blocked"
    look = may_attend(tgt_mask, encoding).expand(BATCH, TGT_LEN, TGT_LEN)
    names = " and ".join(subject.masks.functions)
    read = {"attend": "True = may attend", "blocked": "True = hidden", "additive": "added to the scores"}
    how = read.get(encoding or "", "as its values say")
    if problem := look_ahead_problem(look):
        if tgt_mask.dtype == torch.bool and look_ahead_problem(~look) is None:
            return failed(f"{names} and the model's attention disagree: the mask is True where a position may "
                          f"attend, and the attention hides where it is True",
                          "flip one of them: masked_fill(mask == 0, -1e9) in the attention reads True = may attend")
        return failed(f"{names} gives a look-ahead mask that is {problem} (read {how}, as the model reads masks)",
                      "build the look-ahead part as torch.tril(torch.ones(T, T, dtype=torch.bool)): position i may "
                      "attend to positions 0 .. i (flip it only if your attention hides where the mask is True)")
    if problem := source_padding_problem(may_attend(src_mask, encoding).expand(BATCH, -1, SRC_LEN)):
        return failed(f"{names}: the source mask does not hide padding: {problem}",
                      "hide the padded keys: src_mask = (src != pad).unsqueeze(-2)")
    return passed(f"{names}: the look-ahead mask is lower-triangular with its diagonal, source padding is hidden "
                  f"(read {how}); target padding on the right is hidden by the look-ahead part already")


# ---- causal, padding, source_used --------------------------------------------------------
def causal(subject: Subject) -> Outcome:
    leak = leaks_future(subject, subject.masks.make)
    if leak is None:
        return passed("no output position changes when only later target tokens change")
    t, change = leak
    src, tgt = subject.src, subject.tgt
    later = with_later_changed(tgt, t, subject.sizes.tgt_vocab)
    where = located(subject, lambda: subject.forward(src, tgt), lambda: subject.forward(src, later),
                    lambda a, b: a.dim() >= 2 and a.size(1) == TGT_LEN and differs(a[:, : t + 1], b[:, : t + 1]))
    message = (f"output position {t} changed by {change:.2g} when only the target tokens after it changed: the "
               f"decoder sees the future{where}")
    if subject.masks.functions and model_encoding(subject) is not None:
        return failed(f"{message}; with the check's own masks, in the encoding the attention reads, it does not: "
                      f"{' and '.join(subject.masks.functions)} and the attention disagree (see mask)",
                      "make the look-ahead mask what the attention reads (see mask)")
    return failed(message, "apply the target mask to the decoder's self-attention scores before the softmax "
                           "(scores.masked_fill(mask == 0, -1e9)), in every decoder layer")


def padding(subject: Subject) -> Outcome:
    if subject.masks.pad_problem:
        return failed(subject.masks.pad_problem, PAD_FIX)
    leak = leaks_padding(subject, subject.masks.make)
    if leak is None:
        return passed("real positions do not change when only padded tokens change, in the source and the target")
    side, change = leak
    src = padded(subject.src, SRC_LENGTHS)
    masks = subject.masks.make(src, subject.tgt)
    other = with_padding_changed(src, subject.sizes.src_vocab)
    real = src != PAD_ID
    where = located(subject, lambda: subject.forward(src, subject.tgt, masks),
                    lambda: subject.forward(other, subject.tgt, masks),
                    lambda a, b: a.dim() >= 2 and a.shape[:2] == real.shape and differs(a[real], b[real]))
    fix = ("hide the padded keys with the source mask ((src != pad).unsqueeze(-2)) and pass it to the encoder's "
           "self-attention and to the decoder's encoder-decoder attention")
    return failed(f"real output positions changed by {change:.2g} when only the padded {side} tokens changed: "
                  f"padding is attended to{where if side == 'source' else ''}", fix)


def source_used(subject: Subject) -> Outcome:
    src, tgt = subject.src, subject.tgt
    first = subject.forward(src, tgt)
    second = subject.forward(changed_everywhere(src, subject.sizes.src_vocab), tgt)
    if differs(first, second):
        return passed(f"the output changes with the source (by {difference(first, second):.2g} when every source "
                      "token changes)")
    calls = attention_calls(record(subject.model, lambda: subject.forward(src, tgt)), subject.sizes.d_model)
    roles = [attention_role(call, SRC_LEN, TGT_LEN) for call in calls]
    why = "the decoder never reads the encoder's output"
    if "cross" not in roles:
        decoder = [call.label() for call, role in zip(calls, roles) if role == "decoder self"]
        why = (f"no attention takes the encoder's output as keys and values: the decoder's {len(decoder)} attention "
               f"calls all attend to the target ({', '.join(decoder[:4])})")
    return failed(f"the output did not change when every source token changed: {why}",
                  "give each decoder layer's second attention the encoder output as key and value: "
                  "src_attn(x, memory, memory, src_mask) (section 3.2.3)")


# ---- output, dropout, gradients -------------------------------------------------------------
def output_kind(out: torch.Tensor, dim: int = -1) -> str:
    """What (B, T, V) scores are along `dim`: log-probabilities, probabilities or logits."""
    if bool((out.logsumexp(dim).abs() < 1e-4).all()):
        return "log-probabilities"
    if bool((out >= 0).all()) and bool(((out.sum(dim) - 1).abs() < 1e-4).all()):
        return "probabilities"
    return "logits"


def output(subject: Subject) -> Outcome:
    sizes = subject.sizes
    out = subject.forward(subject.src, subject.tgt).float()
    if out.shape != (BATCH, TGT_LEN, sizes.tgt_vocab):
        what = {sizes.d_model: "d_model features (no output layer)", sizes.src_vocab: "the source vocabulary's size"}
        last = what.get(out.size(-1), "another size")
        return failed(f"the output is {tuple(out.shape)}, not (batch, target length, target vocabulary) = "
                      f"{(BATCH, TGT_LEN, sizes.tgt_vocab)}: its last axis has {last}",
                      "project the decoder's states onto the target vocabulary: nn.Linear(d_model, tgt_vocab)")
    kind, expected = output_kind(out), subject.convention.output
    if kind == "logits" and (across := output_kind(out, 1)) != "logits":
        return failed(f"the output is {across} over the target positions (dim=1), not over the vocabulary (dim=-1)",
                      "normalise over the vocabulary: F.log_softmax(scores, dim=-1)")
    if kind == expected:
        return passed(f"{kind} over the {sizes.tgt_vocab} target tokens, as this convention's loss expects")
    if kind == "log-probabilities":
        return passed(f"log-probabilities where {expected} are expected: nn.CrossEntropyLoss's log_softmax leaves "
                      "them as they are, so training is the same")
    if expected == "log-probabilities":
        return failed(f"the generator gives {kind} where this convention expects log-probabilities (the Annotated "
                      "Transformer's loss and greedy decoding read log-probabilities)",
                      "return F.log_softmax(self.proj(x), dim=-1) from the generator")
    return failed("the model gives probabilities where logits are expected: nn.CrossEntropyLoss applies its own "
                  "log_softmax, so the loss sees log(softmax(softmax(x)))", "return the scores before the softmax")


def dropout(subject: Subject) -> Outcome:
    if subject.built.eval_dropout:
        return failed(eval_dropout_message(subject.path, subject.built.eval_dropout), DROPOUT_FIX)
    if subject.built.eval_random:
        return failed(EVAL_RANDOM, EVAL_RANDOM_FIX)
    src, tgt = padded(subject.src, SRC_LENGTHS), subject.tgt
    first, second = subject.forward(src, tgt), subject.forward(src, tgt)
    if differs(first, second):
        where = located(subject, lambda: subject.forward(src, tgt), lambda: subject.forward(src, tgt), differs)
        return failed(f"in eval mode two passes over the same batch differ by {difference(first, second):.2g}: "
                      f"dropout still drops{where}",
                      "use nn.Dropout modules (model.eval() turns them off), or "
                      "F.dropout(x, p, training=self.training)")
    if subject.sizes.dropout == 0:
        raise NotChecked("eval mode is deterministic; training mode is not checked: the model is built with dropout 0")
    subject.model.train()
    try:
        torch.manual_seed(1)
        first = subject.forward(src, tgt)
        second = subject.forward(src, tgt)
    finally:
        subject.model.eval()
    if not differs(first, second):
        given = (f"though the call gives dropout {subject.sizes.dropout}" if "dropout" in subject.call
                 else "the builder takes no dropout argument")
        return failed(f"in training mode two passes are the same: nothing is dropped ({given})",
                      "apply nn.Dropout(dropout) to each sub-layer's output before the residual add and to the sums "
                      "of embeddings and positions (section 5.4)")
    return passed("eval mode is deterministic; training mode drops")


def gradients(subject: Subject) -> Outcome:
    model = subject.model
    if problem := subject.built.backward_problem():
        return failed(problem, "write the operation out of place (x = x + y, not x += y)")
    parameters = {name: p for name, p in subject.parameters().items() if p.requires_grad}
    for p in parameters.values():
        p.grad = None
    with torch.enable_grad():
        out = subject.forward(padded(subject.src, SRC_LENGTHS), subject.tgt)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
        (out.float() * weights).sum().backward()
    missing = [name for name, p in parameters.items() if p.grad is None]
    zero = [name for name, p in parameters.items() if p.grad is not None and not bool(p.grad.abs().sum() > 0)]
    model.zero_grad(set_to_none=True)
    if missing or zero:
        parts = [f"{what} reaches {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
                 for what, names in (("no gradient", missing), ("a zero gradient", zero)) if names]
        return failed(f"{'; '.join(parts)} ({len(missing) + len(zero)} of {len(parameters)} parameters): they are "
                      "never used in the forward pass, or used through .detach() / torch.no_grad()",
                      "use every module you build in forward (or delete it), without .detach() on its way to the "
                      "output")
    return passed(f"all {len(parameters)} parameters get a gradient, the output layer's included")
