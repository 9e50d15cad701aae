"""Import a Hugging Face Marian model (the OPUS-MT models) as an ordinary run directory:
`transformer-mt import marian SOURCE --run RUN`.

SOURCE is a folder in the Hugging Face layout (config.json, model.safetensors or
pytorch_model.bin, source.spm, target.spm, vocab.json, optional generation_config.json)
or a model name such as Helsinki-NLP/opus-mt-en-de, downloaded with huggingface_hub (the
`interop` extra). Nothing here needs `transformers`: the files are read directly.

What differs from the paper's model, and how it is carried over (checked against
transformers' models/marian: modeling_marian.py, configuration_marian.py,
tokenization_marian.py and convert_marian_to_pytorch.py):

- post-norm (LayerNorm(x + Sublayer(x)), eps 1e-5, no LayerNorm after either stack):
  model.norm_first false; embeddings times sqrt(d_model) (`scale_embedding`, which must be
  true: our Embeddings always scale);
- sinusoidal positions with the sines in the first half of the dimensions and the
  cosines in the second (the paper's frequencies, positions from 0): positional_layout halves;
- the feed-forward activation (`swish` = SiLU in OPUS-MT, or relu, gelu): model.activation;
- q/k/v projections stacked into our in_proj (W^Q, W^K, W^V rows), fc1/fc2 -> w_1/w_2,
  self_attn_layer_norm / encoder_attn_layer_norm / final_layer_norm -> the sublayer norms
  in order, the shared embedding (and lm_head when untied) -> embeddings and generator,
  final_logits_bias -> the generator's bias; with tie_word_embeddings false, transformers
  5 reads the encoder's and decoder's own embed_tokens: where they differ, model.share_vocab
  is false (two embedding matrices over the one vocabulary);
- Marian's ids (eos 0, unk 1, pad V-1, the decoder starting from pad) are reordered into
  ours (pad 0, unk 1, bos 2, eos 3) with one extra row: see data/tokenizers/marian.py. The
  extra bos output gets the bias NEVER_LOGIT (probability exactly 0), so our softmax over
  V + 1 outputs is Hugging Face's over V; with `renormalize_logits` (in the OPUS-MT
  generation configs) Hugging Face normalises again after banning pad, which equals giving
  pad NEVER_LOGIT too, and so the importer does;
- decoding defaults: beam = num_beams; decode.length_penalty = length_penalty (Hugging Face
  divides the log-probability by |Y| ** length_penalty, we by ((5 + |Y|) / 6) ** alpha:
  equal at 0, and both grow with length, but at alpha > 0 the two may rank hypotheses
  differently; the value is copied, not converted); the output limit is 2 x source + 50 subwords,
  within the positional table (Hugging Face stops at max_length 512 only, and forces eos
  as the last token there, `forced_eos_token_id`; ours ends such an output unfinished).

A folder in this package's own id layout (what `export hf` writes from a post-norm run:
one sentencepiece model as source.spm and target.spm, vocab.json its pieces in id order,
the decoder starting from <s>) is imported back as the run it came from: interop/joint.py.

Refused with one line: another model_type (said before any file is looked for), separate
source/target vocabularies, learned positions, pre-norm or extra LayerNorms, unscaled
embeddings, other activations, unequal encoder/decoder sizes."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from transformer_mt.common.config import Config, DataConfig, DecodeConfig, ModelConfig
from transformer_mt.data.tokenizers.marian import (EOS_PIECE, MARIAN_TOKENIZER_FILES, MARIAN_VOCAB, PAD_PIECE,
                                                   MarianTokenizer, read_vocab)
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.common.specials import BOS_ID, PAD_ID
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_path
from transformer_mt.interop import joint
from transformer_mt.interop.imported import import_time, sha256_of, write_imported_run
from transformer_mt.interop.hub_folder import WEIGHT_FILES, load_mapped_weights, open_import, read_json, read_weights
from transformer_mt.model.transformer import NEVER_LOGIT, EncoderDecoder, build_model
from transformer_mt.runs.directory import RunDir

log = logging.getLogger("transformer_mt")

DOWNLOADED = ["config.json", "generation_config.json", "tokenizer_config.json", *MARIAN_TOKENIZER_FILES]
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}  # Hugging Face name -> ours
REFUSED_FLAGS = {  # config.json keys (older conversions carry them) whose other value we cannot represent
    "normalize_before": (False, "pre-norm layers"),
    "add_final_layer_norm": (False, "a LayerNorm after each stack"),
    "normalize_embedding": (False, "a LayerNorm on the embeddings"),
    "layernorm_embedding": (False, "a LayerNorm on the embeddings"),
    "static_position_embeddings": (True, "learned positional embeddings"),
    "scale_embedding": (True, "embeddings not scaled by sqrt(d_model)"),
    "share_encoder_decoder_embeddings": (True, "separate source and target vocabularies"),
    "add_bias_logits": (False, "a bias inside lm_head"),
}
ATTENTION = {"self_attn": "self_attn", "encoder_attn": "src_attn"}  # Hugging Face -> ours
EMBEDDING_KEYS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
NORMS = {"encoder": ("self_attn_layer_norm", "final_layer_norm"),
         "decoder": ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")}


def import_marian(source: str | Path, run_dir: str | Path) -> RunDir:
    """Write the run directory `run_dir` from the Marian model `source` (folder or name):
    built in a temporary folder beside it and renamed into place, so a failed import
    leaves nothing. An existing run (a non-empty folder) is refused."""
    root, folder, hf = open_import(source, run_dir, "Marian", "Helsinki-NLP/opus-mt-en-de", DOWNLOADED)
    check_model_type(hf, folder)
    generation = {**hf, **read_json(folder / "generation_config.json")}
    ours = joint.is_joint(folder)  # our own layout (`export hf`): the ids are ours, row for row
    tokenizer = SentencePieceTokenizer.load(folder / "source.spm") if ours else MarianTokenizer.load(folder)
    vocab = read_vocab(folder / MARIAN_VOCAB) if ours else tokenizer.vocab
    check_config(hf, vocab, folder, start_piece=joint.START_PIECE if ours else PAD_PIECE)
    state = {key.removeprefix("model."): tensor for key, tensor in read_weights(folder).items()}
    source_embedding, target_embedding, _ = embeddings(state, hf, folder)
    cfg = run_config(hf, generation, len(tokenizer), share_vocab=torch.equal(source_embedding, target_embedding))
    model = build_model(cfg.model)
    load_marian_state(model, state, hf, list(range(len(tokenizer))) if ours else tokenizer.rows, folder)
    renormalized = [PAD_ID] if generation.get("renormalize_logits") else []
    never = joint.never_emitted(generation) if ours else [BOS_ID] + renormalized
    with torch.no_grad():
        model.generator.proj.bias[never] = NEVER_LOGIT
    if ours:
        cfg, model = joint.restore(cfg, model, folder)
    record, readme = provenance(source, folder, hf, generation, never)
    write_imported_run(root, cfg, model, lambda out: write_tokenizer_files(folder, out, ours), record, readme)
    extra = "" if ours else " (+1 bos row)"
    log.info("imported %s into %s: %d+%d layers, d_model %d, %d subwords%s, activation %s", source, root,
             cfg.model.n_layers, cfg.model.n_decoder_layers, cfg.model.d_model, len(vocab), extra, cfg.model.activation)
    return RunDir(root)


def write_tokenizer_files(folder: Path, run_root: Path, ours: bool) -> None:
    """The run's vocabulary: tokenizer.model for our own layout, else Marian's three files."""
    if ours:
        joint.write_tokenizer(folder, run_root)
        return
    for name in MARIAN_TOKENIZER_FILES:
        with atomic_path(run_root / name) as out:
            shutil.copyfile(folder / name, out)


def check_model_type(hf: dict[str, Any], folder: Path) -> None:
    """A model of another architecture is refused first, before its files are looked for."""
    model_type = hf.get("model_type", "marian")
    if model_type != "marian":
        raise UserError(f"{folder / 'config.json'}: model_type is {model_type!r}, not a Marian model "
                        "(MarianMTModel); `import marian` takes only Marian models")


def check_config(hf: dict[str, Any], vocab: dict[str, int], folder: Path, start_piece: str = PAD_PIECE) -> None:
    """Refuse, in one line, what our model cannot represent exactly. The decoder must start
    from `start_piece`: pad for Marian's own models, <s> for our layout (interop/joint.py)."""
    where = folder / "config.json"
    for key, (needed, what) in REFUSED_FLAGS.items():
        default = False if key == "scale_embedding" else needed  # MarianConfig's own default
        if bool(hf.get(key, default)) != needed:
            raise UserError(f"{where}: {key} is {hf.get(key, default)}: {what} is not supported by this import")
    if (folder / "target_vocab.json").is_file() or read_json(folder / "tokenizer_config.json").get("separate_vocabs"):
        raise UserError(f"{folder}: separate source and target vocabularies (target_vocab.json) are not "
                        "supported by this import; only models with one shared vocabulary")
    for key in ("encoder_layers", "decoder_layers"):  # the stacks may differ (model.decoder_layers)
        if not isinstance(hf.get(key), int) or hf[key] < 1:
            raise UserError(f"{where}: {key} ({hf.get(key)}) must be given, a whole number of at least 1")
    for ours, enc, dec in (("d_ff", "encoder_ffn_dim", "decoder_ffn_dim"),
                           ("n_heads", "encoder_attention_heads", "decoder_attention_heads")):
        if enc not in hf or hf[enc] != hf.get(dec):
            raise UserError(f"{where}: {enc} ({hf.get(enc)}) and {dec} ({hf.get(dec)}) must be given and equal "
                            f"(our model.{ours} sizes both stacks)")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise UserError(f"{where}: activation_function {activation!r} is not supported ({', '.join(ACTIVATIONS)})")
    size = hf.get("vocab_size")
    if size != len(vocab) or hf.get("decoder_vocab_size", size) not in (None, size):
        raise UserError(f"{where}: vocab_size {size} (decoder_vocab_size {hf.get('decoder_vocab_size')}) differs "
                        f"from the {len(vocab)} pieces of vocab.json")
    for key, piece in (("eos_token_id", EOS_PIECE), ("pad_token_id", PAD_PIECE), ("decoder_start_token_id", start_piece)):
        if hf.get(key) != vocab[piece]:
            note = f"; only models whose decoder starts from {start_piece} are supported" if key.startswith("decoder") else ""
            raise UserError(f"{where}: {key} is {hf.get(key)!r} but vocab.json has {piece} at {vocab[piece]}{note}")


