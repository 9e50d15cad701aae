"""`LearnerModel`: the learner's own nn.Module behind the interface the toolkit's training,
decoding and web page drive (model/transformer.py's EncoderDecoder): `encode(src, src_mask)`,
`decode(memory, src_mask, tgt)`, `forward(src, tgt, src_mask)` and a `generator`.

Their code stays as written, each pass as their convention runs it (learner/conventions.py). In
the Annotated Transformer's convention `encode` and `decode` are theirs and `generator.logits` is
their generator's log-probabilities; in the tutorial's, `encode` keeps the source ids (their
forward encodes them again) and `decode` is their forward, whose logits `generator.logits`
passes on. Both feed the label-smoothed loss as they
are: softmax(log p) = p, so the loss of log-probabilities is the loss of the logits they came
from. Their masks come from their file's mask functions where it has them, else from the kit
in the encoding their attention reads (learner/masks.py); our (B, 1, 1, S) source mask, which
the decoders carry from step to step, is turned back into a source of their form.

They write no cache: every decoding step runs their decoder over the whole prefix again, the
memory repeated per beam (`supports_cache` False tells decoding/source.py). Two things of the
tutorial's forward are not repeated while decoding, each only where the scores stay those of
their forward on the whole prefix (compared once, on the first call that can show it):
- their encoder (the first module their forward hands the source ids to) runs once per source:
  its output is the memory, and each step's forward gets it back in place of encoding again;
- a search reads only the last position's scores, so their output layer (their one nn.Linear to
  the target vocabulary) is fed only the last position's state: at Multi30k's sizes that layer
  is most of a step's products, the prefix times d_model times the target vocabulary."""

from __future__ import annotations

import contextlib
import functools
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer_mt.common.config import ModelConfig
from transformer_mt.common.errors import UserError
from transformer_mt.common.specials import PAD_ID
from transformer_mt.learner.building import BATCH, SRC_LEN, SRC_LENGTHS, TGT_LEN, Sizes, build, padded, probe_batch
from transformer_mt.learner.conventions import Convention, convention_of
from transformer_mt.learner.faults import (DropoutInEval, backward_problem, batch_first_fed, eval_dropout_message,
                                           sequence_first_message, sequence_first_modules, taken, tuple_note)
from transformer_mt.learner.loading import described, find_builder, line_in, located
from transformer_mt.learner.masks import MaskSource, masks_for
from transformer_mt.learner.recording import attention_calls, attention_role, record
from transformer_mt.model.recording import AttentionRecorder

KINDS = ("encoder", "decoder", "cross")  # the page's three kinds of attention
ROLES = {"encoder self": "encoder", "decoder self": "decoder", "cross": "cross"}
SOFTMAXES = (torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax)


@dataclass(frozen=True)
class LearnerSource:
    """Where a learner's model comes from: `path` (their file, or a run's copy of it), the
    builder's `name` (None: make_model, get_model or class Transformer) and, for a file
    without mask functions, the mask `encoding` their attention reads (check's
    model_encoding finds it before training; None: not known yet, "attend"), `beside`, where a
    run's copy finds the other files it imports, and `longest`, the longest sentence their model
    runs on (their positional table may be shorter than model.max_positions; None: not known)."""

    path: Path
    name: str | None = None
    encoding: str | None = None
    beside: Path | None = None  # their files' copies in a run, or the original's folder
    longest: int | None = None


def sizes_for(cfg: ModelConfig) -> Sizes:
    """A config's model section as the builder's sizes: N, d_model, d_ff, h, dropout, the
    tokenizer's vocabularies and the positional table's length."""
    return Sizes(src_vocab=cfg.src_vocab_size, tgt_vocab=cfg.tgt_vocab_size, N=cfg.n_layers, d_model=cfg.d_model,
                 d_ff=cfg.d_ff, h=cfg.n_heads, dropout=cfg.dropout, max_len=cfg.max_positions)


class LearnerGenerator:
    """What the decoders and the loss call `model.generator`: `logits(x)` scores for the loss
    and the search (their log-probabilities or logits, as their model gives them) and
    `generator(x)` log-probabilities. Not an nn.Module: their generator is already a
    sub-module of their model, and registered twice it would be saved twice."""

    def __init__(self, project: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.project = project  # the convention's scores: their generator, or nothing to do

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits(x).float(), dim=-1)

    @staticmethod
    def never_emitted() -> list[int]:
        return []


