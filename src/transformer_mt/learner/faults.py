"""What a learner's model can do that PyTorch runs without complaint and training cannot take,
each found on the model as built, before the first step, and said in one line that names their
line and the fix:

- state outside the model's state_dict: layers in a plain list or dict, a tensor with
  requires_grad that is no nn.Parameter (never trained, saved, or put in eval mode);
- batch-first tensors fed to nn.Transformer or nn.MultiheadAttention built sequence-first;
- dropout that drops in eval mode (F.dropout(x, p, training=True)): turned off while decoding;
- a backward pass that fails (a tensor autograd saved, changed in place);
- an output that is a tuple, (scores, attention): the first tensor taken.

`check` fails its checks with these messages; `train --model` refuses the model (or, for the last
two, says what it does)."""

from __future__ import annotations

import contextlib
import inspect
import linecache
import re
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer_mt.learner.loading import described, located

INTERNAL = frozenset(vars(nn.Module()))  # nn.Module's own attributes (_parameters, _modules, training, ...)
CONTAINERS = {list: ("list", "nn.ModuleList"), tuple: ("tuple", "nn.ModuleList"), dict: ("dict", "nn.ModuleDict")}
DROPOUTS = {f: inspect.signature(f) for f in (F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                                             F.feature_alpha_dropout)}  # read once: decoding calls them every step


def line_in_stack(path: Path) -> int | None:
    """The line of `path` that the running code was called from (the deepest frame in it)."""
    frames = [frame for frame in traceback.extract_stack() if Path(frame.filename) == path]
    return frames[-1].lineno if frames else None


def code_at(path: Path, line: int | None) -> str:
    return linecache.getline(str(path), line).strip() if line else ""


# ---- state outside the state_dict -------------------------------------------------------------
def assignment_line(owner: type, attribute: str, path: Path) -> int | None:
    """The line of `self.ATTRIBUTE =` in the class `owner`, where that class is in `path`."""
    try:
        if Path(inspect.getsourcefile(owner) or "") != path:
            return None
        lines, first = inspect.getsourcelines(owner)
    except (OSError, TypeError):
        return None
    pattern = re.compile(rf"self\.{re.escape(attribute)}\s*(:[^=]*)?=[^=]")
    return next((first + i for i, text in enumerate(lines) if pattern.search(text)), None)


def held(value: Any) -> list[Any]:
    """What a container holds, nested containers opened."""
    items = value.values() if isinstance(value, dict) else value
    found = []
    for item in items:
        found.extend(held(item) if isinstance(item, (list, tuple, dict)) else [item])
    return found


def unregistered_state(model: nn.Module, path: Path) -> str | None:
    """One line for the first module or trainable tensor the model keeps where nn.Module does not
    register it (a plain list, tuple or dict; a bare tensor with requires_grad), or None. Modules
    and parameters registered elsewhere in the model (a list of aliases) are fine."""
    modules = {id(module) for module in model.modules()}
    parameters = {id(p) for p in model.parameters()}
    for name, module in model.named_modules():
        owner = type(module).__name__
        for attribute, value in vars(module).items():
            if attribute in INTERNAL:
                continue
            where = located(path, assignment_line(type(module), attribute, path))
            qualified = f"{owner}.{attribute}" + (f" ({name}.{attribute})" if name else "")
            trainable = isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad
            if trainable and id(value) not in parameters:
                return (f"{where}: {qualified} is a tensor with requires_grad, not an nn.Parameter: the optimizer "
                        f"never sees it and the run's weights leave it out; write self.{attribute} = nn.Parameter(...)")
            kind = next((CONTAINERS[t] for t in CONTAINERS if isinstance(value, t)), None)
            if kind is None:
                continue
            loose = [item for item in held(value) if isinstance(item, nn.Module) and id(item) not in modules
                     or isinstance(item, torch.Tensor) and item.requires_grad and id(item) not in parameters]
            if loose:
                types = ", ".join(sorted({type(item).__name__ for item in loose}))
                return (f"{where}: {qualified} is a plain Python {kind[0]} of {len(loose)} {types}: nn.Module does "
                        "not register what a list or dict holds, so their weights are never trained nor saved in the "
                        f"run and .eval() never reaches their dropout; write self.{attribute} = {kind[1]}(...)")
    return None


# ---- sequence-first modules --------------------------------------------------------------------
def sequence_first_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """nn.Transformer and nn.MultiheadAttention modules built with batch_first=False, outermost first."""
    found = [(name, module) for name, module in model.named_modules()
             if isinstance(module, (nn.Transformer, nn.MultiheadAttention)) and module.batch_first is False]
    return [(name, module) for name, module in found
            if not any(name.startswith(f"{other}.") for other, _ in found if other)]


def sequence_first_message(path: Path, name: str, module: nn.Module) -> str:
    return (f"{path}: {name or 'the model'} ({type(module).__name__}) is built with batch_first=False and reads "
            "(length, batch, d_model), and the toolkit hands batch-first tensors (batch, length): build it with "
            f"batch_first=True (nn.{type(module).__name__}(..., batch_first=True))")