def run_config(hf: dict[str, Any], generation: dict[str, Any], rows: int, share_vocab: bool = True) -> Config:
    """The run's config.yaml: the model section from config.json, decoding defaults from
    generation_config.json (see the module docstring), the other sections the defaults.
    `share_vocab` false: the encoder's and decoder's embeddings differ (one vocabulary)."""
    positions = int(hf.get("max_position_embeddings", 1024))
    decoder_layers = 0 if hf["decoder_layers"] == hf["encoder_layers"] else hf["decoder_layers"]  # 0: the same
    model = ModelConfig(
        n_layers=hf["encoder_layers"], decoder_layers=decoder_layers, d_model=hf["d_model"], d_ff=hf["encoder_ffn_dim"],
        n_heads=hf["encoder_attention_heads"], dropout=float(hf.get("dropout", 0.1)), norm_first=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), share_vocab=share_vocab, max_positions=positions,
        src_vocab_size=rows, tgt_vocab_size=rows, activation=ACTIVATIONS[hf.get("activation_function", "gelu")],
        positional_layout="halves",
    )
    max_length = int(generation.get("max_length") or 512)
    decode = DecodeConfig(beam=max(1, int(generation.get("num_beams") or 4)),
                          length_penalty=max(0.0, float(generation.get("length_penalty", 1.0))),
                          max_len_a=2.0, max_len_b=max(1, min(50, max_length - 2)))
    cfg = Config(model=model, data=DataConfig(max_len=min(250, positions - 1)), decode=decode)
    cfg.validate()
    return cfg


