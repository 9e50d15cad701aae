"""Import a checkpoint of the Annotated Transformer (Harvard NLP's `make_model`, and the
study notes' copy of it) as an ordinary run directory:
`transformer-mt import annotated CHECKPOINT --run RUN --heads H --src-vocab F --tgt-vocab F`.

CHECKPOINT is what `torch.save` wrote: a bare state dict with their parameter names
(`src_embed.0.lut.weight`, `encoder.layers.0.self_attn.linears.0.weight`,
`encoder.layers.0.sublayer.0.norm.a_2`, `generator.proj.weight`, ...), or a dict holding
one under `model_state_dict` (the notes' `{"epoch", "model_state_dict",
"optimizer_state_dict", "loss"}`), `state_dict` or `model`. It is read with
`weights_only=True`: nothing in the file runs. N (each stack's), d_model, d_ff and both
vocabulary sizes come from the shapes; the number of heads does not show in the weights
and is given (--heads).

What their model computes, and how it is carried over:
- pre-norm sub-layers, x + Dropout(Sublayer(LayerNorm(x))), and a LayerNorm after each
  stack: model.norm_first true; their LayerNorm, a_2 (x - mean) / (std + 1e-6) + b_2 with
  the unbiased std: model.layer_norm annotated (a_2, b_2 -> weight, bias);
- the four projections of each attention, `linears.0` .. `linears.3` = W^Q, W^K, W^V, W^O:
  the first three stacked into our in_proj, the last our out_proj;
- separate source and target embeddings times sqrt(d_model), the sinusoid interleaved
  (sin on even, cos on odd components) from position 0: model.share_vocab and
  model.tie_embeddings false, positional_layout interleaved; the stored table (`pe`, their
  max_len rows, 5000 by default) must be that sinusoid and sets model.max_positions;
- a generator with a bias (`generator.proj`), ReLU between w_1 and w_2.
Their word vocabularies (data/tokenizers/word_vocab.py) are reordered into our special ids;
a vocabulary without <unk> gets a row of our own: the pad row's embedding, and on the
output side a zero weight and the bias NEVER_LOGIT (probability exactly 0), so the
distribution over their V outputs is theirs.

Decoding defaults are those of their `translate`: greedy (decode.beam 1), at most 50 new
tokens (decode.max_len_a 0, max_len_b 49: eos is the 50th), unknown source words as padding
hidden by the source mask (decode.unknown_words pad), the source `<sos>` words `<eos>` cut
at their max_len. Two differences are kept, as for every run: their greedy search may
choose `<pad>` or `<sos>`, which their training never targets, and ours never emits either
(NEVER_EMITTED); a line without text gives an empty translation (theirs translates
`<sos> <eos>`).

Refused with one line, leaving no run folder: a file that is not a torch.save file, a
truncated one, one that needs code to load, other parameter names (the names found and
expected), --heads that does not divide d_model, a vocabulary whose size is not the
checkpoint's, an existing --run."""

from __future__ import annotations

import logging
import math
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from transformer_mt.common.config import Config, DataConfig, DecodeConfig, ModelConfig
from transformer_mt.data.corpus import decode_line, iter_raw_lines
from transformer_mt.data.tokenizers.word_vocab import (WORD_VOCAB, WordVocabTokenizer, build_vocabulary,
                                                      check_vocabulary, our_rows)
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_write_text, read_json_file
from transformer_mt.interop.folders import check_new_run
from transformer_mt.interop.imported import import_time, sha256_of, write_imported_run
from transformer_mt.model.embeddings import sinusoidal_encoding
from transformer_mt.model.transformer import NEVER_LOGIT, build_model
from transformer_mt.runs.directory import RunDir
from transformer_mt.runs.tensor_checks import refuse_non_finite_load, unreadable_reason

log = logging.getLogger("transformer_mt")

STATE_KEYS = ("model_state_dict", "state_dict", "model")  # where a training checkpoint keeps the weights
PREFIXES = ("module.", "_orig_mod.")  # added by nn.DataParallel / DDP and by torch.compile
THEIR_MAX_LEN = 500  # the source cut of the notes' script (WMT16Dataset(max_len=500))
THEIR_POSITIONS = 5000  # their PositionalEncoding's default max_len
ATTENTION = {"encoder": ("self_attn",), "decoder": ("self_attn", "src_attn")}
SUBLAYERS = {"encoder": 2, "decoder": 3}


