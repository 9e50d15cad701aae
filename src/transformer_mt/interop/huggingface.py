"""Export a run as a Hugging Face transformers model folder: `transformer-mt export hf RUN --out DIR`.

The folder loads with AutoModelForSeq2SeqLM and AutoTokenizer (stock classes, no custom
code), runs in pipeline("translation"), and its greedy and beam search (length penalty
0) outputs are ours token for token (tests/integration/test_hf_export.py checks them
against transformers' own generate). Nothing here imports transformers: the files are
written directly (config.json, generation_config.json, model.safetensors, the tokenizer
files, README.md, transformer_mt.json and the run's config as transformer_mt_config.yaml).

The architecture (checked against transformers' modeling_marian.py and modeling_pegasus.py):

- post-norm runs (model.norm_first false, the paper's and the base/big/wmt14 presets')
  are a MarianMTModel: LayerNorm(x + Sublayer(x)), no LayerNorm after either stack;
- pre-norm runs (the small/tiny/demo/multi30k presets) are a
  PegasusForConditionalGeneration: x + Sublayer(LayerNorm(x)), a LayerNorm after each
  stack, static sinusoidal positions from 0 in the halves layout, no LayerNorm on the
  embeddings. (MBart and NLLB/M2M100 are pre-norm too, but MBart has learned positions
  and a LayerNorm on the embeddings, and M2M100's sinusoid uses other frequencies
  (10000^(i / (d/2 - 1))) and starts at position padding_idx + 1: neither is exact.)
- both: embeddings times sqrt(d_model) (scale_embedding), model.activation as
  activation_function, one vocabulary and one embedding matrix (share_vocab; a run with
  two is refused), the generator tied to it or not (tie_word_embeddings), its bias as
  final_logits_bias; in_proj split into q/k/v_proj, w_1/w_2 -> fc1/fc2, the sub-layer
  LayerNorms in order (interop/marian.py's NORMS), eps 1e-5 in both;
- positions: Marian and Pegasus add the halves sinusoid; an interleaved run (the paper's
  layout) is written with its model dimension permuted (interop/positions.py), which is
  exact; transformer_mt.json records it so that `import marian` undoes it.

The ids stay ours: vocab.json is the run's pieces in id order (pad 0, unk 1, bos <s> 2,
eos 3), so no row moves. The decoder starts from bos (decoder_start_token_id 2, which
Hugging Face allows; Marian's own models start from pad); bad_words_ids [[0], [2]] ban
pad and bos after the softmax over all outputs, as our decoders do (renormalize_logits
false): the scores are ours. The tokenizer is the stock MarianTokenizer: vocab.json plus
source.spm and target.spm, both the run's tokenizer.model (or an imported run's own
source.spm and target.spm); it appends </s> to the source as we do. It differs from
our tokenizer only on a line that starts with `>>xx<<` (kept whole, as Marian's
target-language token), and its decode drops <unk> where ours writes " \u2047 ".

Decoding defaults go to generation_config.json: num_beams = decode.beam, length_penalty
= decode.length_penalty (copied: Hugging Face divides by |Y| ** alpha, we by GNMT's
((5 + |Y|) / 6) ** alpha; equal at 0), max_length = model.max_positions (Hugging Face
has no source-relative limit like our max_len_a * |X| + max_len_b)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from transformer_mt import __version__
from transformer_mt.common.config import CHECKPOINT_CHOICES, Config
from transformer_mt.data.corpus_files import guess_languages
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_mt.data.tokenizers.registry import require_joint
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_path, atomic_write_text
from transformer_mt.interop.folders import check_out_dir, write_folder
from transformer_mt.interop.hf_card import model_card
from transformer_mt.interop.marian import ATTENTION, NORMS
from transformer_mt.interop.positions import interleaved_to_halves, to_halves
from transformer_mt.model.transformer import EncoderDecoder
from transformer_mt.runs.directory import RunDir, load_run_model, require_ours

METADATA = "transformer_mt.json"  # where the export came from; read back by `import marian`
CONFIG_COPY = "transformer_mt_config.yaml"
SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", EOS_ID: "</s>"}  # MarianTokenizer's defaults
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")
ARCHITECTURES = {False: ("marian", "MarianMTModel"), True: ("pegasus", "PegasusForConditionalGeneration")}


def export_hf(run_dir: str | Path, out_dir: str | Path, checkpoint: str = "best", force: bool = False,
              languages: tuple[str, str] | None = None, command: str = "") -> Path:
    """Write the run's model (`checkpoint`: best, last or average) as a Hugging Face
    folder `out_dir` (whole or not at all; a non-empty one is replaced only with `force`).
    `languages`: (source, target) codes for the model card and tokenizer, else guessed
    from the training file names; `command`: the command line, for the model card."""
    if checkpoint not in CHECKPOINT_CHOICES:
        raise UserError(f"checkpoint must be one of {', '.join(CHECKPOINT_CHOICES)}, got {checkpoint!r}")
    for code in languages or ():
        check_language(code)
    run, out = RunDir(Path(run_dir)), Path(out_dir)
    require_ours(run, "the Hugging Face export")
    check_out_dir(out, run.root, force)
    cfg, tokenizer, model = load_run_model(run, checkpoint, arch="encoder_decoder")
    require_joint(tokenizer, "the Hugging Face export (one vocab.json and one embedding)")
    where = str(run.root)
    check_exportable(cfg, model, where)
    pieces = vocabulary(tokenizer, model, where)
    state = hf_state(model, cfg, where)
    model_type, _ = ARCHITECTURES[cfg.model.norm_first]
    langs = languages or guess_languages(cfg.data)
    files = {
        "config.json": hf_config(cfg, len(pieces)),
        "generation_config.json": generation_config(cfg),
        "tokenizer_config.json": tokenizer_config(cfg, pieces, langs),
        METADATA: metadata(run, cfg, checkpoint),
    }
    card = model_card(run, cfg, checkpoint, model_type, langs,
                      command or f"transformer-mt export hf {run.root} --out {out} --checkpoint {checkpoint}")
    spm_files = sentencepiece_files(run)

    def fill(folder: Path) -> None:
        from safetensors.torch import save_file

        for name, content in files.items():
            atomic_write_text(folder / name, json.dumps(content, indent=2, ensure_ascii=False) + "\n")
        atomic_write_text(folder / "vocab.json", json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
        for name, source in spm_files.items():
            with atomic_path(folder / name) as path:
                shutil.copyfile(source, path)
        with atomic_path(folder / "model.safetensors") as path:
            save_file(state, str(path), metadata={"format": "pt"})
        atomic_write_text(folder / CONFIG_COPY, run.config.read_text(encoding="utf-8"))
        atomic_write_text(folder / "README.md", card)

    write_folder(out.resolve(), fill)
    return out


# ---- what can be exported ----------------------------------------------------------------
def check_exportable(cfg: Config, model: EncoderDecoder, where: str) -> None:
    """Refuse, in one line that says why and what to do, what no stock architecture holds."""
    m = cfg.model
    if m.positional != "sinusoidal":
        raise UserError(f"{where}: model.positional is {m.positional}; Marian and Pegasus add fixed sinusoids and "
                        "have no learned position table, so the Hugging Face export cannot hold this model; "
                        "export ctranslate2 can, or train with model.positional: sinusoidal")
    if not m.share_vocab or model.src_embed is not model.tgt_embed:
        raise UserError(f"{where}: model.share_vocab is false (two embedding matrices); the Hugging Face export "
                        "needs one shared embedding, as Marian and Pegasus have; train with model.share_vocab: true")
    if m.layer_norm != "pytorch":
        raise UserError(f"{where}: model.layer_norm is {m.layer_norm}; Marian and Pegasus normalise as nn.LayerNorm "
                        "does, (x - mean) / sqrt(var + eps), so the Hugging Face export cannot hold this model")
    finals = {type(stack.norm).__name__ for stack in (model.encoder, model.decoder)}
    expected = {"LayerNorm"} if m.norm_first else {"Identity"}
    if finals != expected:
        raise UserError(f"{where}: the stacks' final LayerNorms ({sorted(finals)}) do not match "
                        f"model.norm_first {m.norm_first}; this model has no Hugging Face equivalent")


def vocabulary(tokenizer: Any, model: EncoderDecoder, where: str) -> list[str]:
    """The pieces in id order (vocab.json): every id once, the specials where
    MarianTokenizer and our decoders expect them."""
    pieces = tokenizer.id_to_piece(list(range(len(tokenizer))))
    if len({model.tgt_embed.lut.num_embeddings, model.generator.proj.out_features, len(pieces)}) != 1:
        raise UserError(f"{where}: the model's vocabulary ({model.generator.proj.out_features}) differs from the "
                        f"tokenizer's {len(pieces)} pieces; was tokenizer.model replaced after training?")
    if len(set(pieces)) != len(pieces):
        raise UserError(f"{where}: the tokenizer has repeated pieces; vocab.json maps each piece to one id")
    wrong = {i: pieces[i] for i, piece in SPECIAL_PIECES.items() if pieces[i] != piece}
    if wrong:
        raise UserError(f"{where}: the special pieces {wrong} differ from MarianTokenizer's <pad> 0, <unk> 1, </s> 3; "
                        "train the vocabulary with transformer-mt")
    return pieces


def sentencepiece_files(run: RunDir) -> dict[str, Path]:
    """source.spm and target.spm: an imported run's own, else tokenizer.model for both."""
    names = {path.name: path for path in run.tokenizer_files()}
    if "source.spm" in names and "target.spm" in names:
        return {"source.spm": names["source.spm"], "target.spm": names["target.spm"]}
    return {"source.spm": run.tokenizer, "target.spm": run.tokenizer}