def load_marian_state(model: EncoderDecoder, state: dict[str, torch.Tensor], hf: dict[str, Any],
                      rows: list[int], folder: Path) -> None:
    """Copy every Marian weight (keys without the "model." prefix) into `model` (rows of
    the vocabulary reordered by `rows`: our row i holds Marian's row rows[i]); a missing or
    left-over weight is refused."""
    where = folder / "config.json"
    used: set[str] = set(EMBEDDING_KEYS) | {"lm_head.weight", "final_logits_bias"}

    def take(key: str) -> torch.Tensor:
        if key not in state:
            raise UserError(f"{folder}: the weights have no {key} (is it a MarianMTModel checkpoint?)")
        used.add(key)
        return state[key]

    index = torch.tensor(rows)
    source_embedding, target_embedding, output = (t[index] for t in embeddings(state, hf, folder))
    ours = {"src_embed.lut.weight": source_embedding, "tgt_embed.lut.weight": target_embedding,
            "generator.proj.weight": output}
    bias = state.get("final_logits_bias", torch.zeros(1, output.size(0)))  # missing: zeros, as Hugging Face loads it
    ours["generator.proj.bias"] = bias.reshape(-1)[index]
    for stack in ("encoder", "decoder"):
        check_positions(state, used, f"{stack}.embed_positions.weight", model, where)
        for i in range(hf[f"{stack}_layers"]):
            ours.update(_layer(take, f"{stack}.layers.{i}.", stack))
    load_mapped_weights(model, ours, set(state) - used, folder)


