"""Import a Hugging Face GPT-2 model (GPT2LMHeadModel) as an ordinary run directory of the
decoder-only language model: `transformer-mt import gpt2 SOURCE --run RUN`.

SOURCE is a folder in the Hugging Face layout (config.json, model.safetensors or
pytorch_model.bin, vocab.json and merges.txt or tokenizer.json, optional
tokenizer_config.json) or a model name such as openai-community/gpt2, downloaded with
huggingface_hub (the `interop` extra). Nothing here needs `transformers`.

GPT-2 is the paper's decoder without cross-attention (model/language_model.py). What
differs from the paper's model, and how it is carried over (checked against transformers'
models/gpt2: modeling_gpt2.py, configuration_gpt2.py, tokenization_gpt2.py, and
activations.py):

- pre-norm: x + Sublayer(LayerNorm(x)) with ln_1 before attention and ln_2 before the
  MLP, and one more LayerNorm (ln_f) after the last block: model.norm_first true, ln_1 ->
  sublayer[0].norm, ln_2 -> sublayer[1].norm, ln_f -> decoder.norm. layer_norm_epsilon
  must be 1e-5, the eps of our nn.LayerNorm;
- learned absolute positions from 0 (wpe, n_positions rows) added to unscaled token
  embeddings (wte): model.positional learned, model.scale_embeddings false;
- the output layer lm_head has no bias and is wte itself (tie_word_embeddings, the
  default): model.tie_embeddings, with the generator's bias zero. Untied, lm_head.weight
  becomes the generator's own weight;
- Conv1D layers store their weight as (in, out), y = x W + b: transposed into nn.Linear's
  (out, in). c_attn's 3 d_model outputs are Q, K, V in that order (split by columns),
  so its transpose is our in_proj (W^Q, W^K, W^V stacked by rows); attn.c_proj -> out_proj,
  mlp.c_fc -> w_1, mlp.c_proj -> w_2;
- attention scores scaled by 1 / sqrt(d_k) (scale_attn_weights, which must be true;
  scale_attn_by_inverse_layer_idx, an extra 1 / (layer + 1), is refused).
  reorder_and_upcast_attn only changes the order and precision of that product in
  transformers' eager path (the default sdpa path ignores it): the same function, taken;
- the MLP's activation: gelu_new (the tanh approximation of GELU, GPT-2's own),
  gelu_pytorch_tanh and gelu_fast -> gelu_tanh; gelu -> gelu; relu; silu/swish -> swish;
- dropout: resid_pdrop after each sub-layer -> model.dropout, attn_pdrop on the attention
  weights -> model.attention_dropout, none inside the MLP -> model.activation_dropout 0.
  GPT-2's embd_pdrop (after embeddings + positions) is its own rate; ours is model.dropout
  there too, so a different embd_pdrop is not carried over (training only; logged);
- the vocabulary: GPT-2's byte-level BPE with its own ids, "<|endoftext|>" its only special
  token (data/tokenizers/gpt2.py), kept in the run as gpt2_tokenizer.json.

Refused with one line: another model_type (said before any file is looked for),
cross-attention (add_cross_attention), another layer_norm_epsilon or activation, the
attention scalings above, a vocabulary whose size differs from vocab_size."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import torch

from transformer_mt.common.config import Config, DataConfig, ModelConfig, TrainConfig
from transformer_mt.data.tokenizers.gpt2 import END_OF_TEXT, ByteLevelBPETokenizer, read_merges, read_vocab
from transformer_mt.common.errors import UserError
from transformer_mt.interop.imported import import_time, sha256_of, write_imported_run
from transformer_mt.interop.hub_folder import WEIGHT_FILES, load_mapped_weights, open_import, read_json, read_weights
from transformer_mt.model.language_model import DecoderOnly, build_language_model
from transformer_mt.runs.directory import RunDir

log = logging.getLogger("transformer_mt")

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json")
DOWNLOADED = ["config.json", "generation_config.json", *TOKENIZER_FILES]
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu": "gelu", "relu": "relu", "silu": "swish", "swish": "swish"}  # Hugging Face name -> ours
REFUSED_FLAGS = {  # config.json key: (the value we can represent, GPT2Config's default, what the other one is)
    "scale_attn_weights": (True, True, "attention scores not scaled by 1 / sqrt(d_k)"),
    "scale_attn_by_inverse_layer_idx": (False, False, "attention scores scaled by 1 / (layer + 1)"),
    "add_cross_attention": (False, False, "cross-attention in each block"),
}
IGNORED_BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask older checkpoints store


def import_gpt2(source: str | Path, run_dir: str | Path) -> RunDir:
    """Write the run directory `run_dir` from the GPT-2 model `source` (folder or name):
    built in a temporary folder beside it and renamed into place, so a failed import
    leaves nothing. An existing run (a non-empty folder) is refused."""
    root, folder, hf = open_import(source, run_dir, "GPT-2", "openai-community/gpt2", DOWNLOADED)
    check_model_type(hf, folder)
    check_config(hf, folder)
    tokenizer = load_source_tokenizer(folder)
    if len(tokenizer) != hf["vocab_size"]:
        raise UserError(f"{folder / 'config.json'}: vocab_size is {hf['vocab_size']} but the vocabulary has "
                        f"{len(tokenizer)} pieces (its added tokens included); a padded or cut vocabulary is "
                        "not supported")
    cfg = run_config(hf, folder)
    model = build_language_model(cfg.model)
    load_gpt2_state(model, read_weights(folder), hf, folder)

    record, readme = provenance(source, folder, hf, tokenizer)
    run = write_imported_run(root, cfg, model, lambda out: tokenizer.save(out / ByteLevelBPETokenizer.file_name),
                             record, readme)
    log.info("imported %s into %s: %d layers, d_model %d, %d heads, %d pieces, %d positions", source, run.root,
             cfg.model.n_layers, cfg.model.d_model, cfg.model.n_heads, len(tokenizer), cfg.model.max_positions)
    return run


def load_source_tokenizer(folder: Path) -> ByteLevelBPETokenizer:
    """GPT-2's tokenizer as transformers' GPT2Tokenizer builds it: the vocabulary and merges
    of tokenizer.json when there is one, else vocab.json and merges.txt; add_prefix_space
    from tokenizer_config.json (default false); added tokens beyond <|endoftext|> (a
    fine-tune's pad), each at its id."""
    settings = read_json(folder / "tokenizer_config.json")
    if (folder / "tokenizer.json").is_file():
        vocab, merges = tokenizer_json_model(folder / "tokenizer.json")
        where = folder / "tokenizer.json"
    else:
        vocab, merges = read_vocab(folder / "vocab.json"), read_merges(folder / "merges.txt")
        where = folder / "merges.txt"
    added = added_tokens(folder)
    try:
        tokenizer = ByteLevelBPETokenizer.from_vocab(vocab, merges, bool(settings.get("add_prefix_space", False)),
                                                     [(piece, special) for _, piece, special in added])
    except UserError:
        raise
    except Exception as err:  # the tokenizers library raises its own Exception for merges that do not fit
        raise UserError(f"{where}: the merges do not fit the vocabulary ({(str(err).splitlines() or [''])[0][:200]}); "
                        "every merge must join two pieces of the vocabulary into one that is in it too") from None
    for i, piece, _ in added:
        if tokenizer.piece_to_id(piece) != i:
            raise UserError(f"{folder}: added token {piece!r} has id {i}, but the vocabulary gives it "
                            f"{tokenizer.piece_to_id(piece)}; only added tokens after the vocabulary, in order, "
                            "are supported")
    return tokenizer


def tokenizer_json_model(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The BPE vocabulary and merges stored in a tokenizer.json."""
    model = read_json(path).get("model") or {}
    if model.get("type", "BPE") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise UserError(f"{path}: not a byte-level BPE tokenizer (model.type {model.get('type')!r})")
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    if not all(len(m) == 2 for m in merges):
        raise UserError(f"{path}: model.merges must be pairs of pieces")
    return model["vocab"], merges


def added_tokens(folder: Path) -> list[tuple[int, str, bool]]:
    """(id, piece, special) of the added tokens but <|endoftext|> (always there, special),
    in id order: tokenizer.json's added_tokens (what transformers 5 writes) and
    tokenizer_config.json's added_tokens_decoder (what transformers 4 writes)."""
    found: dict[int, tuple[str, bool]] = {}
    listed = read_json(folder / "tokenizer.json").get("added_tokens") or []
    decoder = read_json(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}
    entries = [(entry.get("id") if isinstance(entry, dict) else None, entry) for entry in listed]
    entries += [(int(key) if str(key).isdigit() else None, entry) for key, entry in decoder.items()]
    for i, entry in entries:
        piece = entry.get("content") if isinstance(entry, dict) else None
        if not isinstance(i, int) or not isinstance(piece, str):
            raise UserError(f"{folder}: an added token of tokenizer.json or tokenizer_config.json has no id or content")
        found[i] = (piece, bool(entry.get("special", True)))
    return sorted((i, piece, special) for i, (piece, special) in found.items() if piece != END_OF_TEXT)


# ---- the configuration -------------------------------------------------------------------
def check_model_type(hf: dict[str, Any], folder: Path) -> None:
    """A model of another architecture is refused first, before its files are looked for."""
    model_type = hf.get("model_type")
    if model_type != "gpt2":
        raise UserError(f"{folder / 'config.json'}: model_type is {model_type!r}, not a GPT-2 model "
                        "(GPT2LMHeadModel); `import gpt2` takes only GPT-2 models")


def check_config(hf: dict[str, Any], folder: Path) -> None:
    """Refuse, in one line, what our model cannot represent exactly."""
    where = folder / "config.json"
    for key, (needed, default, what) in REFUSED_FLAGS.items():
        if bool(hf.get(key, default)) != needed:
            raise UserError(f"{where}: {key} is {hf.get(key)}: {what} is not supported by this import")
    eps = hf.get("layer_norm_epsilon", 1e-5)
    if eps != 1e-5:
        raise UserError(f"{where}: layer_norm_epsilon is {eps}; only 1e-5 (the LayerNorm of this package) is supported")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise UserError(f"{where}: activation_function {activation!r} is not supported ({', '.join(ACTIVATIONS)})")
    for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        value = hf.get(key, 1024 if key == "n_positions" else None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{where}: {key} must be a positive integer, got {value!r}")
    if hf["n_embd"] % hf["n_head"]:
        raise UserError(f"{where}: n_embd ({hf['n_embd']}) is not divisible by n_head ({hf['n_head']})")


def run_config(hf: dict[str, Any], folder: Path) -> Config:
    """The run's config.yaml: the model section from config.json (see the module
    docstring), a language model's data defaults (no training text yet), early stopping
    on the validation loss (no BLEU for a language model), the rest the defaults."""
    positions = int(hf.get("n_positions", 1024))
    dropout, embedding_dropout = float(hf.get("resid_pdrop", 0.1)), float(hf.get("embd_pdrop", 0.1))
    if embedding_dropout != dropout:
        log.info("%s: embd_pdrop %g differs from resid_pdrop %g; the run uses model.dropout %g for both (training "
                 "only)", folder / "config.json", embedding_dropout, dropout, dropout)
    model = ModelConfig(
        arch="decoder_only", n_layers=hf["n_layer"], d_model=hf["n_embd"], n_heads=hf["n_head"],
        d_ff=int(hf.get("n_inner") or 4 * hf["n_embd"]),
        activation=ACTIVATIONS[hf.get("activation_function", "gelu_new")],
        positional="learned", scale_embeddings=False, norm_first=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), share_vocab=True, max_positions=positions,
        dropout=dropout, attention_dropout=float(hf.get("attn_pdrop", 0.1)), activation_dropout=0.0,
        src_vocab_size=hf["vocab_size"], tgt_vocab_size=hf["vocab_size"],
    )
    data = DataConfig(max_len=min(DataConfig.max_len, positions - 1), block_size=min(DataConfig.block_size, positions))
    cfg = Config(model=model, data=data, train=TrainConfig())
    cfg.validate()
    return cfg


# ---- the weights -------------------------------------------------------------------------
def load_gpt2_state(model: DecoderOnly, state: dict[str, torch.Tensor], hf: dict[str, Any], folder: Path) -> None:
    """Copy every GPT-2 weight (keys with or without the "transformer." prefix) into
    `model`; a missing, left-over or misshapen weight is refused in one line."""
    state = {key.removeprefix("transformer."): tensor for key, tensor in state.items()}
    used = {key for key in state if key.endswith(IGNORED_BUFFERS)}

    def take(key: str) -> torch.Tensor:
        if key not in state:
            raise UserError(f"{folder}: the weights have no {key} (is it a GPT2LMHeadModel checkpoint?)")
        used.add(key)
        return state[key]

    ours = {"tgt_embed.lut.weight": take("wte.weight"), "positional.embedding.weight": take("wpe.weight")}
    tied = bool(hf.get("tie_word_embeddings", True))
    if "lm_head.weight" in state and tied:
        used.add("lm_head.weight")  # transformers ties it to wte and ignores the stored copy
    ours["generator.proj.weight"] = ours["tgt_embed.lut.weight"] if tied else take("lm_head.weight")
    ours["generator.proj.bias"] = torch.zeros(hf["vocab_size"])  # lm_head has no bias
    for key in ("weight", "bias"):
        ours[f"decoder.norm.{key}"] = take(f"ln_f.{key}")
    for i in range(hf["n_layer"]):
        ours.update(block(take, f"h.{i}.", f"decoder.layers.{i}."))
    load_mapped_weights(model, ours, set(state) - used, folder)


def block(take: Callable[[str], torch.Tensor], theirs: str, mine: str) -> dict[str, torch.Tensor]:
    """Our weights of one decoder layer from GPT-2's block `theirs` (Conv1D weights are
    stored (in, out): transposed)."""
    linears = {"attn.c_attn": "self_attn.in_proj", "attn.c_proj": "self_attn.out_proj",
               "mlp.c_fc": "feed_forward.w_1", "mlp.c_proj": "feed_forward.w_2"}
    out = {}
    for conv, linear in linears.items():
        out[f"{mine}{linear}.weight"] = take(f"{theirs}{conv}.weight").t().contiguous()
        out[f"{mine}{linear}.bias"] = take(f"{theirs}{conv}.bias")
    for norm, sublayer in (("ln_1", 0), ("ln_2", 1)):
        for key in ("weight", "bias"):
            out[f"{mine}sublayer.{sublayer}.norm.{key}"] = take(f"{theirs}{norm}.{key}")
    return out


def provenance(source: str | Path, folder: Path, hf: dict[str, Any],
               tokenizer: ByteLevelBPETokenizer) -> tuple[dict[str, Any], str]:
    """imported.json (where the run came from, file digests, GPT-2's special ids) and README.md."""
    digests = sha256_of(folder / name for name in ("config.json", *WEIGHT_FILES, *TOKENIZER_FILES))
    when = import_time()
    record = {
        "format": "huggingface-gpt2", "source": str(source), "folder": str(folder.resolve()), "imported": when,
        "sha256": digests,
        "gpt2_ids": {"end_of_text": tokenizer.end_of_text_id, "bos": hf.get("bos_token_id"),
                     "eos": hf.get("eos_token_id"), "vocab_size": hf.get("vocab_size")},
        "rows": "ours = GPT-2's ids, row for row",
    }
    return record, (f"Imported from {source} (Hugging Face GPT-2 format) by `transformer-mt import gpt2` "
                    f"on {when}; see imported.json. `transformer-mt generate` continues a prompt from its own "
                    "tokens alone, as transformers' generate does (a run trained here reads it after end-of-text).\n")