# ---- the weights -------------------------------------------------------------------------
def hf_state(model: EncoderDecoder, cfg: Config, where: str) -> dict[str, torch.Tensor]:
    """The Hugging Face state dict (float32, contiguous, no shared memory): ours renamed,
    in the halves layout (permuted where the run is interleaved)."""
    ours = {key: tensor.detach().to("cpu", torch.float32) for key, tensor in model.state_dict().items()}
    if cfg.model.positional_layout == "interleaved":
        ours = to_halves(ours, cfg.model.d_model, where)
    out = {"model.shared.weight": ours["tgt_embed.lut.weight"],
           "final_logits_bias": ours["generator.proj.bias"].reshape(1, -1)}
    if not cfg.model.tie_embeddings:
        out["lm_head.weight"] = ours["generator.proj.weight"]
    for stack, n_layers in (("encoder", cfg.model.n_layers), ("decoder", cfg.model.n_decoder_layers)):
        for i in range(n_layers):
            out.update(layer_state(ours, f"{stack}.layers.{i}.", stack))
        if cfg.model.norm_first:  # Pegasus: the final LayerNorm and the stored sinusoid
            for name in ("weight", "bias"):
                out[f"model.{stack}.layer_norm.{name}"] = ours[f"{stack}.norm.{name}"]
            out[f"model.{stack}.embed_positions.weight"] = halves_table(model, cfg)
    return {key: tensor.contiguous().clone() for key, tensor in out.items()}


