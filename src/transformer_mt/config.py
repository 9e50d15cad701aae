"""Typed, validated configuration: YAML files, presets and dotted overrides.

A config has four sections, each a frozen dataclass: `model`, `data`, `train` and
`decode`. Every mistake a user can make in a YAML file (an unknown key, a wrong type, an
impossible value) raises `ConfigError` at load time with a message that names the key and
says what is allowed, so a run never dies an hour in because of a typo.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # presets, shipped inside the package
TASK_NAMES = ("numbers", "copy", "number_lines")  # built-in toy corpora (the last a text): data/toy_corpora.py
CHECKPOINT_CHOICES = ("best", "last", "average")  # which weights of a run: runs.load_run_weights
PRECISIONS = ("auto", "bf16", "fp32")
ACTIVATIONS = ("relu", "swish", "gelu", "gelu_tanh")  # of the feed-forward network: model/layers.py
ARCHS = ("encoder_decoder", "decoder_only")  # the paper's translator, or a GPT-style language model
POSITIONAL_LAYOUTS = ("interleaved", "halves")  # of the sinusoidal encoding: model/embeddings.py
VOCAB_TYPES = ("bpe", "unigram", "word")  # sentencepiece model types: data/sentencepiece_tokenizer.py
POSITIONALS = ("sinusoidal", "learned")  # positions added to the embeddings: model/embeddings.py
EMBEDDING_INITS = ("xavier", "normal")  # the token embedding's initial values: model/transformer.py initialize
SCHEDULES = ("paper", "constant", "linear")  # learning-rate schedules: training/schedule.py
RENAMED_KEYS = {("model", "max_len"): "max_positions"}  # old name -> new name, still read

log = logging.getLogger("transformer_mt")


class ConfigError(ValueError):
    """A user mistake in a configuration: the message says which key and what is allowed.
    (A ValueError like errors.UserError, which subclasses it, so config stays a leaf.)"""


class _Loader(yaml.SafeLoader):
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


NOT_A_SHAPE = {"shape": False}  # field metadata: a model setting that the weights' shapes do not depend on
SAME_AS_DROPOUT = -1.0  # model.attention_dropout / model.activation_dropout: use model.dropout


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the Transformer (paper Table 3 names)."""

    n_layers: int = 6
    decoder_layers: int = 0
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    dropout: float = field(default=0.1, metadata=NOT_A_SHAPE)
    attention_dropout: float = field(default=SAME_AS_DROPOUT, metadata=NOT_A_SHAPE)
    activation_dropout: float = field(default=SAME_AS_DROPOUT, metadata=NOT_A_SHAPE)
    source_word_dropout: float = field(default=0.0, metadata=NOT_A_SHAPE)
    norm_first: bool = True
    tie_embeddings: bool = True
    share_vocab: bool = True
    max_positions: int = 1024
    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    activation: str = "relu"
    positional_layout: str = "interleaved"
    positional: str = "sinusoidal"
    arch: str = "encoder_decoder"
    scale_embeddings: bool = True
    embedding_init: str = field(default="xavier", metadata=NOT_A_SHAPE)

    def validate(self) -> None:
        _require(self.arch in ARCHS, "model.arch", f"must be one of {', '.join(ARCHS)}")
        _require(self.n_layers >= 1, "model.n_layers", "must be at least 1")
        _require(self.decoder_layers >= 0, "model.decoder_layers", "must be >= 0 (0 = model.n_layers)")
        _require(self.decoder_layers == 0 or self.arch == "encoder_decoder", "model.decoder_layers",
                 "sizes a translator's decoder only; a decoder_only model has model.n_layers layers (set 0)")
        _require(self.d_model >= 1, "model.d_model", "must be positive")
        _require(self.d_ff >= 1, "model.d_ff", "must be positive")
        _require(self.n_heads >= 1, "model.n_heads", "must be at least 1")
        _require(
            self.d_model % self.n_heads == 0,
            "model.d_model",
            f"must be divisible by model.n_heads ({self.d_model} % {self.n_heads} != 0)",
        )
        _require(0.0 <= self.dropout < 1.0, "model.dropout", "must be in [0, 1)")
        for key in ("attention_dropout", "activation_dropout"):
            value = getattr(self, key)
            _require(value == SAME_AS_DROPOUT or 0.0 <= value < 1.0, f"model.{key}",
                     f"must be in [0, 1), or {SAME_AS_DROPOUT:g} for the same as model.dropout")
        _require(0.0 <= self.source_word_dropout < 1.0, "model.source_word_dropout", "must be in [0, 1) (0 = none)")
        _require(self.source_word_dropout == 0.0 or self.arch == "encoder_decoder", "model.source_word_dropout",
                 "drops a translator's source words; a decoder_only model has no source (set 0)")
        _require(self.max_positions >= 2, "model.max_positions", "must be at least 2")
        _require(self.src_vocab_size >= 0, "model.src_vocab_size", "must be >= 0 (0 = from the tokenizer)")
        _require(self.tgt_vocab_size >= 0, "model.tgt_vocab_size", "must be >= 0 (0 = from the tokenizer)")
        _require(self.activation in ACTIVATIONS, "model.activation", f"must be one of {', '.join(ACTIVATIONS)}")
        _require(self.positional_layout in POSITIONAL_LAYOUTS, "model.positional_layout",
                 f"must be one of {', '.join(POSITIONAL_LAYOUTS)}")
        _require(self.positional in POSITIONALS, "model.positional", f"must be one of {', '.join(POSITIONALS)}")
        _require(self.embedding_init in EMBEDDING_INITS, "model.embedding_init",
                 f"must be one of {', '.join(EMBEDDING_INITS)}")

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
        those marked NOT_A_SHAPE (the dropouts)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("shape", True))


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it is cut into subwords and batches."""

    task: str = ""
    task_size: int = 20000
    train_src: str = ""
    train_tgt: str = ""
    valid_src: str = ""
    valid_tgt: str = ""
    test_src: str = ""
    test_tgt: str = ""
    vocab_size: int = 8000
    vocab_type: str = "bpe"
    vocab_sample: int = 2_000_000
    joint_vocab: bool = True
    train_pairs: int = 0
    max_tokens: int = 4096
    batch_sentences: int = 0
    max_len: int = 250
    max_len_ratio: float = 3.0
    train_text: str = ""
    valid_text: str = ""
    block_size: int = 128

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


@dataclass(frozen=True)
class TrainConfig:
    """The paper's training recipe (section 5) plus the knobs a small machine needs."""

    seed: int = 1
    schedule: str = "paper"
    lr_scale: float = 1.0
    lr: float = 1e-3
    warmup_steps: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    rdrop_alpha: float = 0.0
    max_steps: int = 100000
    max_seconds: float = 0.0
    budget_minutes: float = 0.0
    accumulate: int = 1
    clip_norm: float = 0.0
    precision: str = "auto"
    device: str = "auto"
    log_every: int = 50
    valid_every: int = 1000
    patience: int = 0
    early_stop_metric: str = "bleu"
    keep_last: int = 5
    average_last: int = 0
    average_every: int = 0
    init_from: str = ""
    init_checkpoint: str = "best"

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
        _require(self.rdrop_alpha >= 0, "train.rdrop_alpha", "must be >= 0 (0 = off: each sentence once)")
        _require(self.max_steps >= 1, "train.max_steps", "must be at least 1")
        _require(self.max_seconds >= 0, "train.max_seconds", "must be >= 0 (0 = no time limit)")
        _require(self.budget_minutes >= 0, "train.budget_minutes", "must be >= 0 (0 = no budget: train max_steps)")
        _require(self.accumulate >= 1, "train.accumulate", "must be at least 1")
        _require(self.clip_norm >= 0, "train.clip_norm", "must be >= 0 (0 = no clipping)")
        _require(self.precision in PRECISIONS, "train.precision", "must be 'auto', 'bf16' or 'fp32'")
        _require(self.log_every >= 1, "train.log_every", "must be at least 1")
        _require(self.valid_every >= 1, "train.valid_every", "must be at least 1")
        _require(self.patience >= 0, "train.patience", "must be >= 0 (0 = no early stopping)")
        _require(self.early_stop_metric in ("bleu", "chrf", "loss"), "train.early_stop_metric",
                 "must be 'bleu', 'chrf' or 'loss'")
        _require(self.keep_last >= 1, "train.keep_last", "must be at least 1")
        _require(self.average_last >= 0, "train.average_last", "must be >= 0 (0 = no averaging)")
        _require(self.average_every >= 0, "train.average_every", "must be >= 0 (0 = every train.valid_every steps)")