class LearnerModel(nn.Module):
    """Their model (`learner`, the one sub-module: its state_dict is theirs, key for key, so
    the run's weights load into their own code with `model.load_state_dict`), built by `name`
    (`builder`) as `call` says; `notes`: what the toolkit does that their code did not ask for;
    `eval_dropout`: the lines of their file that drop in eval mode (turned off there);
    `eval_random`: whether eval mode still differs from pass to pass."""

    supports_cache = False

    def __init__(self, learner: nn.Module, convention: Convention, masks: MaskSource, sizes: Sizes,
                 source: LearnerSource) -> None:
        super().__init__()
        self.learner = learner
        self.convention, self.masks, self.sizes, self.source = convention, masks, sizes, source
        self.name, self.builder, self.call, self.notes = "", None, "", []
        self.eval_dropout: list[int | None] = []
        self.eval_random = False
        self.generator = LearnerGenerator(functools.partial(convention.scores, learner))
        self.max_positions = min(sizes.max_len, source.longest or sizes.max_len)  # what decoding may feed
        self.tgt_vocab_size, self.n_heads, self.d_model = sizes.tgt_vocab, sizes.h, sizes.d_model
        self._attention: dict[str, list[nn.Module]] | None = None
        self._last_only: str | None = convention.output_layer(learner, sizes.tgt_vocab)
        self._last_only_checked = False
        self._encoder: str | None = ""  # their encoder's name; "": not looked for yet, None: not reused

    # ---- their weights as theirs ---------------------------------------------------------
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.learner.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.learner.load_state_dict(state_dict, strict=strict, assign=assign)

    # ---- their code as it runs here --------------------------------------------------------
    def eval_mode(self) -> contextlib.AbstractContextManager:
        """In eval mode, a dropout of theirs that asks for training=True does not drop (decoding is
        then deterministic, as model.eval() makes ours)."""
        return (DropoutInEval(self.source.path) if self.eval_dropout and not self.learner.training
                else contextlib.nullcontext())

    def teacher_forced(self, src: torch.Tensor, tgt: torch.Tensor,
                       masks: tuple[Any, Any] | None = None) -> torch.Tensor:
        """One teacher-forced pass of their model (B, T, tgt_vocab), with their masks or `masks`."""
        src_mask, tgt_mask = masks if masks is not None else self.masks.make(src, tgt)
        with self.eval_mode():
            return self.convention.run(self.learner, src, tgt, src_mask, tgt_mask)

    def backward_problem(self) -> str | None:
        """One line when a training pass's backward on the padded probe batch fails (faults.py)."""
        src, tgt = probe_batch(self.sizes)
        return backward_problem(lambda: self.teacher_forced(padded(src, SRC_LENGTHS), tgt), self.learner,
                                self.source.path)

    def probe(self) -> None:
        """Run their model once on the probe batch in eval mode: a model that raises, or that feeds
        batch-first tensors to a module built sequence-first, is one line (UserError); a tuple out
        and a dropout that drops in eval mode are noted, and two more passes tell whether eval mode
        is deterministic with that dropout off."""
        path, (src, tgt) = self.source.path, probe_batch(self.sizes)
        training = self.learner.training
        self.learner.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                try:
                    with batch_first_fed(self.learner, BATCH) as fed, DropoutInEval(path) as dropout:
                        out = self.convention.as_written(self.learner, src, tgt, *self.masks.make(src, tgt))
                except Exception as err:
                    if found := sequence_first_modules(self.learner):
                        raise UserError(sequence_first_message(path, *found[0])) from None
                    raise UserError(raised_message(err, path)) from None
                if fed:
                    raise UserError(sequence_first_message(path, *fed[0]))
                self.eval_dropout = dropout.lines
                if dropout.lines:
                    self.notes.append(f"{eval_dropout_message(path, dropout.lines)}: the toolkit turns it off in eval "
                                      "mode, as model.eval() would, so its translations are deterministic")
                note = tuple_note(out, f"{self.name or 'the model'}'s {self.convention.name} output")
                self.notes += [note] if note else []
                # not `out`: that pass ran under hooks and a function mode, which keep nn.Transformer off its
                # fast path, whose rounding differs
                first = self.teacher_forced(src, tgt)
                torch.manual_seed(1)
                self.eval_random = not torch.equal(first.nan_to_num(), self.teacher_forced(src, tgt).nan_to_num())
        finally:
            self.learner.train(training)

    # ---- EncoderDecoder's interface --------------------------------------------------------
    @staticmethod
    def source_ids(src_mask: torch.Tensor) -> torch.Tensor:
        """A source of their form from our mask (B, 1, 1, S): 1 at real tokens, PAD_ID elsewhere.
        Their mask functions read only which positions are padding."""
        return src_mask.reshape(src_mask.size(0), -1).long()

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) -> their memory (B, S, d_model); the tutorial's: their encoder's output
        where decoding may reuse it (`encoder_output`), else the ids themselves (B, S)."""
        with self.eval_mode():
            return self.convention.encode(self, src)

    def encoder_output(self, src: torch.Tensor) -> torch.Tensor:
        """The tutorial's memory: what their encoder gives in one pass of their forward on `src`
        and a one-token target, (B, S, d_model), where feeding it back in place of encoding again
        gives the scores of their forward (compared on the first call in eval mode); else `src`."""
        if self.training or self._encoder is None:
            return src
        first = src.new_ones((src.size(0), 1))  # (B, 1): a target of one token, which their encoder does not read
        masks = self.masks.make(src, first)
        if self._encoder:
            with outputs_of(self.learner.get_submodule(self._encoder)) as given:
                self.learner(src, first, *masks)
            return given[0] if len(given) == 1 and is_memory(given[0], src, self.d_model) else src
        whole: list[torch.Tensor] = []
        calls = record(self.learner, lambda: whole.append(taken(self.learner(src, first, *masks))))
        encoder = next((call for call in calls if call.module is not self.learner and call.input_ids[:1] == [id(src)]
                        and is_memory(call.output, src, self.d_model)), None)  # the first called with the ids
        self._encoder = encoder.name if encoder else None
        if encoder and not same_scores(self.their_forward(encoder.output, (src != PAD_ID).long(), first), whole[0]):
            self._encoder = None
        return encoder.output if self._encoder else src

    def their_forward(self, memory: torch.Tensor, their_src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Their forward on the prefix `tgt` (B, T): `memory` the source ids (B, S), or their
        encoder's output (B, S, d_model), given back in place of encoding again with `their_src`
        (B, S) for the ids, 1 at real tokens and PAD_ID elsewhere (their masks read only which are
        padding)."""
        if not memory.is_floating_point():
            return taken(self.learner(memory, tgt, *self.masks.make(memory, tgt)))
        with given_back(self.learner.get_submodule(self._encoder), memory):
            return taken(self.learner(their_src, tgt, *self.masks.make(their_src, tgt)))

    def decode(self, memory: torch.Tensor, src_mask: torch.Tensor, tgt: torch.Tensor,
               tgt_mask: Any = None, cache: Any = None) -> torch.Tensor:
        """tgt (B, T), the whole prefix -> their decoder output (B, T, d_model), or the
        tutorial's logits (B, T, V)."""
        if cache is not None:
            raise ValueError("a learner's model keeps no cache: decode the whole prefix")
        with self.eval_mode():
            return self.convention.decode(self, memory, self.source_ids(src_mask), tgt)

    def last_logits(self, memory: torch.Tensor, their_src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """The tutorial's logits while decoding (`their_forward`'s arguments): (B, 1, V) for the
        last position where their output layer fed only that position's state gives the same
        scores as their forward on the whole prefix (compared on the first call in eval mode with
        a prefix of two tokens or more), else their forward's (B, T, V)."""
        if self._last_only is None or self.training or (tgt.size(1) < 2 and not self._last_only_checked):
            return self.their_forward(memory, their_src, tgt)
        layer = self.learner.get_submodule(self._last_only)
        if self._last_only_checked:
            with last_position_only(layer):
                return self.their_forward(memory, their_src, tgt)
        whole = self.their_forward(memory, their_src, tgt)
        try:
            with last_position_only(layer):
                same = same_scores(self.their_forward(memory, their_src, tgt), whole[:, -1:])
        except Exception:  # noqa: BLE001 (their forward may use the layer's output in ways a slice breaks)
            same = False
        self._last_only, self._last_only_checked = (self._last_only if same else None), True
        return whole

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: Any = None) -> torch.Tensor:
        """Teacher forcing: states (B, T, d_model) or the tutorial's logits (B, T, V), for
        `generator.logits`; our src_mask is not needed (their masks are made from src)."""
        with self.eval_mode():
            return self.convention.states(self.learner, src, tgt, *self.masks.make(src, tgt))

    # ---- their attention, found as `check` finds it ----------------------------------------
    def attention_layers(self) -> dict[str, list[nn.Module]]:
        """The modules of each kind (encoder self-attention, decoder self-attention, cross),
        found by one probe pass: an attention is a module called with a query, a key and a
        value of d_model features; its kind shows in the lengths of its query and its keys. None
        of any kind where the probe cannot run (the page then shows no attention)."""
        if self._attention is None:
            src, tgt = probe_batch(self.sizes)
            device = next(self.learner.parameters()).device
            training = self.learner.training
            self.learner.eval()
            try:
                with torch.no_grad():
                    calls = record(self.learner, lambda: self.forward(src.to(device), tgt.to(device)))
            except Exception:  # noqa: BLE001 (their code: what it raises is theirs, the translation still works)
                calls = []
            finally:
                self.learner.train(training)
            found: dict[str, list[nn.Module]] = {kind: [] for kind in KINDS}
            for call in attention_calls(calls, self.sizes.d_model):
                kind = ROLES.get(attention_role(call, SRC_LEN, TGT_LEN))
                if kind and all(call.module is not module for modules in found.values() for module in modules):
                    found[kind].append(call.module)
            self._attention = found
        return self._attention

    @contextlib.contextmanager
    def recorded_attention(self, modules: list[nn.Module]) -> Iterator[AttentionRecorder]:
        """The weights (B, H, Tq, Tk) of each of `modules`' last call while the block runs: the
        last softmax over keys their code takes inside it (torch.softmax, F.softmax or
        Tensor.softmax of a (B, H, Tq, Tk) tensor). A module that takes none (one on
        F.scaled_dot_product_attention) records nothing: `recorder.weights` then raises KeyError."""
        recorder, inside = AttentionRecorder(), []

        def enter(module: nn.Module, args: Any) -> None:
            inside.append(module)

        def leave(module: nn.Module, args: Any, output: Any) -> None:
            inside.pop()

        class Softmaxes(TorchFunctionMode):
            def __torch_function__(self, func, _types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if inside and func in SOFTMAXES and isinstance(out, torch.Tensor) and out.dim() == 4:
                    recorder.record(inside[-1], out.detach())  # (B, H, Tq, Tk); no q and k: theirs
                return out

        handles = [h for module in modules for h in (module.register_forward_pre_hook(enter),
                                                     module.register_forward_hook(leave))]
        try:
            with Softmaxes():
                yield recorder
        finally:
            for handle in handles:
                handle.remove()


def same_scores(scores: torch.Tensor, reference: torch.Tensor) -> bool:
    """Whether `scores` are `reference`'s, up to bf16's and a reordered sum's rounding."""
    return scores.shape == reference.shape and torch.allclose(
        scores.float(), reference.float(), rtol=1e-3, atol=1e-4 * (1 + float(reference.abs().max())))


def is_memory(output: Any, src: torch.Tensor, d_model: int) -> bool:
    """Whether `output` is an encoder's output for `src` (B, S): floats (B, S, d_model)."""
    return (isinstance(output, torch.Tensor) and output.is_floating_point()
            and tuple(output.shape) == (*src.shape, d_model))


@contextlib.contextmanager
def outputs_of(module: nn.Module) -> Iterator[list[Any]]:
    """The outputs of `module`'s calls while inside."""
    outputs: list[Any] = []
    handle = module.register_forward_hook(lambda _module, _args, output: outputs.append(output))
    try:
        yield outputs
    finally:
        handle.remove()


@contextlib.contextmanager
def given_back(module: nn.Module, output: torch.Tensor) -> Iterator[None]:
    """`module` returning `output` without computing while inside (their encoder, its output
    kept from the first pass)."""
    module.forward = lambda *_args, **_kwargs: output
    try:
        yield
    finally:
        del module.forward


@contextlib.contextmanager
def last_position_only(layer: nn.Module) -> Iterator[None]:
    """`layer` fed only the last position of its (B, T, d_model) input while inside."""
    handle = layer.register_forward_pre_hook(lambda _module, args: (args[0][:, -1:], *args[1:]))
    try:
        yield
    finally:
        handle.remove()


def build_learner(module: types.ModuleType, source: LearnerSource, sizes: Sizes, seed: int) -> LearnerModel:
    """The one way a learner's model is built, for `check`, `train --model` and a run of theirs:
    NAME found in their file, called at `sizes` (its random draws from `seed`; the sizes it was
    built with are the model's `sizes`), in either convention, with their masks or the kit's in
    `source.encoding`, and run once on the probe batch (LearnerModel.probe)."""
    name, builder = find_builder(module, source.path, source.name)
    learner, built, call, notes = build(name, builder, sizes, source.path, seed)
    masks = masks_for(module, built, source.encoding)
    model = LearnerModel(learner.train(), convention_of(learner, source.path), masks, built, source)
    model.name, model.builder, model.call, model.notes = name, builder, call, notes
    model.probe()
    return model


def longest_run(model: LearnerModel, limit: int) -> int:
    """The longest sentence, up to `limit` tokens on both sides, that their model runs on (a
    tutorial's PositionalEncoder(max_seq_len=80) takes 80): found by halving, a few passes."""

    def runs(length: int) -> bool:
        try:
            runs_once(lambda src, tgt: model(src, tgt), model, model.sizes, model.source.path, length)
        except UserError:
            return False
        return True

    if runs(limit):
        return limit
    low, high = 1, limit  # runs(low) is assumed (a short sentence ran), runs(high) is not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if runs(middle) else (low, middle)
    return low


def runs_once(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], model: nn.Module, sizes: Sizes,
              path: Path, length: int | None = None) -> torch.Tensor:
    """The output of one teacher-forced pass of `forward` on `probe_batch` (of `length` tokens on
    both sides where given), in eval mode: a model that raises whenever it runs is one line
    (where, what, and for a device error what to do), not a failure of every check nor a
    traceback at the first step."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return forward(*(probe_batch(sizes) if length is None else probe_batch(sizes, length, length)))
    except Exception as err:
        raise UserError(raised_message(err, path)) from None
    finally:
        model.train(training)


def output_fits(model: LearnerModel, path: Path) -> None:
    """UserError unless the model gives a score for every target token at every position."""
    out = runs_once(lambda src, tgt: model.generator.logits(model(src, tgt)), model, model.sizes, path)
    vocab = model.sizes.tgt_vocab
    if out.dim() != 3 or tuple(out.shape[:2]) != (BATCH, TGT_LEN) or out.size(-1) != vocab:
        raise UserError(f"{path}: the model's output for {BATCH} sentences of {TGT_LEN} target tokens has shape "
                        f"{tuple(out.shape)}, not ({BATCH}, {TGT_LEN}, {vocab}): training needs a score for each "
                        f"of the {vocab} target tokens at every position (the last dimension is the target vocabulary)")


DEVICE_WORDS = ("cuda", "device", "expected all tensors to be on the same")


def raised_message(err: BaseException, path: Path, when: str = f"when run on {BATCH} sentences",
                   retry: str = f"run your model on a batch of {BATCH} sentences") -> str:
    """'FILE:LINE raised Error: message' and what to do: for a device error, that a model
    written for one device should follow its input's; else `retry` and fix that line."""
    text = f"{located(path, line_in(err, path))}: the model raised {described(err)} {when}"
    if any(word in str(err).lower() for word in DEVICE_WORDS):
        return (f"{text}: a model written for one device should follow its input's (x.device, or a table kept with "
                "register_buffer, which .to() moves), not call .cuda() or name a device")
    return f"{text}: {retry} and fix that line"