def import_annotated(checkpoint: str | Path, run_dir: str | Path, heads: int, source_vocab: dict[str, int],
                     target_vocab: dict[str, int], max_len: int = THEIR_MAX_LEN,
                     vocab_origin: dict[str, Any] | None = None) -> RunDir:
    """Write the run directory `run_dir` from the Annotated-Transformer checkpoint
    `checkpoint`, whose word vocabularies are `source_vocab` and `target_vocab` (checked:
    data/tokenizers/word_vocab.py); built beside it and renamed into place, so a failed
    import leaves nothing. `vocab_origin` says in imported.json where they came from."""
    root = check_new_run(run_dir)
    path = Path(checkpoint)
    found = load_checkpoint(path)
    state = state_dict_of(found, path)
    sizes = infer_sizes(state, path)
    if heads < 1 or sizes["d_model"] % heads:
        raise UserError(f"--heads {heads}: must divide d_model, which is {sizes['d_model']} in {path}")
    if max_len < 2:
        raise UserError(f"--max-len {max_len}: must be at least 2 (<sos> and one word)")
    tokenizer = WordVocabTokenizer(source_vocab, target_vocab, max_len)
    for side, vocab in (("src", source_vocab), ("tgt", target_vocab)):
        if len(vocab) != sizes[f"{side}_vocab"]:
            raise UserError(f"--{side}-vocab has {len(vocab)} words but {path} has {sizes[f'{side}_vocab']} rows in "
                            f"{side}_embed.0.lut.weight; give the vocabulary the checkpoint was trained with")
    cfg = run_config(sizes, heads, tokenizer, stored_positions(state, path))
    model = build_model(cfg.model)
    model.load_state_dict(our_state(state, sizes, source_vocab, target_vocab), strict=True)

    record, readme = provenance(path, found, heads, max_len, vocab_origin or {})
    write_imported_run(root, cfg, model, lambda out: atomic_write_text(out / WORD_VOCAB, tokenizer.to_json()),
                       record, readme)
    log.info("imported %s into %s: %d+%d layers, d_model %d, d_ff %d, %d heads, %d source and %d target words",
             path, root, sizes["encoder_layers"], sizes["decoder_layers"], sizes["d_model"], sizes["d_ff"], heads,
             len(source_vocab), len(target_vocab))
    return RunDir(root)


def read_vocabulary(path: str | Path) -> dict[str, int]:
    """A JSON word -> id file (what `json.dump(dataset.src_vocab, f)` writes), checked."""
    return check_vocabulary(read_json_file(path, "no such vocabulary file"), str(path))


def vocabulary_of_text(path: str | Path, max_samples: int = 0) -> dict[str, int]:
    """The vocabulary the notes' build_vocab makes of the first `max_samples` lines of the
    text file `path` (every line with 0), as their WMT16Dataset's select(range(N)) does."""
    lines = []
    for number, raw in enumerate(iter_raw_lines(path), start=1):
        if max_samples and number > max_samples:
            break
        lines.append(decode_line(raw, number, str(path)))
    if max_samples and len(lines) < max_samples:
        raise UserError(f"{path}: has {len(lines)} lines, fewer than --max-samples {max_samples}")
    return build_vocabulary(lines)


