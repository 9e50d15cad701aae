"""Where the masks of a learner's model come from: the file's own mask functions where it
defines them (so that `check` checks them too), else the kit's, in the convention's form.

A mask has one of three encodings, all of which the paper allows: "attend" (bool, True = may
attend, the Annotated Transformer's and this package's), "blocked" (bool, True = hidden) and
"additive" (float, 0 or a large negative number added to the scores)."""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from transformer_mt.learner.building import OPTIONS, Sizes, options, size_of
from transformer_mt.learner.loading import located
from transformer_mt.common.specials import PAD_ID, SPECIAL_NAMES
from transformer_mt.model.masks import subsequent_mask

ENCODINGS = ("attend", "blocked", "additive")
HIDDEN = -1e9  # an additive mask's hidden entries: finite, so a row hidden entirely gives no NaN
PAIR_NAMES = ("create_masks", "create_mask", "make_masks", "make_mask", "get_masks")  # (src, tgt, ...) -> both
TARGET_NAMES = ("make_std_mask",)  # (tgt, pad) -> the target mask
LOOK_AHEAD_NAMES = ("subsequent_mask", "nopeak_mask", "look_ahead_mask", "causal_mask",
                    "generate_square_subsequent_mask")

MaskPair = tuple[torch.Tensor, torch.Tensor]


def encode(attend: torch.Tensor, encoding: str) -> torch.Tensor:
    """A bool "may attend" tensor in `encoding`."""
    if encoding == "attend":
        return attend
    if encoding == "blocked":
        return ~attend
    return torch.zeros(attend.shape, device=attend.device).masked_fill(~attend, HIDDEN)


def may_attend(mask: torch.Tensor, encoding: str | None = None) -> torch.Tensor:
    """The bool "may attend" pattern of a mask: a float mask with large negative entries is
    additive, other floats and integers are 1 = attend, a bool mask is in `encoding` (attend
    unless told)."""
    if mask.dtype == torch.bool:
        return ~mask if encoding == "blocked" else mask
    if mask.is_floating_point() and bool((mask < -1e4).any()):
        return mask > -1e4
    return mask != 0


def squeezed(mask: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, K) or (B, 1, Q, K) as (B, 1, K) or (B, Q, K): heads' axes dropped."""
    while mask.dim() > 3 and mask.size(1) == 1:
        mask = mask.squeeze(1)
    while mask.dim() < 3:
        mask = mask.unsqueeze(0)
    return mask


def kit_masks(src: torch.Tensor, tgt: torch.Tensor, encoding: str = "attend") -> MaskPair:
    """The masks in the convention's form: source (B, 1, S), target (B, T, T), padding and
    look-ahead hidden."""
    src_attend = (src != PAD_ID).unsqueeze(-2)  # (B, 1, S)
    tgt_attend = (tgt != PAD_ID).unsqueeze(-2) & subsequent_mask(tgt.size(1), tgt.device)[0]  # (B, T, T)
    return encode(src_attend, encoding), encode(tgt_attend, encoding)


@dataclass
class MaskSource:
    """How the checks mask: `describe` says so on the report; `functions`, the file's mask
    functions in use (empty for the kit's own); `encoding`, the kit's masks' encoding."""

    describe: str
    make: Callable[[torch.Tensor, torch.Tensor], MaskPair]
    functions: tuple[str, ...] = ()
    encoding: str = "attend"
    pad_problem: str | None = None  # their function hides another id than the toolkit's padding