def embeddings(state: dict[str, torch.Tensor], hf: dict[str, Any], folder: Path) -> tuple[torch.Tensor, ...]:
    """The (V, d_model) source embedding, target embedding and output matrix (lm_head),
    as transformers ties them: with tie_word_embeddings (the default) all three are
    `shared`; without, lm_head is its own and the encoder and decoder read their
    embed_tokens (copies of `shared` in every OPUS-MT checkpoint; ours then too)."""
    found = {key: state[key] for key in EMBEDDING_KEYS if key in state}
    if not found:
        raise UserError(f"{folder}: the weights have no {' or '.join(EMBEDDING_KEYS)} (is it a MarianMTModel checkpoint?)")
    shared = found.get("shared.weight", next(iter(found.values())))
    if bool(hf.get("tie_word_embeddings", True)):
        chosen = (shared, shared, shared)
    elif "lm_head.weight" not in state:
        raise UserError(f"{folder}: tie_word_embeddings is false but the weights have no lm_head.weight")
    else:
        chosen = (found.get("encoder.embed_tokens.weight", shared), found.get("decoder.embed_tokens.weight", shared),
                  state["lm_head.weight"])
    shape = (hf["vocab_size"], hf["d_model"])
    if any(tuple(t.shape) != shape for t in chosen) or state.get("final_logits_bias", torch.zeros(shape[0])).numel() != shape[0]:
        raise UserError(f"{folder}: the embeddings or lm_head are not (vocab_size, d_model) = {shape} as config.json says")
    return chosen


def _layer(take, prefix: str, stack: str) -> dict[str, torch.Tensor]:
    """Our weights of one encoder or decoder layer from Marian's `prefix` keys."""
    out = {}
    for theirs, mine in ATTENTION.items():
        if stack == "encoder" and theirs == "encoder_attn":
            continue
        parts = [f"{prefix}{theirs}.{name}_proj" for name in ("q", "k", "v")]  # in_proj stacks W^Q, W^K, W^V
        out[f"{prefix}{mine}.in_proj.weight"] = torch.cat([take(f"{p}.weight") for p in parts])
        out[f"{prefix}{mine}.in_proj.bias"] = torch.cat([take(f"{p}.bias") for p in parts])
        for name in ("weight", "bias"):
            out[f"{prefix}{mine}.out_proj.{name}"] = take(f"{prefix}{theirs}.out_proj.{name}")
    for theirs, mine in (("fc1", "w_1"), ("fc2", "w_2")):
        for name in ("weight", "bias"):
            out[f"{prefix}feed_forward.{mine}.{name}"] = take(f"{prefix}{theirs}.{name}")
    for i, norm in enumerate(NORMS[stack]):  # the residual sub-layers in order
        for name in ("weight", "bias"):
            out[f"{prefix}sublayer.{i}.norm.{name}"] = take(f"{prefix}{norm}.{name}")
    return out


def check_positions(state: dict[str, torch.Tensor], used: set[str], key: str, model: EncoderDecoder,
                    where: Path) -> None:
    """A stored positional table (older checkpoints keep one) must be the sinusoid we
    compute (halves layout), up to fp16 rounding: learned positions are refused."""
    if key not in state:
        return
    used.add(key)
    stored, table = state[key], model.positional.pe
    if stored.shape != table.shape or (stored - table).abs().max() > 2e-3:
        raise UserError(f"{where}: {key} is not the sinusoidal table of Marian (learned positions are not supported)")


def provenance(source: str | Path, folder: Path, hf: dict[str, Any], generation: dict[str, Any],
               never: list[int]) -> tuple[dict[str, Any], str]:
    """imported.json (where the run came from, file digests, the id layout) and README.md."""
    files = [folder / name for name in ("config.json", "generation_config.json", *WEIGHT_FILES, *MARIAN_TOKENIZER_FILES)]
    digests = sha256_of(files)
    when = import_time()
    record = {
        "format": "huggingface-marian", "source": str(source), "folder": str(folder.resolve()), "imported": when,
        "sha256": digests,
        "marian_ids": {"eos": hf.get("eos_token_id"), "pad": hf.get("pad_token_id"),
                       "decoder_start": hf.get("decoder_start_token_id"), "vocab_size": hf.get("vocab_size")},
        "rows": ("ours = the folder's ids (our own layout: interop/joint.py)" if hf.get("decoder_start_token_id") == BOS_ID
                 and hf.get("pad_token_id") == PAD_ID else
                 "ours 0 (pad) <- Marian pad, 1 (unk) <- unk, 2 (bos) <- pad (decoder start), 3 (eos) <- eos, "
                 "4.. <- the other Marian ids in order"),
        "never_emitted": never, "renormalize_logits": bool(generation.get("renormalize_logits")),
    }
    return record, (f"Imported from {source} (Hugging Face Marian format) by `transformer-mt import marian` "
                    f"on {when}; see imported.json.\n")