def load_checkpoint(path: Path) -> Any:
    """What `torch.save` wrote to `path`, loaded with weights_only=True on the CPU."""
    if not path.is_file():
        raise UserError(f"{path}: no such file" + (" (a folder: give the .pth file)" if path.is_dir() else ""))
    with open(path, "rb") as handle:
        legacy = handle.read(2) == b"\x80\x02"  # torch.save(..., _use_new_zipfile_serialization=False)
    if not legacy and not zipfile.is_zipfile(path):
        raise UserError(f"{path}: not a file written by torch.save, or one cut short (a complete one is a zip "
                        "archive); save the model again with torch.save(model.state_dict(), PATH)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a foreign, truncated or code-carrying file
        reason = unreadable_reason(err)
        hint = ("; save the weights alone with torch.save(model.state_dict(), PATH) and import that"
                if "running code" in reason else "")
        raise UserError(f"{path}: not a checkpoint this import can read ({reason}){hint}") from None


def state_dict_of(found: Any, path: Path) -> dict[str, torch.Tensor]:
    """The weights in `found`: the object itself when it maps names to tensors, else the
    first of model_state_dict, state_dict, model that does; prefixes of DataParallel and
    torch.compile removed, floating point as float32, NaN and infinities refused."""
    if not isinstance(found, dict):
        raise UserError(f"{path}: holds a {type(found).__name__}, not a state dict (a dict of parameter name -> tensor)")
    state = found if found and all(isinstance(t, torch.Tensor) for t in found.values()) else None
    for key in STATE_KEYS:
        value = found.get(key)
        if state is None and isinstance(value, dict) and value and all(isinstance(t, torch.Tensor) for t in value.values()):
            state = value
    if state is None:
        keys = ", ".join(map(str, list(found)[:6])) or "nothing"
        raise UserError(f"{path}: no state dict found (it holds {keys}); expected a dict of tensors, or one under "
                        f"{', '.join(STATE_KEYS)}")
    out = {}
    for key, tensor in state.items():
        name = str(key)
        for prefix in PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = tensor.float() if tensor.is_floating_point() else tensor
    refuse_non_finite_load(out.items(), path)
    return out


def annotated_names(encoder_layers: int, decoder_layers: int) -> list[str]:
    """Every parameter name of their make_model with these stacks (their `pe` buffers aside)."""
    names = [f"{side}_embed.0.lut.weight" for side in ("src", "tgt")]
    for stack, n_layers in (("encoder", encoder_layers), ("decoder", decoder_layers)):
        for i in range(n_layers):
            prefix = f"{stack}.layers.{i}."
            for attention in ATTENTION[stack]:
                names += [f"{prefix}{attention}.linears.{j}.{p}" for j in range(4) for p in ("weight", "bias")]
            names += [f"{prefix}feed_forward.{w}.{p}" for w in ("w_1", "w_2") for p in ("weight", "bias")]
            names += [f"{prefix}sublayer.{j}.norm.{p}" for j in range(SUBLAYERS[stack]) for p in ("a_2", "b_2")]
        names += [f"{stack}.norm.a_2", f"{stack}.norm.b_2"]
    return names + ["generator.proj.weight", "generator.proj.bias"]


def infer_sizes(state: dict[str, torch.Tensor], path: Path) -> dict[str, int]:
    """N of each stack, d_model, d_ff and both vocabulary sizes, from the names and shapes;
    names other than theirs are refused with the names found and those expected."""
    layers = {stack: len({m.group(1) for key in state if (m := re.match(rf"{stack}\.layers\.(\d+)\.", key))})
              for stack in ("encoder", "decoder")}
    expected = annotated_names(max(layers["encoder"], 1), max(layers["decoder"], 1))
    buffers = {f"{side}_embed.1.pe" for side in ("src", "tgt")}
    missing = [name for name in expected if name not in state]
    unknown = [name for name in state if name not in expected and name not in buffers]
    if missing or unknown:
        raise UserError(f"{path}: not the Annotated Transformer's parameter names: expected {', '.join(expected[:3])}, "
                        f"... ({len(expected)} names); missing {_few(missing)}; found {_few(list(state))}"
                        + (f"; unknown {_few(unknown)}" if unknown else ""))
    src, tgt = state["src_embed.0.lut.weight"], state["tgt_embed.0.lut.weight"]
    sizes = {"encoder_layers": layers["encoder"], "decoder_layers": layers["decoder"], "d_model": src.size(1),
             "d_ff": state["encoder.layers.0.feed_forward.w_1.weight"].size(0), "src_vocab": src.size(0),
             "tgt_vocab": tgt.size(0)}
    for name, shape in expected_shapes(sizes).items():
        if tuple(state[name].shape) != shape:
            raise UserError(f"{path}: {name} has shape {tuple(state[name].shape)}, but the other weights imply {shape}")
    return sizes


def _few(names: list[str]) -> str:
    return (", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")) or "none"