def layer_state(ours: dict[str, torch.Tensor], prefix: str, stack: str) -> dict[str, torch.Tensor]:
    """One layer's weights under Marian's (and Pegasus') names: interop/marian.py's
    `_layer`, inverted."""
    out = {}
    for theirs, mine in ATTENTION.items():
        if stack == "encoder" and theirs == "encoder_attn":
            continue
        for name in ("weight", "bias"):
            q, k, v = ours[f"{prefix}{mine}.in_proj.{name}"].chunk(3)  # in_proj stacks W^Q, W^K, W^V
            for part, tensor in zip("qkv", (q, k, v)):
                out[f"model.{prefix}{theirs}.{part}_proj.{name}"] = tensor
            out[f"model.{prefix}{theirs}.out_proj.{name}"] = ours[f"{prefix}{mine}.out_proj.{name}"]
    for theirs, mine in (("fc1", "w_1"), ("fc2", "w_2")):
        for name in ("weight", "bias"):
            out[f"model.{prefix}{theirs}.{name}"] = ours[f"{prefix}feed_forward.{mine}.{name}"]
    for i, norm in enumerate(NORMS[stack]):
        for name in ("weight", "bias"):
            out[f"model.{prefix}{norm}.{name}"] = ours[f"{prefix}sublayer.{i}.norm.{name}"]
    return out


