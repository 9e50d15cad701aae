"""Calling the learner's make_model (or get_model, or class Transformer) with the keyword
arguments its signature accepts. `check` builds at sizes where the bugs it looks for show (at
least two layers and two heads, d_ff unlike d_model, unequal vocabularies, retried equal when
their code needs them equal), so that a swapped axis or vocabulary changes a shape or a
number; `train --model` at a preset's sizes and its tokenizer's vocabularies."""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from transformer_mt.learner.loading import described, where
from transformer_mt.common.errors import UserError
from transformer_mt.common.specials import PAD_ID

MAX_LEN = 64  # given where a builder requires a maximum length without a default
# The probe batch every check and every build runs: unequal lengths, so that a source axis, a
# target axis and the batch never look alike (3 sentences of 7 source and 6 target tokens), and
# the real tokens of each sentence where padding matters.
BATCH, SRC_LEN, TGT_LEN = 3, 7, 6
SRC_LENGTHS, TGT_LENGTHS = (7, 5, 4), (6, 4, 6)

# The names a builder's parameters go by in tutorials, and the size each takes.
NAMES = {
    "src_vocab": ("src_vocab", "src_vocab_size", "source_vocab", "source_vocab_size", "n_src_vocab", "input_vocab",
                  "input_vocab_size", "src_vocab_len", "src_ntoken"),
    "tgt_vocab": ("tgt_vocab", "trg_vocab", "tgt_vocab_size", "trg_vocab_size", "target_vocab", "target_vocab_size",
                  "n_tgt_vocab", "n_trg_vocab", "output_vocab", "output_vocab_size", "tgt_ntoken"),
    "vocab": ("vocab", "vocab_size", "n_vocab", "ntoken"),
    "N": ("n", "n_layers", "num_layers", "nlayers", "layers", "n_layer", "num_blocks"),
    "d_model": ("d_model", "dim", "model_dim", "hidden_size", "d_hidden", "emb_size", "embed_dim", "hidden_dim",
                "d_embed"),
    "d_ff": ("d_ff", "dim_feedforward", "ff_dim", "d_inner", "ffn_dim", "d_ffn", "hidden_ff", "ff_size", "d_ffwd",
             "ff_hidden", "dff"),
    "h": ("h", "heads", "n_heads", "num_heads", "nhead", "n_head", "nheads"),
    "dropout": ("dropout", "p_drop", "dropout_rate", "drop_prob", "dropout_p", "drop_rate"),
    "pad": ("pad", "pad_idx", "pad_id", "padding_idx", "src_pad", "trg_pad", "tgt_pad", "src_pad_idx", "trg_pad_idx",
            "tgt_pad_idx", "pad_token_id"),
}
OPTIONS = ("opt", "args", "config", "cfg", "params", "hparams", "options", "hp", "conf")
LENGTH_NAMES = ("max_len", "max_seq_len", "max_length", "max_strlen", "max_positions", "max_seq_length")
ONLY_IF_REQUIRED = (*LENGTH_NAMES, "device")  # given only where the builder has no default


@dataclass(frozen=True)
class Sizes:
    """What the model is built with. d_ff 72 and d_model 32 differ, as do the vocabularies, so
    that each of the model's matrices has a shape of its own."""

    src_vocab: int = 13
    tgt_vocab: int = 11
    N: int = 2
    d_model: int = 32
    d_ff: int = 72
    h: int = 4
    dropout: float = 0.1
    max_len: int = MAX_LEN  # the longest sequence, for a builder that requires it

    def value(self, size: str) -> Any:
        return PAD_ID if size == "pad" else self.src_vocab if size == "vocab" else getattr(self, size)

    def required(self, name: str) -> Any:
        """What a required parameter of ONLY_IF_REQUIRED gets: the longest sequence, or "cpu"."""
        return self.max_len if name in LENGTH_NAMES else "cpu"


class Options(types.SimpleNamespace):
    """What an `opt` parameter gets: every size under each of its names (opt.heads and opt.h,
    opt.n_layers and opt.N, ...), src_pad/trg_pad 0, device "cpu", load_weights None."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"opt.{name}: the check's opt has no {name!r} (it has {', '.join(sorted(vars(self)))})")


def tokens(vocab: int, length: int, seed: int) -> torch.Tensor:
    """(BATCH, length) random ids in 1 .. vocab - 1 (0 is the padding id)."""
    return torch.randint(1, vocab, (BATCH, length), generator=torch.Generator().manual_seed(seed))


def probe_batch(sizes: Sizes, src_len: int = SRC_LEN, tgt_len: int = TGT_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """The probe batch, all real tokens: source (BATCH, src_len), target (BATCH, tgt_len)."""
    return tokens(sizes.src_vocab, src_len, seed=1), tokens(sizes.tgt_vocab, tgt_len, seed=2)


def padded(ids: torch.Tensor, lengths: tuple[int, ...]) -> torch.Tensor:
    """ids with the padding id after each sentence's length."""
    out = ids.clone()
    for row, length in enumerate(lengths):
        out[row, length:] = PAD_ID
    return out


