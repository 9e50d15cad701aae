"""Typed, validated configuration: YAML files, presets and dotted overrides.

A config has four sections, each a frozen dataclass: `model`, `data`, `train` and
`decode`. Each option is documented once, by the `help` of its field; docs/options.md is
generated from them (`python -m transformer_mt.common.config > docs/options.md`). Every mistake a
user can make in a YAML file or an override (an unknown key, a wrong type, an impossible
value) raises `ConfigError` at load time with a message that names the file or the override,
the key, and what is allowed, so a run never dies an hour in because of a typo.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # presets, shipped inside the package
TASK_NAMES = ("numbers", "copy", "number_lines")  # built-in toy corpora (the last a text): data/toy_corpora.py
CHECKPOINT_CHOICES = ("best", "last", "average")  # which weights of a run: runs.load_run_weights
PRECISIONS = ("auto", "bf16", "fp32")
ACTIVATIONS = ("relu", "swish", "gelu", "gelu_tanh")  # of the feed-forward network: model/layers.py
ARCHS = ("encoder_decoder", "decoder_only")  # the paper's translator, or a GPT-style language model
POSITIONAL_LAYOUTS = ("interleaved", "halves")  # of the sinusoidal encoding: model/embeddings.py
# sacreBLEU's tokenizations for BLEU: zh for Chinese, ja-mecab / ko-mecab for Japanese / Korean (sacreBLEU's
# ja / ko extras), flores101 / flores200 (sacreBLEU's sentencepiece models, downloaded once online)
BLEU_TOKENIZE = ("13a", "intl", "zh", "char", "none", "ja-mecab", "ko-mecab", "flores101", "flores200")
VOCAB_TYPES = ("bpe", "unigram", "word")  # sentencepiece model types: data/tokenizers/sentencepiece.py
POSITIONALS = ("sinusoidal", "learned")  # positions added to the embeddings: model/embeddings.py
EMBEDDING_INITS = ("xavier", "normal")  # the token embedding's initial values: model/transformer.py initialize
INITS = ("xavier", "pytorch", "notes")  # the initial weights: model/transformer.py init_weights
LAYER_NORMS = ("pytorch", "annotated")  # the layer normalisation: model/layers.py layer_norm
ENGINES = ("auto", "torch", "ctranslate2")  # what searches a run's translations: inference/translator.py
UNKNOWN_WORDS = ("unk", "pad")  # what a source word outside the vocabulary becomes: inference/translator.py
SCHEDULES = ("paper", "constant", "warmup_constant", "linear")  # learning-rate schedules: training/plan.py


class ConfigError(ValueError):
    """A user mistake in a configuration: the message says which key and what is allowed.
    (A ValueError like errors.UserError, so config stays a leaf.) `keys` are the dotted keys
    (or the section) the mistake is about, the one the message starts with first, so that
    load_config can blame the file or the override that set them."""

    def __init__(self, message: str, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keys = keys


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where PyYAML has it: faster
    """PyYAML's safe loader, but with YAML 1.2 floats: `3e-4` and `1E9` are numbers, not
    strings (YAML 1.1, which PyYAML follows, wants a dot: `3.0e-4`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def parse_yaml(text: str, name: str) -> Any:
    """YAML text -> Python values; a syntax error is one line naming `name`, line and column."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{name}{where}: not valid YAML ({err.problem})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{name}: not valid YAML ({str(err).splitlines()[0]})") from None


SAME_AS_DROPOUT = -1.0  # model.attention_dropout / model.activation_dropout: use model.dropout


def option(default: Any, help: str, *, shape: bool = True) -> Any:  # noqa: A002 (argparse's name)
    """A config field with its one description: `help` says what the option does and what its
    values mean (docs/options.md is generated from it); shape=False marks a model setting that
    the weights' shapes do not depend on (ModelConfig.shape_keys)."""
    return field(default=default, metadata={"help": help, "shape": shape})


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the Transformer (paper Table 3 names)."""

    n_layers: int = option(6, "N: identical layers in the encoder, and in the decoder unless model.decoder_layers "
                              "says otherwise (section 3.1); a decoder_only model's layers.")
    decoder_layers: int = option(0, "Layers in the decoder when it differs from model.n_layers: a deep encoder "
                                    "and a shallow decoder (Kasai et al., 2021; OPUS-MT's tiny models). "
                                    "0 = model.n_layers. A translator's only.")
    d_model: int = option(512, "d_model: the width of every sub-layer output and of the embeddings (section 3.1).")
    d_ff: int = option(2048, "d_ff: the inner width of the position-wise feed-forward network (section 3.3).")
    n_heads: int = option(8, "h: attention heads, each of width d_k = d_v = d_model / h (section 3.2.2); "
                             "must divide model.d_model.")
    dropout: float = option(0.1, "P_drop: dropout on every sub-layer's output and on the embedding sums "
                                 "(section 5.4); also on the attention weights and inside the feed-forward "
                                 "network where model.attention_dropout and model.activation_dropout are -1.",
                            shape=False)
    attention_dropout: float = option(SAME_AS_DROPOUT, "Dropout on the attention weights (not in the paper, "
                                                       "which names only residual dropout): -1 = model.dropout, "
                                                       "0 = none.", shape=False)
    activation_dropout: float = option(SAME_AS_DROPOUT, "Dropout between W_1 and W_2 of the feed-forward "
                                                        "network (not in the paper): -1 = model.dropout, "
                                                        "0 = none.", shape=False)
    norm_first: bool = option(True, "true: pre-norm, x + Sublayer(LayerNorm(x)), stabler on small batches and "
                                    "small models; false: the paper's post-norm, LayerNorm(x + Sublayer(x)) "
                                    "(section 3.1).")
    tie_embeddings: bool = option(True, "The output projection before the softmax shares the target "
                                        "embedding's weights (section 3.4).")
    share_vocab: bool = option(True, "true: one embedding for both languages (one joint vocabulary, section "
                                     "3.4); false: one per side (needed by data.joint_vocab: false).")
    max_positions: int = option(1024, "Size of the positional table: the longest sequence, eos or bos included, "
                                      "the model takes (a translator's at least data.max_len + 1).")
    src_vocab_size: int = option(0, "Source vocabulary size: 0 = from the tokenizer (a run's config.yaml "
                                    "records it).")
    tgt_vocab_size: int = option(0, "Target vocabulary size: 0 = from the tokenizer (a run's config.yaml "
                                    "records it).")
    activation: str = option("relu", "The feed-forward network's activation: relu (the paper, section 3.3), "
                                     "swish (SiLU, OPUS-MT's), gelu, or gelu_tanh (GPT-2's approximation).")
    positional_layout: str = option("interleaved", "Layout of the sinusoidal encoding: interleaved (sin and cos "
                                                   "alternate, section 3.5) or halves (all sines, then all "
                                                   "cosines: Marian's).")
    positional: str = option("sinusoidal", "Positions added to the embeddings: sinusoidal (section 3.5) or "
                                           "learned (a trained table, Table 3 row E; not exportable to "
                                           "Hugging Face).")
    arch: str = option("encoder_decoder", "encoder_decoder (the paper's translator) or decoder_only (a GPT-style "
                                          "language model of data.train_text).")
    scale_embeddings: bool = option(True, "Multiply the embeddings by sqrt(d_model) (section 3.4); GPT-2 does not.")
    init: str = option("xavier", "The initial weights: xavier (Xavier-uniform matrices, zero biases: "
                                 "transformer.initialize); pytorch (every module as PyTorch builds it: "
                                 "nn.Linear weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), token "
                                 "embeddings N(0, 1), which times sqrt(d_model) outweigh the positional "
                                 "encoding); or notes (as a make_model without the Xavier loop builds it: "
                                 "pytorch's draws, but one Linear deep-copied into W^Q, W^K, W^V and W^O, one attention into "
                                 "every attention and one feed-forward network into every layer, nothing "
                                 "re-drawn).", shape=False)
    layer_norm: str = option("pytorch", "The layer normalisation: pytorch (nn.LayerNorm, (x - mean) / sqrt(var + "
                                        "1e-5), the biased variance) or annotated (the Annotated Transformer's "
                                        "own, a_2 (x - mean) / (std + 1e-6) + b_2 with the unbiased std: what "
                                        "`import annotated` gives its checkpoints).")
    embedding_init: str = option("xavier", "The token embedding's initial values where model.init is xavier: "
                                           "xavier (std sqrt(2 / (V + d_model))) or normal (N(0, d_model^-0.5), "
                                           "as tensor2tensor and fairseq).", shape=False)
    file: str = option("", "FILE[:NAME]: train your own Transformer instead of this package's (train --model): "
                           "NAME (default make_model, else get_model, else a class Transformer) is called as "
                           "`transformer-mt check` calls it, at this section's n_layers, d_model, d_ff, n_heads and "
                           "dropout and the tokenizer's vocabulary sizes; the run keeps a copy of FILE (docs/your_model.md). "
                           "The other keys of this section then describe nothing: your code decides. \"\" = ours.")

    def validate(self) -> None:
        _require(self.arch in ARCHS, "model.arch", f"must be one of {', '.join(ARCHS)}")
        _require(not self.file or self.arch == "encoder_decoder", "model.file",
                 "trains a translator of yours (model.arch: encoder_decoder); a decoder_only model is this "
                 "package's", also=("model.arch",))
        _require(self.n_layers >= 1, "model.n_layers", "must be at least 1")
        _require(self.decoder_layers >= 0, "model.decoder_layers", "must be >= 0 (0 = model.n_layers)")
        _require(self.decoder_layers == 0 or self.arch == "encoder_decoder", "model.decoder_layers",
                 "sizes a translator's decoder only; a decoder_only model has model.n_layers layers (set 0)",
                 also=("model.arch",))
        _require(self.d_model >= 1, "model.d_model", "must be positive")
        _require(self.d_ff >= 1, "model.d_ff", "must be positive")
        _require(self.n_heads >= 1, "model.n_heads", "must be at least 1")
        _require(
            self.d_model % self.n_heads == 0,
            "model.d_model",
            f"must be divisible by model.n_heads ({self.d_model} % {self.n_heads} != 0)",
            also=("model.n_heads",),
        )
        _require(0.0 <= self.dropout < 1.0, "model.dropout", "must be in [0, 1)")
        for key in ("attention_dropout", "activation_dropout"):
            value = getattr(self, key)
            _require(value == SAME_AS_DROPOUT or 0.0 <= value < 1.0, f"model.{key}",
                     f"must be in [0, 1), or {SAME_AS_DROPOUT:g} for the same as model.dropout")
        _require(self.max_positions >= 2, "model.max_positions", "must be at least 2")
        _require(self.src_vocab_size >= 0, "model.src_vocab_size", "must be >= 0 (0 = from the tokenizer)")
        _require(self.tgt_vocab_size >= 0, "model.tgt_vocab_size", "must be >= 0 (0 = from the tokenizer)")
        _require(self.activation in ACTIVATIONS, "model.activation", f"must be one of {', '.join(ACTIVATIONS)}")
        _require(self.positional_layout in POSITIONAL_LAYOUTS, "model.positional_layout",
                 f"must be one of {', '.join(POSITIONAL_LAYOUTS)}")
        _require(self.positional in POSITIONALS, "model.positional", f"must be one of {', '.join(POSITIONALS)}")
        _require(self.embedding_init in EMBEDDING_INITS, "model.embedding_init",
                 f"must be one of {', '.join(EMBEDDING_INITS)}")
        _require(self.init in INITS, "model.init", f"must be one of {', '.join(INITS)}")
        _require(self.layer_norm in LAYER_NORMS, "model.layer_norm", f"must be one of {', '.join(LAYER_NORMS)}")
        _require(self.init == "xavier" or self.embedding_init == "xavier", "model.embedding_init",
                 f"{self.embedding_init} redraws the embedding of model.init: xavier only; model.init: "
                 f"{self.init} keeps PyTorch's N(0, 1) embedding (set model.embedding_init: xavier, or "
                 "model.init: xavier)", also=("model.init",))

    @property
    def n_decoder_layers(self) -> int:
        """Layers in the decoder: decoder_layers, or n_layers (the paper's N for both stacks)
        when it is 0."""
        return self.decoder_layers or self.n_layers

    @property
    def attention_p(self) -> float:
        """The dropout on attention weights: attention_dropout, or dropout when it is -1."""
        return self.dropout if self.attention_dropout == SAME_AS_DROPOUT else self.attention_dropout

    @property
    def activation_p(self) -> float:
        """The dropout between W_1 and W_2 of the feed-forward network: activation_dropout,
        or dropout when it is -1."""
        return self.dropout if self.activation_dropout == SAME_AS_DROPOUT else self.activation_dropout

    @classmethod
    def shape_keys(cls) -> tuple[str, ...]:
        """The settings that must match to load another model's weights: every field but
        those declared with shape=False (the dropouts and the embedding's initialization)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata["shape"])


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it is cut into subwords and batches."""

    task: str = option("", "A built-in corpus generated offline: numbers or copy (parallel text), or number_lines "
                           "(a text for a language model); \"\" = read the files named below.")
    task_size: int = option(20000, "Training lines (pairs) a built-in task generates; validation and test get 5% "
                                   "(100 to 1000) each.")
    train_src: str = option("", "Training source text, one sentence per line (.gz allowed).")
    train_tgt: str = option("", "Training target text: line N translates line N of data.train_src.")
    valid_src: str = option("", "Validation source text: checkpoint selection and early stopping.")
    valid_tgt: str = option("", "Validation target text.")
    test_src: str = option("", "Test source text: never trained or validated on; the run's config keeps it for "
                               "scoring the run later (and the server's example sentence falls back to it).")
    test_tgt: str = option("", "Test target text.")
    vocab_size: int = option(8000, "Sentencepiece vocabulary size (of each side's vocabulary when "
                                   "data.joint_vocab is false).")
    vocab_type: str = option("bpe", "bpe or unigram (sentencepiece subwords), or word (whitespace words, the rest "
                                    "`<unk>`).")
    vocab_sample: int = option(2_000_000, "Sentences the vocabulary is trained on, drawn with train.seed, when "
                                          "the corpus has more.")
    joint_vocab: bool = option(True, "One vocabulary for both sides; false: one per side (needs "
                                     "model.share_vocab: false).")
    train_pairs: int = option(0, "Train (and build the vocabulary) on the first N usable pairs of the training "
                                 "files only (a quick experiment on a subset); 0 = every pair.")
    max_tokens: int = option(4096, "Tokens per batch, padding included; a step sees data.max_tokens x "
                                   "train.accumulate x processes (the paper: ~25,000 a side, section 5.1).")
    batch_sentences: int = option(0, "Batches of exactly this many sentences in a random order, an epoch's last "
                                     "partial batch dropped (as most tutorials batch); 0 = batches of "
                                     "data.max_tokens (validation always uses data.max_tokens).")
    max_len: int = option(250, "Training pairs with a side longer than this many subwords are dropped.")
    max_len_ratio: float = option(3.0, "Training pairs whose longer side is more than this many times the "
                                       "shorter are dropped.")
    train_text: str = option("", "A language model's training text, one document or sentence per line "
                                 "(.gz allowed).")
    valid_text: str = option("", "A language model's validation text: loss, perplexity and bits per character; "
                                 "best-model selection.")
    block_size: int = option(128, "A language model's training block: tokens of context per sequence (at most "
                                  "model.max_positions).")
    bleu_tokenize: str = option("13a", "sacreBLEU's tokenization of the target language for BLEU, everywhere a run is "
                                       "scored (validation, evaluate, the model card, the doctor): 13a (WMT's "
                                       "default), intl, zh (Chinese), char (character n-grams: one-word outputs), "
                                       "none, ja-mecab, ko-mecab, flores101, flores200.")

    def validate(self) -> None:
        _require(self.block_size >= 1, "data.block_size", "must be at least 1 (tokens per training block)")
        _require(self.task in ("", *TASK_NAMES), "data.task", f"must be '' or one of {', '.join(TASK_NAMES)}")
        _require(self.task_size >= 10, "data.task_size", "must be at least 10")
        _require(self.vocab_size >= 8, "data.vocab_size", "must be at least 8")
        _require(self.vocab_type in VOCAB_TYPES, "data.vocab_type", f"must be one of {', '.join(VOCAB_TYPES)}")
        _require(self.vocab_sample >= 2, "data.vocab_sample", "must be at least 2 (sentences)")
        _require(self.train_pairs >= 0, "data.train_pairs", "must be >= 0 (0 = every training pair)")
        _require(self.max_tokens >= 1, "data.max_tokens", "must be positive")
        _require(self.batch_sentences >= 0, "data.batch_sentences", "must be >= 0 (0 = batches of data.max_tokens)")
        _require(self.max_len >= 1, "data.max_len", "must be positive")
        _require(self.max_len_ratio >= 1.0, "data.max_len_ratio", "must be >= 1")
        _require(self.bleu_tokenize in BLEU_TOKENIZE, "data.bleu_tokenize", f"must be one of {', '.join(BLEU_TOKENIZE)}")


@dataclass(frozen=True)
class TrainConfig:
    """The paper's training recipe (section 5) plus the knobs a small machine needs."""

    seed: int = option(1, "Seeds the initial weights, the batch order and dropout: the same seed, the same run.")
    schedule: str = option("paper", "The learning rate: paper (equation 3, times train.lr_scale), constant "
                                    "(train.lr at every step), warmup_constant (up to train.lr over train.warmup_steps, "
                                    "then train.lr), or linear (the paper's warmup, then down to ~0 at "
                                    "train.max_steps).")
    lr_scale: float = option(1.0, "Multiplies the paper's learning rate d_model^-0.5 x min(step^-0.5, step x "
                                  "warmup_steps^-1.5) (equation 3), and so its peak.")
    lr: float = option(1e-3, "The learning rate of train.schedule: constant and warmup_constant (the other "
                              "schedules do not use it).")
    warmup_steps: int = option(4000, "Steps of linear warmup to the peak learning rate (section 5.3: 4000).")
    adam_betas: tuple[float, float] = option((0.9, 0.98), "Adam's beta1 and beta2 (section 5.3).")
    adam_eps: float = option(1e-9, "Adam's epsilon (section 5.3).")
    weight_decay: float = option(0.0, "AdamW: each step, the matrices shrink by the learning rate x this (biases "
                                      "and LayerNorms do not); 0 = Adam, as in the paper.")
    label_smoothing: float = option(0.1, "epsilon_ls: the reference token's target is 1 - epsilon, the rest is "
                                         "spread over the other tokens (section 5.4).")
    max_steps: int = option(100000, "Optimizer steps to train (the paper: 100,000 for base, 300,000 for big).")
    max_seconds: float = option(0.0, "Stop after this many seconds of the run's wall clock, validation included "
                                      "(0 = no limit): a hard stop at whatever rate the schedule has then, where "
                                      "train.budget_minutes fits the whole plan to the time.")
    budget_minutes: float = option(0.0, "Train for this many minutes: the learning rate warms up for "
                                        "train.warmup_steps, then decays to ~0 at the end of the budget, with "
                                        "validation and averaged snapshots placed within it (a budget too short "
                                        "for the warmup is refused); 0 = no budget: train.max_steps steps of "
                                        "train.schedule.")
    accumulate: int = option(1, "Batches per optimizer step (gradient accumulation).")
    clip_norm: float = option(0.0, "Clip the global gradient norm to this (0 = no clipping).")
    precision: str = option("auto", "Training arithmetic: auto (bf16 autocast where the hardware runs bf16 fast: "
                                    "CUDA, CPUs with AVX-512 BF16 or AMX; else fp32), bf16 or fp32.")
    device: str = option("auto", "auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    log_every: int = option(50, "Steps between training log lines (metrics.jsonl, TensorBoard).")
    valid_every: int = option(1000, "Steps between validations and checkpoints.")
    valid_max_len_a: float = option(1.2, "Validation's outputs stop at valid_max_len_a x source length + "
                                         "train.valid_max_len_b tokens (translate and evaluate stop at "
                                         "decode.max_len_a/b's, the paper's source + 50): a half-trained model's "
                                         "outputs run to their limit, and validations decoded to source + 50 take "
                                         "many times longer, most of all for a model without a cache (a learner's, "
                                         "which decodes the whole prefix again at each step). fairseq's "
                                         "--eval-bleu-args take 1.2 and 10; no Multi30k reference is longer.")
    valid_max_len_b: int = option(10, "The b of validation's output length limit.")
    patience: int = option(0, "Stop after this many validations without improvement (0 = never stop early).")
    early_stop_metric: str = option("bleu", "The validation metric of a translation run that selects "
                                            "best.safetensors and stops early: bleu, chrf or loss (a language model "
                                            "always selects on its validation loss).")
    keep_last: int = option(5, "Step checkpoints kept (`transformer-mt average` averages them).")
    average_last: int = option(0, "Model snapshots, one at each validation point, averaged into "
                                  "average.safetensors at the end of training (0 = none); the average becomes "
                                  "best.safetensors only if it validates better.")
    init_from: str = option("", "A run whose weights and vocabulary this run starts from (fine-tuning; the model "
                                "sections must match); \"\" = from scratch.")
    init_checkpoint: str = option("best", "Which weights of train.init_from: best, last or average.")
    check_model: bool = option(True, "With model.file: run `transformer-mt check --quick` on your model as built "
                                     "before the first step; a model that sees the future, lets padding change "
                                     "real positions, ignores the source, leaves a parameter without gradient or "
                                     "gives no distribution over the target vocabulary stops the run; other "
                                     "findings are printed (train --no-check: false).")

    def validate(self) -> None:
        _require(self.schedule in SCHEDULES, "train.schedule", f"must be one of {', '.join(SCHEDULES)}")
        _require(self.lr_scale > 0, "train.lr_scale", "must be positive")
        _require(self.lr > 0, "train.lr", "must be positive")
        _require(self.init_checkpoint in CHECKPOINT_CHOICES, "train.init_checkpoint",
                 f"must be one of {', '.join(CHECKPOINT_CHOICES)}")
        _require(self.warmup_steps >= 1, "train.warmup_steps", "must be at least 1")
        _require(all(0 <= b < 1 for b in self.adam_betas), "train.adam_betas", "both must be in [0, 1)")
        _require(self.adam_eps > 0, "train.adam_eps", "must be positive")
        _require(0.0 <= self.weight_decay < 1.0, "train.weight_decay", "must be in [0, 1) (0 = Adam, no decay)")
        _require(0.0 <= self.label_smoothing < 1.0, "train.label_smoothing", "must be in [0, 1)")
        _require(self.max_steps >= 1, "train.max_steps", "must be at least 1")
        _require(self.max_seconds >= 0, "train.max_seconds", "must be >= 0 (0 = no time limit)")
        _require(self.budget_minutes >= 0, "train.budget_minutes", "must be >= 0 (0 = no budget: train max_steps)")
        _require(self.accumulate >= 1, "train.accumulate", "must be at least 1")
        _require(self.clip_norm >= 0, "train.clip_norm", "must be >= 0 (0 = no clipping)")
        _require(self.precision in PRECISIONS, "train.precision", "must be 'auto', 'bf16' or 'fp32'")
        _require(self.log_every >= 1, "train.log_every", "must be at least 1")
        _require(self.valid_every >= 1, "train.valid_every", "must be at least 1")
        _require(self.valid_max_len_a >= 0, "train.valid_max_len_a", "must be >= 0")
        _require(self.valid_max_len_b >= 1, "train.valid_max_len_b", "must be at least 1")
        _require(self.patience >= 0, "train.patience", "must be >= 0 (0 = no early stopping)")
        _require(self.early_stop_metric in ("bleu", "chrf", "loss"), "train.early_stop_metric",
                 "must be 'bleu', 'chrf' or 'loss'")
        _require(self.keep_last >= 1, "train.keep_last", "must be at least 1")
        _require(self.average_last >= 0, "train.average_last", "must be >= 0 (0 = no averaging)")


@dataclass(frozen=True)
class DecodeConfig:
    """How translations are searched for (section 6.1: beam 4, alpha 0.6, max source + 50)."""

    beam: int = option(4, "Beam size (1 = greedy search); the paper used 4 (section 6.1).")
    length_penalty: float = option(0.6, "alpha of the length penalty ((5 + length) / 6)^alpha that divides a "
                                        "hypothesis' log-probability (Wu et al., 2016); the paper used 0.6 "
                                        "(section 6.1).")
    max_len_a: float = option(1.0, "Outputs stop at max_len_a x source length + decode.max_len_b tokens (the "
                                   "paper: source length + 50, section 6.1); validation stops at "
                                   "train.valid_max_len_a/b's limit.")
    max_len_b: int = option(50, "The b of that output length limit.")
    batch_tokens: int = option(4096, "Source tokens per decoding batch.")
    precision: str = option("fp32", "Decoding arithmetic, the same for validation, translate and evaluate: fp32, "
                                    "bf16 (autocast), or auto (bf16 where the hardware runs it fast).")
    unknown_words: str = option("unk", "A source word outside the vocabulary, wherever a run translates "
                                       "(validation, translate, evaluate, the server): unk (the `<unk>` id, "
                                       "which the encoder reads like any word) or pad (the padding id, so "
                                       "the source mask hides it from every attention, as the Annotated "
                                       "Transformer's word-vocabulary scripts do). Training data is read as it is: a word vocabulary "
                                       "of every training word (data.vocab_type: word, a large enough "
                                       "data.vocab_size) has no unknown word there.")

    engine: str = option("auto", "What searches a run's translations (translate, evaluate, the server's "
                                 "translations; validation and the step-through views always use torch): torch, "
                                 "ctranslate2 (the run exported once into RUN/ctranslate2/, `pip install "
                                 "'transformer-mt[interop]'`; refused where it would not give torch's outputs), "
                                 "or auto (ctranslate2 where it is installed and gives torch's outputs token for "
                                 "token: float32 on the CPU, greedy search or length penalty 0; torch otherwise).")

    def validate(self) -> None:
        _require(self.beam >= 1, "decode.beam", "must be at least 1")
        _require(self.engine in ENGINES, "decode.engine", f"must be one of {', '.join(ENGINES)}")
        _require(self.length_penalty >= 0, "decode.length_penalty", "must be >= 0")
        _require(self.max_len_a >= 0, "decode.max_len_a", "must be >= 0")
        _require(self.max_len_b >= 1, "decode.max_len_b", "must be at least 1")
        _require(self.batch_tokens >= 1, "decode.batch_tokens", "must be positive")
        _require(self.precision in PRECISIONS, "decode.precision", "must be 'auto', 'bf16' or 'fp32'")
        _require(self.unknown_words in UNKNOWN_WORDS, "decode.unknown_words",
                 f"must be one of {', '.join(UNKNOWN_WORDS)}")


@dataclass(frozen=True)
class Config:
    """A whole experiment: model sizes, data, training recipe and decoding."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def validate(self) -> None:
        for section in (self.model, self.data, self.train, self.decode):
            section.validate()
        language_model = self.model.arch == "decoder_only"
        _require(language_model or self.data.max_len + 1 <= self.model.max_positions, "data.max_len",
                 f"training pairs of up to {self.data.max_len} subwords (+ eos or bos) need "
                 f"model.max_positions >= {self.data.max_len + 1}, got {self.model.max_positions}; "
                 "lower data.max_len or raise model.max_positions", also=("model.max_positions", "model.arch"))
        _require(self.data.joint_vocab or not self.model.share_vocab, "data.joint_vocab",
                 "false (separate source and target vocabularies) needs model.share_vocab: false",
                 also=("model.share_vocab",))
        _require(not self.data.task or (self.data.task == "number_lines") == language_model, "data.task",
                 "number_lines is a text for model.arch: decoder_only; numbers and copy are parallel corpora",
                 also=("model.arch",))
        if language_model:
            _require(self.data.block_size <= self.model.max_positions, "data.block_size",
                     f"must be <= model.max_positions ({self.model.max_positions})", also=("model.max_positions",))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["train"]["adam_betas"] = list(self.train.adam_betas)
        return out


def _require(ok: bool, key: str, what: str, also: tuple[str, ...] = ()) -> None:
    """Raise "key: what" unless `ok`; `also` names the other keys the check depends on."""
    if not ok:
        raise ConfigError(f"{key}: {what}", (key, *also))


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against the type `hint`; allow int -> float and list -> tuple."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} numbers, got {value!r}", (key,))
        return tuple(_coerce(v, a, key) for v, a in zip(value, args))
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
        if value is None:
            return ""
    name = getattr(hint, "__name__", str(hint))
    raise ConfigError(f"{key}: expected {name}, got {value!r} ({type(value).__name__})", (key,))


# Keys a former version had, with the default it wrote into every config.yaml: such a file
# still loads (the key is left out, as are any value in a run's own config.yaml); a config
# that sets another value is told what replaced it.
RETIRED = {"train.average_every": (0, "snapshots for averaging are kept at each validation point "
                                      "(train.valid_every)")}


def _build_section(cls: type, values: Any, section: str, drop_retired: bool = False) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{section}: expected a mapping of keys, got {values!r}", (section,))
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        dotted = f"{section}.{key}"
        if dotted in RETIRED:
            former_default, replaced_by = RETIRED[dotted]
            if drop_retired or value == former_default:
                continue
            raise ConfigError(f"{dotted}: no longer an option: {replaced_by}", (dotted,))
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{dotted}: unknown key{hint}; allowed: {', '.join(allowed)}", (dotted,))
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    return cls(**kwargs)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}


def config_from_dict(raw: Any, drop_retired: bool = False) -> Config:
    """Build and validate a Config from a nested dict (as read from YAML); `drop_retired`
    (a run's saved config) leaves RETIRED keys out instead of refusing them."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping with sections {', '.join(SECTIONS)}, got {raw!r}")
    for key in raw:
        if key not in SECTIONS:
            raise ConfigError(f"{key}: unknown section; allowed: {', '.join(SECTIONS)}", (str(key),))
    cfg = Config(**{name: _build_section(cls, raw.get(name), name, drop_retired) for name, cls in SECTIONS.items()})
    cfg.validate()
    return cfg


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A config file path, or the name of a preset in configs/ ('small', 'base', ...)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    preset = CONFIG_DIR / f"{name_or_path}.yaml"
    if preset.is_file():
        return preset
    raise ConfigError(f"{name_or_path}: no such config file or preset; presets: {', '.join(preset_names())}")


def preset_names() -> list[str]:
    """The presets that ship in configs/, by name."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def parse_override(text: str) -> tuple[list[str], Any]:
    """'--train.lr_scale=2' or 'train.lr_scale=2' -> (['train', 'lr_scale'], 2)."""
    body = text[2:] if text.startswith("--") else text
    if "=" not in body:
        raise ConfigError(f"{text}: overrides look like --section.key=value")
    dotted, value = body.split("=", 1)
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"{text}: overrides look like --section.key=value (e.g. --train.max_steps=100)")
    return parts, parse_yaml(value, text) if value else ""


def load_config(name_or_path: str | Path, overrides: typing.Sequence[str] = (), drop_retired: bool = False) -> Config:
    """Read a YAML config (or preset), apply dotted overrides, validate. A mistake is blamed
    on the override that set the key it is about, else on the file. `drop_retired`: a run's
    saved config, which may hold keys of a former version (RETIRED)."""
    path = resolve_config_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot be read ({err})") from None
    raw = parse_yaml(text, str(path))
    raw = raw if raw is not None else {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections {', '.join(SECTIONS)}")
    given = {}  # "section.key" -> the override that set it (the last one)
    for text in overrides:
        (section, key), value = parse_override(text)
        entry = raw.get(section)
        entry = {} if entry is None else entry
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: {section}: expected a mapping of keys, got {entry!r}")
        raw[section] = {**entry, key: value}
        given[f"{section}.{key}"] = text
    try:
        return config_from_dict(raw, drop_retired)
    except ConfigError as err:
        raise ConfigError(_blame(err, path, given), err.keys) from None


def _blame(err: ConfigError, path: Path, given: dict[str, str]) -> str:
    """The message of `err` led by what set its keys: the override of its own key
    ("--train.max_steps=-1: must be at least 1"), else an override of a key the check
    depends on or of its section ("--model.n_heads=5: model.d_model: must be divisible ..."),
    else the file ("tiny.yaml: model.d_model: ...")."""
    message = str(err)
    if err.keys and err.keys[0] in given:
        return f"{given[err.keys[0]]}: {message.removeprefix(err.keys[0] + ': ')}"
    for dotted, text in given.items():
        if any(dotted == key or dotted.startswith(key + ".") for key in err.keys):
            return f"{text}: {message}"
    return f"{path}: {message}"


def config_yaml(cfg: Config) -> str:
    """The resolved config as YAML text (what a run directory keeps as config.yaml)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def replace(cfg: Any, **changes: Any) -> Any:
    """dataclasses.replace, re-exported so callers need one import."""
    return dataclasses.replace(cfg, **changes)



REGENERATE = "python -m transformer_mt.common.config > docs/options.md"


def options_markdown() -> str:
    """The reference of every option, generated from the fields' help: docs/options.md."""
    lines = [
        f"Generated from src/transformer_mt/common/config.py by `{REGENERATE}`: edit the help there, not here.",
        "",
        "# Config options",
        "",
        "A config has four sections. A preset (src/transformer_mt/configs/) or your own YAML file sets only",
        "the keys that differ from these defaults; `--section.key=value` after a command overrides any key",
        "(`transformer-mt train small --run runs/x --train.max_steps=100`). Section numbers are those of",
        "the paper, Attention Is All You Need.",
    ]
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        lines += ["", f"## {name}", "", cls.__doc__.strip(), "",
                  "| key | type | default | what it does |", "| --- | --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            cells = (f"`{name}.{f.name}`", _type_name(hints[f.name]), f"`{_yaml_value(f.default)}`",
                     f.metadata["help"].replace("|", "\\|"))
            lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return f"list of {len(args)} {args[0].__name__}s"
    return {str: "text"}.get(hint, hint.__name__)


def _yaml_value(value: Any) -> str:
    """A default as it is written in YAML: true, "", [0.9, 0.98], 1e-09."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"[{', '.join(map(_yaml_value, value))}]"
    if value == "":
        return '""'
    return str(value)


if __name__ == "__main__":
    print(options_markdown(), end="")
