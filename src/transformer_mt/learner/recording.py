"""What the learner's modules do in one pass, recorded with forward hooks: every call with
its inputs and output, in order. The checks find the parts of the paper in their model by
what those parts do, not by their names: an attention is a module called with a query, a
key and a value of d_model features; a feed-forward network holds a Linear d_model -> d_ff
and one d_ff -> d_model and no attention; a layer normalisation holds a gain and a bias of
d_model features. Where two passes that should agree differ, `first_difference` names the
module whose own code made them differ."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn


@dataclass
class Call:
    """One module call: its name in the model, the tensors it got (`inputs`; `input_ids`
    tells which were one tensor), its output tensor, the call it ran inside (`parent`) and
    when it started and ended on one clock."""

    name: str
    module: nn.Module
    inputs: list[torch.Tensor]
    input_ids: list[int]
    parent: int | None
    start: int
    end: int = -1
    output: torch.Tensor | None = None
    index: int = 0

    @property
    def floats(self) -> list[torch.Tensor]:
        return [t for t in self.inputs if t.is_floating_point()]

    def label(self) -> str:
        return f"{self.name or 'the model'} ({type(self.module).__name__})"


@dataclass
class Recording:
    calls: list[Call] = field(default_factory=list)
    stack: list[int] = field(default_factory=list)
    clock: int = 0


def plain(value: Any) -> bool:
    """A tensor the checks can read (nn.Transformer's fast path passes nested tensors around)."""
    return isinstance(value, torch.Tensor) and not value.is_nested


def tensors_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return [value for value in (*args, *kwargs.values()) if plain(value)]


def first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    return output if plain(output) else None


@contextlib.contextmanager
def recording(model: nn.Module) -> Iterator[Recording]:
    """Record every call of every module of `model` while the block runs."""
    found = Recording()
    names = {id(module): name for name, module in model.named_modules()}

    def before(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = tensors_of(args, kwargs)
        call = Call(names.get(id(module), "?"), module, [t.detach().clone() for t in inputs], [id(t) for t in inputs],
                    found.stack[-1] if found.stack else None, found.clock, index=len(found.calls))
        found.clock += 1
        found.stack.append(call.index)
        found.calls.append(call)

    def after(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        call = found.calls[found.stack.pop()]
        tensor = first_tensor(output)
        call.output = tensor.detach().clone() if tensor is not None else None
        call.end = found.clock
        found.clock += 1

    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def record(model: nn.Module, run: Callable[[], Any]) -> list[Call]:
    with recording(model) as found:
        run()
    return found.calls


# ---- the parts of the paper, found by what they do --------------------------------------
def is_attention_call(call: Call, d_model: int) -> bool:
    """Called with a query, a key and a value (B, T, d_model), giving (B, Tq, d_model)."""
    floats = [t for t in call.floats if t.dim() == 3 and t.size(-1) == d_model]
    return (len(floats) >= 3 and call.output is not None and call.output.shape == floats[0].shape)


def attention_calls(calls: list[Call], d_model: int) -> list[Call]:
    """The calls of attention modules, innermost only (a wrapper passing q, k, v on is not one)."""
    found = [call for call in calls if is_attention_call(call, d_model)]
    inner = {call.parent for call in found}
    return [call for call in found if call.index not in inner]


def attention_role(call: Call, src_len: int, tgt_len: int) -> str:
    """"encoder self", "decoder self", "cross" (target queries, source keys) or "other"."""
    if len(call.floats) < 2 or min(t.dim() for t in call.floats[:2]) < 2:
        return "other"
    lengths = (call.floats[0].size(1), call.floats[1].size(1))
    return {(src_len, src_len): "encoder self", (tgt_len, tgt_len): "decoder self",
            (tgt_len, src_len): "cross"}.get(lengths, "other")


def linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


Network = tuple[nn.Module, nn.Linear, nn.Linear]  # a feed-forward network: the module, W_1, W_2


def feed_forward_modules(model: nn.Module, attention: set[int], d_model: int) -> dict[str, Network]:
    """name -> (module, W_1, W_2): the smallest modules holding a Linear d_model -> X and a
    Linear X -> d_model and no attention module (`attention`: their ids)."""
    found: dict[str, Network] = {}
    for name, module in model.named_modules():
        if any(id(m) in attention for m in module.modules()):
            continue
        inner = linears(module)
        for w_1 in inner:
            w_2 = next((w for w in inner if w is not w_1 and w_1.in_features == d_model == w.out_features
                        and w.in_features == w_1.out_features), None)
            if w_2 is not None:
                found[name] = (module, w_1, w_2)
                break
    return {name: value for name, value in found.items() if not any(inside(other, name) for other in found)}


def inside(name: str, parent: str) -> bool:
    """Whether module `name` lies inside module `parent` (the root, "", holds every other)."""
    return name != parent and (parent == "" or name.startswith(f"{parent}."))


def norm_modules(model: nn.Module, d_model: int) -> dict[str, nn.Module]:
    """name -> module: nn.LayerNorm, or a module whose own parameters are all vectors of
    d_model (a gain and a bias) and whose children hold none."""
    found = {}
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        children_hold = any(True for child in module.children() for _ in child.parameters())
        if isinstance(module, nn.LayerNorm) or (own and not children_hold
                                                and all(p.dim() == 1 and p.numel() == d_model for p in own)):
            found[name] = module
    return found


def calls_of(calls: list[Call], modules: dict[str, Any]) -> list[Call]:
    ids = {id(value[0] if isinstance(value, tuple) else value) for value in modules.values()}
    return [call for call in calls if id(call.module) in ids]


# ---- where two passes part ------------------------------------------------------------
Differs = Callable[[torch.Tensor, torch.Tensor], bool]


def first_difference(first: list[Call], second: list[Call], differs: Differs) -> str | None:
    """The module whose own code first made two recorded passes differ where `differs` looks:
    the first call (by its end) whose output differs though its inputs do not; where its
    inputs differ too, the difference came from the code of the call it ran inside."""
    if len(first) != len(second):
        return None
    for a, b in sorted(zip(first, second), key=lambda pair: pair[0].end):
        if a.output is None or b.output is None or a.output.shape != b.output.shape or not differs(a.output, b.output):
            continue
        inputs_differ = any(x.shape == y.shape and differs(x, y) for x, y in zip(a.floats, b.floats))
        if inputs_differ and a.parent is not None:
            return f"the code of {first[a.parent].label()}"
        return f"the output of {a.label()}"
    return None