@contextlib.contextmanager
def batch_first_fed(model: nn.Module, batch: int) -> Iterator[list[tuple[str, nn.Module]]]:
    """The sequence-first attention modules whose query's first axis, while inside, is the batch."""
    fed: list[tuple[str, nn.Module]] = []
    names = {id(module): name for name, module in model.named_modules()}

    def watch(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        query = args[0] if args else kwargs.get("query")
        if isinstance(query, torch.Tensor) and query.dim() == 3 and query.size(0) == batch:
            fed.append((names[id(module)], module))

    handles = [module.register_forward_pre_hook(watch, with_kwargs=True) for module in model.modules()
               if isinstance(module, nn.MultiheadAttention) and not module.batch_first]
    try:
        yield fed
    finally:
        for handle in handles:
            handle.remove()


# ---- dropout in eval mode -----------------------------------------------------------------------
class DropoutInEval(TorchFunctionMode):
    """While inside: every functional dropout runs with training=False (as nn.Dropout does after
    .eval()), and `lines` collects the lines of `path` that asked for training=True."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.lines = path, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in DROPOUTS:
            bound = DROPOUTS[func].bind(*args, **kwargs)
            bound.apply_defaults()
            if bound.arguments["training"]:
                self.lines.append(line_in_stack(self.path))
                bound.arguments["training"] = False
            return func(*bound.args, **bound.kwargs)
        return func(*args, **kwargs)


def eval_dropout_lines(forward: Callable[[], Any], path: Path) -> list[int | None]:
    """The lines of `path` whose dropout drops although the model is in eval mode, in one call
    of `forward` (the model already in eval mode)."""
    with DropoutInEval(path) as mode:
        forward()
    return mode.lines


def eval_dropout_message(path: Path, lines: list[int | None]) -> str:
    line = lines[0]
    code = code_at(path, line)
    return (f"{located(path, line)}: {f'`{code}` ' if code else ''}drops in eval mode too (a functional dropout "
            "with training=True, which model.eval() cannot reach), so eval mode is not deterministic")


DROPOUT_FIX = "pass training=self.training (F.dropout(x, p, training=self.training)), or use an nn.Dropout module"
EVAL_RANDOM = ("in eval mode two passes over the same batch differ even with every dropout off: the model draws random "
               "numbers in eval mode")
EVAL_RANDOM_FIX = "draw random numbers only where self.training is True"


# ---- the backward pass ----------------------------------------------------------------------------
class InPlace(TorchFunctionMode):
    """While inside: the in-place operations (`add_`, `x += ...`) on tensors that need a gradient,
    with the line of `path` each came from."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.seen = path, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if (name.endswith("_") and not name.startswith("_") and args and isinstance(args[0], torch.Tensor)
                and args[0].requires_grad):
            self.seen.append((name, tuple(args[0].shape), line_in_stack(self.path)))
        return func(*args, **(kwargs or {}))


def backward_problem(forward: Callable[[], torch.Tensor], model: nn.Module, path: Path) -> str | None:
    """One line when one training pass's backward fails (their line and operation where an
    in-place change of a saved tensor is the cause), else None. Draws no random numbers of the
    caller's and leaves no gradient behind."""
    training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            with InPlace(path) as in_place:
                out = forward()
            if not out.requires_grad:
                return (f"{path}: no parameter gets a gradient: the model's output does not depend on any (a forward "
                        "run under torch.no_grad(), or a .detach()), so nothing would train")
            out.float().sum().backward()
    except RuntimeError as err:
        if "inplace operation" not in str(err):
            return f"{path}: the backward pass of one training batch raised {described(err)}"
        shape = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\]", str(err))
        wanted = tuple(int(n) for n in shape.group(1).split(",") if n.strip()) if shape else None
        found = [seen for seen in in_place.seen if seen[2] and (wanted is None or seen[1] == wanted)]
        name, _, line = (found or [("", (), None)])[0]
        code = code_at(path, line)
        what = f"`{code}` ({name}) " if code else ""
        return (f"{located(path, line)}: {what}changes in place a tensor that autograd saved for the backward pass, "
                "so the backward pass fails (one of the variables needed for gradient computation has been modified "
                "by an inplace operation): compute a new tensor instead (x = x + y, not x += y)")
    finally:
        model.zero_grad(set_to_none=True)
        model.train(training)
    return None


# ---- a tuple out ---------------------------------------------------------------------------------
def taken(output: Any) -> Any:
    """Their output, or its first tensor where it is a tuple or list ((logits, attention))."""
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return output


def tuple_note(output: Any, what: str) -> str | None:
    """What the toolkit does with a tuple output, for the report and the training log."""
    if not (isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor)):
        return None
    shapes = ", ".join(f"{tuple(item.shape)}" if isinstance(item, torch.Tensor) else type(item).__name__
                       for item in output)
    return (f"{what} returns a tuple of {len(output)} ({shapes}): the first is taken as its output, the rest is "
            "not used")