def halves_table(model: EncoderDecoder, cfg: Config) -> torch.Tensor:
    """Our positional table in the halves layout (the same numbers, reordered)."""
    table = model.positional.table().detach().to("cpu", torch.float32)
    if cfg.model.positional_layout == "interleaved":
        table = table[:, interleaved_to_halves(cfg.model.d_model)]
    return table


# ---- the JSON files ----------------------------------------------------------------------
def hf_config(cfg: Config, vocab_size: int) -> dict[str, Any]:
    """config.json of MarianMTModel (post-norm) or PegasusForConditionalGeneration (pre-norm)."""
    m = cfg.model
    model_type, architecture = ARCHITECTURES[m.norm_first]
    config = {
        "architectures": [architecture], "model_type": model_type, "vocab_size": vocab_size,
        "d_model": m.d_model, "encoder_layers": m.n_layers, "decoder_layers": m.n_decoder_layers,
        "encoder_attention_heads": m.n_heads, "decoder_attention_heads": m.n_heads,
        "encoder_ffn_dim": m.d_ff, "decoder_ffn_dim": m.d_ff, "activation_function": m.activation,
        "max_position_embeddings": m.max_positions, "scale_embedding": True,
        "dropout": m.dropout, "attention_dropout": m.attention_p,
        "activation_dropout": m.activation_p,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "init_std": 0.02,
        "is_encoder_decoder": True, "use_cache": True, "tie_word_embeddings": m.tie_embeddings,
        "pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
        "decoder_start_token_id": BOS_ID, "forced_eos_token_id": None,
    }
    if model_type == "marian":
        config.update(decoder_vocab_size=vocab_size, share_encoder_decoder_embeddings=True)
    return config


def generation_config(cfg: Config) -> dict[str, Any]:
    """generation_config.json: decoding as ours (see the module docstring)."""
    return {
        "decoder_start_token_id": BOS_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID,
        "forced_eos_token_id": None, "bad_words_ids": [[PAD_ID], [BOS_ID]], "renormalize_logits": False,
        "num_beams": cfg.decode.beam, "length_penalty": cfg.decode.length_penalty,
        "max_length": cfg.model.max_positions,
    }


def tokenizer_config(cfg: Config, pieces: list[str], languages: tuple[str, str] | None) -> dict[str, Any]:
    """tokenizer_config.json: the stock MarianTokenizer over our ids. bos is named so
    that decoding with skip_special_tokens drops the decoder's first token."""
    source, target = languages or (None, None)
    return {
        "tokenizer_class": "MarianTokenizer", "source_lang": source, "target_lang": target,
        "separate_vocabs": False, "model_max_length": cfg.model.max_positions,
        "clean_up_tokenization_spaces": False,
        "pad_token": pieces[PAD_ID], "unk_token": pieces[UNK_ID], "bos_token": pieces[BOS_ID],
        "eos_token": pieces[EOS_ID],
    }


def metadata(run: RunDir, cfg: Config, checkpoint: str) -> dict[str, Any]:
    """transformer_mt.json: provenance, and what `import marian` needs to give back the run."""
    return {
        "format": "transformer-mt-hf", "exported_from": str(run.root), "checkpoint": checkpoint,
        "transformer_mt": __version__, "positional_layout": cfg.model.positional_layout,
        "decode": dataclasses.asdict(cfg.decode),
    }


def check_language(code: str) -> None:
    """A language code as BCP 47 writes it (de, en-US, zh-Hant-TW): a 2- or 3-letter
    language, then hyphen-separated subtags of letters and digits; it goes into the model
    card's metadata and tokenizer_config.json, so nothing else (no path, no space) does."""
    if not LANGUAGE_CODE.fullmatch(code):
        raise UserError(f"--languages {code!r}: not a language code; give codes such as de, en or pt-BR "
                        "(letters, digits and hyphens, BCP 47)")