def options(sizes: Sizes) -> Options:
    found = {name: sizes.value(size) for size, names in NAMES.items() for name in names}
    found.update({"N": sizes.N, **{name: sizes.required(name) for name in ONLY_IF_REQUIRED}, "load_weights": None,
                  "checkpoint": 0})
    return Options(**found)


def size_of(name: str) -> str | None:
    """The size a parameter named `name` takes, or None."""
    lowered = name if name == "N" else name.lower()
    return next((size for size, names in NAMES.items() if lowered in names or lowered == size), None)


def arguments(builder: Callable[..., Any], sizes: Sizes, path: Path) -> dict[str, Any]:
    """The keyword arguments for `builder` (a function, or a class: its __init__)."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        raise UserError(f"{path}: cannot read the parameters of {getattr(builder, '__name__', builder)}") from None
    found: dict[str, Any] = {}
    for name, parameter in parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        required = parameter.default is parameter.empty
        if (size := size_of(name)) is not None:
            found[name] = sizes.value(size)
        elif name.lower() in OPTIONS:
            found[name] = options(sizes)
        elif required and name.lower() in ONLY_IF_REQUIRED:
            found[name] = sizes.required(name.lower())
        elif required:
            raise UserError(f"{path}: {builder.__name__} needs `{name}`, which the check cannot give (it gives the "
                            "vocabulary sizes, N, d_model, d_ff, h and dropout, or an `opt` with them): give it a "
                            "default, or write an adapter (docs/check.md#your-code-in-another-shape)")
    return found


def call_text(name: str, kwargs: dict[str, Any], sizes: Sizes) -> str:
    shown = [f"{key}={'opt' if isinstance(value, Options) else repr(value)}" for key, value in kwargs.items()]
    text = f"{name}({', '.join(shown)})"
    if any(isinstance(value, Options) for value in kwargs.values()):
        text += " with opt." + ", opt.".join(f"{k}={v}" for k, v in asdict(sizes).items())
    return text


def build(name: str, builder: Callable[..., Any], sizes: Sizes, path: Path,
          seed: int = 0) -> tuple[nn.Module, Sizes, str, list[str]]:
    """(model, the sizes it was built with, the call as text, notes); its random draws from
    `seed`. A builder that raises with unequal vocabularies (it ties them) is retried with
    equal ones, and says so."""
    if any(size_of(key) == "vocab" for key in arguments(builder, sizes, path)):
        sizes = replace(sizes, tgt_vocab=sizes.src_vocab)
    kwargs = arguments(builder, sizes, path)
    try:
        return checked_module(seeded_call(builder, kwargs, seed), name, path), sizes, call_text(name, kwargs, sizes), []
    except UserError:
        raise
    except Exception as err:
        first = f"{where(err, path)}: {call_text(name, kwargs, sizes)} raised {described(err)}"
        if sizes.src_vocab == sizes.tgt_vocab:
            raise UserError(first) from None
        why = described(err)
    equal = replace(sizes, tgt_vocab=sizes.src_vocab)  # their code may tie the two vocabularies
    kwargs = arguments(builder, equal, path)
    try:
        model = seeded_call(builder, kwargs, seed)
    except Exception:
        raise UserError(first) from None
    note = f"with unequal vocabularies it raised {why}; built with equal ones"
    return checked_module(model, name, path), equal, call_text(name, kwargs, equal), [note]


def seeded_call(builder: Callable[..., Any], kwargs: dict[str, Any], seed: int) -> Any:
    """The builder's result, its random draws from `seed` (the same model on every run)."""
    torch.manual_seed(seed)
    with contextlib.redirect_stdout(sys.stderr):  # their prints: stdout is for translations
        return builder(**kwargs)


def checked_module(model: Any, name: str, path: Path) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise UserError(f"{path}: {name} returned a value of type {type(model).__name__}, not the model (a "
                        "torch.nn.Module)")
    return model.float().eval()