def filled(function: Callable[..., Any], given: tuple[Any, ...], sizes: Sizes) -> list[Any]:
    """The arguments for `function`: `given` first, then a pad id, an opt or "cpu" for the
    parameters named so; None where the function cannot be called."""
    parameters = [p for p in inspect.signature(function).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    found = list(given)
    for parameter in parameters[len(given):]:
        name = parameter.name.lower()
        if size_of(name) == "pad" or "pad" in name:
            found.append(PAD_ID)
        elif name in OPTIONS:
            found.append(options(sizes))
        elif name == "device":
            found.append("cpu")
        elif parameter.default is parameter.empty:
            raise TypeError(f"{function.__name__} takes `{parameter.name}`, which the check cannot give")
    return found


def look_ahead_with_padding(look_ahead: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Their look-ahead mask (T, T) or (1, T, T), combined with target padding in its own
    encoding: a bool mask whose first entry hides (True = blocked) takes padding by `|`."""
    pad_attend = (tgt != PAD_ID).unsqueeze(-2)  # (B, 1, T)
    if look_ahead.dtype == torch.bool:
        attend = bool(squeezed(look_ahead)[0, 0, 0])  # position 0 may always see itself
        return look_ahead & pad_attend if attend else look_ahead | ~pad_attend
    if look_ahead.is_floating_point() and bool((look_ahead < -1e4).any()):
        return look_ahead + encode(pad_attend, "additive")
    return look_ahead * pad_attend


def on_device(mask: Any, like: torch.Tensor) -> Any:
    """Their mask, made on the CPU, on the device of the batch: their functions are called
    with the ids on the CPU and device "cpu" (opt.device too), where any tensor they make
    themselves is, whatever device the model trains on."""
    return mask.to(like.device) if isinstance(mask, torch.Tensor) else mask


def their_function(module: types.ModuleType, names: tuple[str, ...]) -> tuple[str, Callable[..., Any]] | None:
    for name in names:
        function = getattr(module, name, None)
        if inspect.isfunction(function):
            return name, function
    return None


def mask_source(module: types.ModuleType, sizes: Sizes) -> MaskSource:
    """The file's create_masks (or make_std_mask, or subsequent_mask / nopeak_mask with the
    kit's padding), else the kit's masks."""
    if found := their_function(module, PAIR_NAMES):
        name, function = found

        def pair(src: torch.Tensor, tgt: torch.Tensor) -> MaskPair:
            masks = function(*filled(function, (src.cpu(), tgt.cpu()), sizes))
            return on_device(masks[0], src), on_device(masks[1], tgt)

        return MaskSource(f"the file's {signature(name, function)}", pair, (name,),
                          pad_problem=padding_id_problem(name, function, pair, sizes))
    kit_padding = "source padding by the kit ((src != pad).unsqueeze(-2), True = may attend)"
    if found := their_function(module, TARGET_NAMES):
        name, function = found

        def target(src: torch.Tensor, tgt: torch.Tensor) -> MaskPair:
            return kit_masks(src, tgt)[0], on_device(function(*filled(function, (tgt.cpu(),), sizes)), tgt)

        return MaskSource(f"the file's {signature(name, function)}; {kit_padding}", target, (name,))
    if found := their_function(module, LOOK_AHEAD_NAMES):
        name, function = found

        def look_ahead(src: torch.Tensor, tgt: torch.Tensor) -> MaskPair:
            mask = on_device(torch.as_tensor(function(*filled(function, (tgt.size(1),), sizes))), tgt)
            return kit_masks(src, tgt)[0], look_ahead_with_padding(mask, tgt)

        return MaskSource(f"the file's {signature(name, function)} with target padding; {kit_padding}", look_ahead,
                          (name,))
    return kit_source("attend")


def masks_for(module: types.ModuleType, sizes: Sizes, encoding: str | None = None) -> MaskSource:
    """The masks a learner's model gets: its file's functions, else the kit's in `encoding` (the
    one their attention reads; None: not known yet, "attend")."""
    masks = mask_source(module, sizes)
    return masks if masks.functions or encoding in (None, "attend") else kit_source(encoding)


def padding_id_problem(name: str, function: Callable[..., Any], pair: Callable[[torch.Tensor, torch.Tensor], MaskPair],
                       sizes: Sizes) -> str | None:
    """One line when their mask function hides, as padding, one id that is not the toolkit's
    (a `!= 1` written in it): found on a source holding each of the first ids once."""
    ids = torch.arange(min(sizes.src_vocab, 6))[None]  # (1, S): 0 (the padding id), 1, 2, ...
    try:
        seen = squeezed(pair(ids, ids[:, :1])[0])[0, -1].float()  # (S,): one query's view of the source
    except Exception:  # noqa: BLE001 (their function on a batch it cannot take: the checks say so)
        return None
    odd = [i for i in range(seen.numel()) if int((seen == seen[i]).sum()) == 1]  # the one position unlike the rest
    if seen.numel() < 3 or len(odd) != 1 or int(ids[0, odd[0]]) == PAD_ID:
        return None
    hidden = int(ids[0, odd[0]])
    file = inspect.getsourcefile(function)
    where = located(Path(file), inspect.getsourcelines(function)[1]) if file else name
    return (f"{where}: {name} hides id {hidden} as padding, and the toolkit pads with id {PAD_ID} (its id {hidden} is "
            f"{SPECIAL_NAMES.get(hidden, 'a word')}, a real token): compare with the padding id it is given "
            f"({signature(name, function)} gets {PAD_ID}), not with {hidden}")


def kit_source(encoding: str) -> MaskSource:
    """The kit's masks in `encoding` (source (B, 1, S), target (B, T, T))."""
    forms = {"attend": "True = may attend", "blocked": "True = hidden", "additive": "0 or -1e9 added to the scores"}
    return MaskSource(f"built by the check (the file defines no create_masks, make_std_mask, subsequent_mask or "
                      f"nopeak_mask) in the convention's form: source (B, 1, S), target (B, T, T), {forms[encoding]}",
                      lambda src, tgt: kit_masks(src, tgt, encoding), (), encoding)


def signature(name: str, function: Callable[..., Any]) -> str:
    return f"{name}({', '.join(inspect.signature(function).parameters)})"