@dataclass(frozen=True)
class DecodeConfig:
    """How translations are searched for (section 6.1: beam 4, alpha 0.6, max source + 50)."""

    beam: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    batch_tokens: int = 4096
    precision: str = "fp32"

    def validate(self) -> None:
        _require(self.beam >= 1, "decode.beam", "must be at least 1")
        _require(self.length_penalty >= 0, "decode.length_penalty", "must be >= 0")
        _require(self.max_len_a >= 0, "decode.max_len_a", "must be >= 0")
        _require(self.max_len_b >= 1, "decode.max_len_b", "must be at least 1")
        _require(self.batch_tokens >= 1, "decode.batch_tokens", "must be positive")
        _require(self.precision in PRECISIONS, "decode.precision", "must be 'auto', 'bf16' or 'fp32'")


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
                 "lower data.max_len or raise model.max_positions")
        _require(self.data.joint_vocab or not self.model.share_vocab, "data.joint_vocab",
                 "false (separate source and target vocabularies) needs model.share_vocab: false")
        _require(not self.data.task or (self.data.task == "number_lines") == language_model, "data.task",
                 "number_lines is a text for model.arch: decoder_only; numbers and copy are parallel corpora")
        if language_model:
            _require(self.data.block_size <= self.model.max_positions, "data.block_size",
                     f"must be <= model.max_positions ({self.model.max_positions})")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["train"]["adam_betas"] = list(self.train.adam_betas)
        return out