def expected_shapes(sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape of each of their parameters for these sizes."""
    d, d_ff = sizes["d_model"], sizes["d_ff"]
    shapes = {}
    for name in annotated_names(sizes["encoder_layers"], sizes["decoder_layers"]):
        if ".linears." in name:
            shape: tuple[int, ...] = (d, d) if name.endswith("weight") else (d,)
        elif ".w_1." in name:
            shape = (d_ff, d) if name.endswith("weight") else (d_ff,)
        elif ".w_2." in name:
            shape = (d, d_ff) if name.endswith("weight") else (d,)
        elif name.startswith("generator"):
            shape = (sizes["tgt_vocab"], d) if name.endswith("weight") else (sizes["tgt_vocab"],)
        elif name.startswith(("src_embed", "tgt_embed")):
            shape = (sizes[f"{name[:3]}_vocab"], d)
        else:  # a LayerNorm's a_2 or b_2
            shape = (d,)
        shapes[name] = shape
    return shapes


def run_config(sizes: dict[str, int], heads: int, tokenizer: WordVocabTokenizer,
               positions: int = THEIR_POSITIONS) -> Config:
    """The run's config.yaml (see the module docstring): their model, their decoding."""
    same = sizes["decoder_layers"] == sizes["encoder_layers"]
    model = ModelConfig(
        n_layers=sizes["encoder_layers"], decoder_layers=0 if same else sizes["decoder_layers"],
        d_model=sizes["d_model"], d_ff=sizes["d_ff"], n_heads=heads, dropout=0.1, norm_first=True,
        layer_norm="annotated", tie_embeddings=False, share_vocab=False, max_positions=positions,
        src_vocab_size=tokenizer.source_size, tgt_vocab_size=len(tokenizer),
    )
    data = DataConfig(vocab_type="word", joint_vocab=False, max_len=min(tokenizer.max_len, positions - 1))
    decode = DecodeConfig(beam=1, max_len_a=0.0, max_len_b=49, unknown_words="pad")
    cfg = Config(model=model, data=data, decode=decode)
    cfg.validate()
    return cfg


def our_state(state: dict[str, torch.Tensor], sizes: dict[str, int], source_vocab: dict[str, int],
              target_vocab: dict[str, int]) -> dict[str, torch.Tensor]:
    """Our state dict of their weights: rows of the vocabularies in our order (a row of our
    own for <unk> where they have none: the pad row's embedding; never emitted)."""
    def rows(tensor: torch.Tensor, vocab: dict[str, int], new_row: torch.Tensor) -> torch.Tensor:
        return torch.stack([new_row if theirs is None else tensor[theirs] for theirs in our_rows(vocab)])

    pad_src, pad_tgt = source_vocab["<pad>"], target_vocab["<pad>"]
    src_lut, tgt_lut = state["src_embed.0.lut.weight"], state["tgt_embed.0.lut.weight"]
    weight, bias = state["generator.proj.weight"], state["generator.proj.bias"]
    ours = {"src_embed.lut.weight": rows(src_lut, source_vocab, src_lut[pad_src]),
            "tgt_embed.lut.weight": rows(tgt_lut, target_vocab, tgt_lut[pad_tgt]),
            "generator.proj.weight": rows(weight, target_vocab, torch.zeros(sizes["d_model"])),
            "generator.proj.bias": rows(bias, target_vocab, torch.tensor(NEVER_LOGIT))}
    for stack in ("encoder", "decoder"):
        for i in range(sizes[f"{stack}_layers"]):
            prefix = f"{stack}.layers.{i}."
            for attention in ATTENTION[stack]:
                linears = [f"{prefix}{attention}.linears.{j}" for j in range(4)]
                for p in ("weight", "bias"):  # in_proj stacks W^Q, W^K, W^V
                    ours[f"{prefix}{attention}.in_proj.{p}"] = torch.cat([state[f"{name}.{p}"] for name in linears[:3]])
                    ours[f"{prefix}{attention}.out_proj.{p}"] = state[f"{linears[3]}.{p}"]
            for w in ("w_1", "w_2"):
                for p in ("weight", "bias"):
                    ours[f"{prefix}feed_forward.{w}.{p}"] = state[f"{prefix}feed_forward.{w}.{p}"]
            for j in range(SUBLAYERS[stack]):
                ours.update(_norm(state, f"{prefix}sublayer.{j}.norm"))
        ours.update(_norm(state, f"{stack}.norm"))
    return ours


def _norm(state: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    """Their LayerNorm's a_2 and b_2 as our weight and bias."""
    return {f"{name}.weight": state[f"{name}.a_2"], f"{name}.bias": state[f"{name}.b_2"]}


def stored_positions(state: dict[str, torch.Tensor], path: Path) -> int:
    """The rows of their stored positional table (the `pe` buffer, (1, max_len, d_model);
    THEIR_POSITIONS where the checkpoint has none), which must be the interleaved
    sinusoid up to their float32 arithmetic: a table of another kind would make every
    output differ."""
    rows = THEIR_POSITIONS
    for key in ("src_embed.1.pe", "tgt_embed.1.pe"):
        if key not in state:
            continue
        stored = state[key].reshape(-1, state[key].size(-1))
        d_model = state["src_embed.0.lut.weight"].size(1)
        if stored.size(1) != d_model or stored.size(0) < 2 or \
                (stored - sinusoidal_encoding(stored.size(0), d_model)).abs().max() > 2e-3:
            raise UserError(f"{path}: {key} is not the sinusoidal positional encoding of the Annotated Transformer "
                            "(sin on even, cos on odd components); other positions are not supported")
        rows = stored.size(0)
    return rows


def provenance(path: Path, found: dict[str, Any], heads: int, max_len: int,
               vocab_origin: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """imported.json (where the run came from, the epoch and training loss the checkpoint
    carried, its digest) and README.md."""
    when = import_time()
    record = {
        "format": "annotated-transformer", "checkpoint": str(path.resolve()), "imported": when,
        "sha256": sha256_of([path])[path.name],
        "epoch": _number(found.get("epoch")), "loss": _number(found.get("loss")), "heads": heads,
        "max_len": max_len, "vocabularies": vocab_origin,
        "rows": "ours 0 (pad) <- <pad>, 1 (unk) <- <unk> or a row of our own (never emitted), 2 (bos) <- <sos>, "
                "3 (eos) <- <eos>, 4.. <- their other ids in order",
    }
    return record, (f"Imported from {path} (an Annotated Transformer checkpoint) by "
                    f"`transformer-mt import annotated` on {when}; see imported.json.\n")


def _number(value: Any) -> float | int | None:
    """An epoch or loss as saved (a number, or a one-element tensor), else None."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value