def _require(ok: bool, key: str, what: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {what}")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against the type `hint`; allow int -> float and list -> tuple."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} numbers, got {value!r}")
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
    raise ConfigError(f"{key}: expected {name}, got {value!r} ({type(value).__name__})")


def _build_section(cls: type, values: Any, section: str) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{section}: expected a mapping of keys, got {values!r}")
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if (section, key) in RENAMED_KEYS:
            new = RENAMED_KEYS[section, key]
            log.warning("%s.%s is now called %s.%s; please rename it", section, key, section, new)
            if new in values:
                raise ConfigError(f"{section}.{key}: renamed to {section}.{new}, which is set too; keep one")
            key = new
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{section}.{key}: unknown key{hint}; allowed: {', '.join(allowed)}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    return cls(**kwargs)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}


def config_from_dict(raw: Any) -> Config:
    """Build and validate a Config from a nested dict (as read from YAML)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping with sections {', '.join(SECTIONS)}, got {raw!r}")
    for key in raw:
        if key not in SECTIONS:
            raise ConfigError(f"{key}: unknown section; allowed: {', '.join(SECTIONS)}")
    cfg = Config(**{name: _build_section(cls, raw.get(name), name) for name, cls in SECTIONS.items()})
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
    presets = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"{name_or_path}: no such config file or preset; presets: {', '.join(presets)}")


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


def load_config(name_or_path: str | Path, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML config (or preset), apply dotted overrides, validate."""
    path = resolve_config_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot be read ({err})") from None
    raw = parse_yaml(text, str(path))
    raw = raw if raw is not None else {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections {', '.join(SECTIONS)}")
    for text in overrides:
        (section, key), value = parse_override(text)
        entry = raw.setdefault(section, {})
        if not isinstance(entry, dict):
            raise ConfigError(f"{section}: expected a mapping of keys")
        entry[key] = value
    try:
        return config_from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def config_yaml(cfg: Config) -> str:
    """The resolved config as YAML text (what a run directory keeps as config.yaml)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def replace(cfg: Any, **changes: Any) -> Any:
    """dataclasses.replace, re-exported so callers need one import."""
    return dataclasses.replace(cfg, **changes)

