"""Configs: presets load and hold only what differs from the defaults, every option is
documented once and listed in docs/options.md, and mistakes are caught at load time with the
file or override and the key named."""

from __future__ import annotations

import dataclasses
import runpy
import typing
import warnings
from pathlib import Path

import pytest
import yaml

from transformer_mt.common.config import (CONFIG_DIR, SECTIONS, TASK_NAMES, Config, ConfigError, config_yaml, load_config,
                                   options_markdown, parse_yaml)
from transformer_mt.data.toy_corpora import TOY_CORPORA

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads(name: str, tmp_path: Path) -> None:
    """A preset loads as the defaults with exactly the values its file sets (read here with
    plain yaml.safe_load: no key dropped, renamed or altered on the way, each of its field's
    type), and the config.yaml a run saves of it loads back to the same config."""
    raw = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8")) or {}
    cfg = load_config(name)
    assert set(raw) <= set(SECTIONS)
    for section, cls in SECTIONS.items():
        given, loaded, hints = raw.get(section) or {}, getattr(cfg, section), typing.get_type_hints(cls)
        assert set(given) <= {f.name for f in dataclasses.fields(cls)}, f"{name}.yaml: {section}: {sorted(given)}"
        for field in dataclasses.fields(cls):
            key, value = f"{section}.{field.name}", getattr(loaded, field.name)
            expected = given.get(field.name, field.default)
            if typing.get_origin(hints[field.name]) is tuple:
                assert isinstance(value, tuple) and value == tuple(expected), key
            else:
                assert type(value) is hints[field.name] and value == expected, f"{key}: {value!r} != {expected!r}"
    saved = tmp_path / "config.yaml"
    saved.write_text(config_yaml(cfg), encoding="utf-8")
    assert load_config(saved) == cfg


def test_paper_presets() -> None:
    base, big, small = load_config("base"), load_config("big"), load_config("small")
    assert (base.model.n_layers, base.model.d_model, base.model.d_ff, base.model.n_heads,
            base.model.dropout) == (6, 512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.d_ff, big.model.n_heads, big.model.dropout) == (1024, 4096, 16, 0.3)
    assert (small.model.n_layers, small.model.d_model, small.model.d_ff, small.model.n_heads) == (3, 256, 1024, 4)
    assert base.train.adam_betas == (0.9, 0.98) and base.train.label_smoothing == 0.1


@pytest.mark.parametrize("name", PRESETS)
def test_a_preset_holds_only_keys_that_differ_from_the_defaults(name: str) -> None:
    """The defaults and their documentation live in common/config.py; a preset says what it changes."""
    raw = parse_yaml((CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8"), name)
    defaults = Config().to_dict()
    restated = [f"{section}.{key}" for section, values in raw.items() for key, value in values.items()
                if value == defaults[section][key]]
    assert not restated, f"{name}.yaml restates defaults: {restated}"


def test_every_option_has_help_and_the_reference_page_is_generated_from_it() -> None:
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            assert len(field.metadata["help"].strip()) > 10, f"{section}.{field.name} has no help"
    page = options_markdown()
    keys = [f"`{section}.{field.name}`" for section, cls in SECTIONS.items() for field in dataclasses.fields(cls)]
    assert all(page.count(f"| {key} |") == 1 for key in keys)
    assert "| `train.adam_betas` | list of 2 floats | `[0.9, 0.98]` | Adam's beta1 and beta2 (section 5.3). |" in page
    assert "| `model.norm_first` | bool | `true` |" in page and "| `data.task` | text | `\"\"` |" in page
    assert (ROOT / "docs" / "options.md").read_text(encoding="utf-8") == page, \
        "docs/options.md is out of date: python -m transformer_mt.common.config > docs/options.md"


def test_python_m_transformer_mt_config_prints_the_reference_page(capsys: pytest.CaptureFixture) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # config is imported already: runpy runs it again
        runpy.run_module("transformer_mt.common.config", run_name="__main__")
    assert capsys.readouterr().out == options_markdown()


def test_overrides_apply() -> None:
    cfg = load_config("tiny", ["--train.max_steps=7", "--model.dropout=0.2", "--train.adam_betas=[0.8, 0.9]"])
    assert cfg.train.max_steps == 7 and cfg.model.dropout == 0.2 and cfg.train.adam_betas == (0.8, 0.9)


@pytest.mark.parametrize(
    "override,message",
    [
        ("--model.d_modle=3", "unknown key (did you mean 'd_model'?)"),
        ("--model.d_model=31", "must be divisible by model.n_heads (31 % 4 != 0)"),
        ("--model.dropout=1.0", "must be in [0, 1)"),
        ("--model.dropout=-0.1", "must be in [0, 1)"),
        ("--train.max_steps=many", "expected int, got 'many' (str)"),
        ("--train.precision=fp8", "must be 'auto', 'bf16' or 'fp32'"),
        ("--decode.beam=0", "must be at least 1"),
        ("--model.activation=tanh", "must be one of relu, swish, gelu"),
        ("--model.positional_layout=random", "must be one of interleaved, halves"),
        ("--model.positional=rotary", "must be one of sinusoidal, learned"),
        ("--model.embedding_init=uniform", "must be one of xavier, normal"),
        ("--data.train_pairs=-1", "must be >= 0 (0 = every training pair)"),
        ("--model.decoder_layers=-1", "must be >= 0 (0 = model.n_layers)"),
        ("--train.weight_decay=1.5", "must be in [0, 1) (0 = Adam, no decay)"),
        ("--data.bleu_tokenize=moses", "must be one of 13a, intl, zh, char"),
        ("--trian.seed=1", "trian: unknown section"),
    ],
)
def test_bad_values_name_the_override_and_say_what_is_allowed(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [override])
    assert str(err.value).startswith(f"{override}: {message}")


@pytest.mark.parametrize("preset,override,message", [
    ("tiny", "--train.budget_minutes=-1", "must be >= 0 (0 = no budget: train max_steps)"),  # out of range
    ("tiny", "--train.max_steps=-1", "must be at least 1"),
    ("tiny", "--data.vocab_size=-5", "must be at least 8"),
    ("tiny", "--train.budget_minutes=abc", "expected float, got 'abc' (str)"),  # wrong type
    ("tiny", "--train.max_stepz=5", "unknown key (did you mean 'max_steps'?); allowed: seed, "),  # unknown key
    ("tiny", "--model.n_heads=5", "model.d_model: must be divisible by model.n_heads (64 % 5 != 0)"),  # a key it checks
    ("tiny", "--model.max_positions=100", "data.max_len: training pairs of up to 250 subwords"),
    ("lm_tiny", "--model.arch=encoder_decoder", "data.max_len: training pairs of up to 250 subwords"),
])
def test_a_bad_override_is_blamed_on_the_override_not_on_the_preset(preset: str, override: str, message: str) -> None:
    """The preset file is fine, the override is not (issue 64): the message starts with the
    override as the user typed it, and names no file."""
    with pytest.raises(ConfigError) as err:
        load_config(preset, ["--train.seed=3", override, "--decode.beam=2"])
    assert str(err.value).startswith(f"{override}: {message}"), str(err.value)
    assert ".yaml" not in str(err.value) and "\n" not in str(err.value)


def test_a_mistake_of_the_file_still_names_the_file_when_overrides_are_given(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  n_heads: 3\ntrain:\n  max_steps: -2\n")
    with pytest.raises(ConfigError, match=r"^.*mine\.yaml: model\.d_model: must be divisible by model\.n_heads"):
        load_config(path, ["--train.max_steps=5", "--model.dropout=0.2"])
    with pytest.raises(ConfigError, match=r"^.*mine\.yaml: train\.max_steps: must be at least 1"):
        load_config(path, ["--model.n_heads=4"])
    path.write_text("model: 5\n")
    with pytest.raises(ConfigError, match=r"^.*mine\.yaml: model: expected a mapping of keys, got 5$"):
        load_config(path, ["--model.d_model=8"])
    path.write_text("model:\ndata:\n  task: copy\n")  # an empty section takes overrides
    assert load_config(path, ["--model.d_model=8", "--model.n_heads=2"]).model.d_model == 8


@pytest.mark.parametrize("line", ["model:\n  max_len: 300", "model:\n  source_word_dropout: 0.1",
                                  "train:\n  rdrop_alpha: 5"])
def test_removed_and_renamed_keys_are_unknown_keys(tmp_path: Path, line: str) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(line + "\n")
    dotted = ".".join(part.strip().split(":")[0] for part in line.splitlines())
    with pytest.raises(ConfigError, match=rf"old\.yaml: {dotted}: unknown key"):
        load_config(path)


def test_bad_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  n_heads: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml, line 3, column 1: not valid YAML \((did not find )?expected") as err:
        load_config(path)
    assert "\n" not in str(err.value) and "<unicode string>" not in str(err.value)
    path.write_text("model:\n  n_heads: 3\n  d_model: 16\ndata:\n  task: numbers\n")
    with pytest.raises(ConfigError, match="bad.yaml: model.d_model"):
        load_config(path)


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match="no such config file or preset"):
        load_config("gigantic")


@pytest.mark.parametrize("spelling,value", [("3e-4", 3e-4), ("3E-4", 3e-4), ("1e-9", 1e-9), ("2.5e+3", 2500.0),
                                            ("1.0e-9", 1e-9), (".5", 0.5), ("7", 7.0), ("+1e2", 100.0)])
def test_scientific_notation_is_a_number_on_the_command_line_and_in_files(
    tmp_path: Path, spelling: str, value: float
) -> None:
    assert load_config("tiny", [f"--train.lr_scale={spelling}"]).train.lr_scale == pytest.approx(value)
    assert load_config("tiny", [f"--train.adam_eps={spelling}"]).train.adam_eps == pytest.approx(value)
    path = tmp_path / "sci.yaml"
    path.write_text(f"train:\n  lr_scale: {spelling}\n  adam_betas: [0.9, 9.8e-1]\n")
    cfg = load_config(path)
    assert cfg.train.lr_scale == pytest.approx(value) and cfg.train.adam_betas == (0.9, 0.98)


def test_names_with_numbers_stay_strings() -> None:
    assert load_config("tiny", ["--data.train_src=corpus.1e5"]).data.train_src == "corpus.1e5"
    assert load_config("tiny", ["--data.train_src=e5"]).data.train_src == "e5"


def test_training_length_must_fit_the_positional_table() -> None:
    with pytest.raises(ConfigError, match=r"^--data.max_len=300: training pairs .* need model.max_positions >= 301, "
                                          r"got 300"):
        load_config("tiny", ["--model.max_positions=300", "--data.max_len=300"])
    assert load_config("tiny", ["--model.max_positions=301", "--data.max_len=300"]).data.max_len == 300


def test_presets_live_inside_the_package() -> None:
    import transformer_mt

    assert CONFIG_DIR.parent == Path(transformer_mt.__file__).parent
    assert {"tiny", "small", "base", "big", "demo"} <= {p.stem for p in CONFIG_DIR.glob("*.yaml")}


def test_task_names_are_the_built_in_tasks() -> None:
    from transformer_mt.data.toy_corpora import TOY_TEXTS

    assert set(TASK_NAMES) == set(TOY_CORPORA) | set(TOY_TEXTS)
    assert not set(TOY_CORPORA) & set(TOY_TEXTS)


def test_config_imports_nothing_of_the_package() -> None:
    source = (Path(__file__).resolve().parents[2] / "src" / "transformer_mt" / "common" / "config.py").read_text()
    assert "from transformer_mt" not in source and "import transformer_mt" not in source


@pytest.mark.parametrize("override,message", [
    ("train.schedule=cosine", "must be one of paper, constant"),
    ("train.lr=0", "must be positive"),
    ("train.average_last=-1", "must be >= 0"),
    ("train.average_every=4", "no longer an option: snapshots for averaging are kept at each validation point"),
])
def test_schedule_and_averaging_keys_are_checked(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [f"--{override}"])
    assert str(err.value).startswith(f"--{override}: {message}")


def test_shape_keys_are_the_model_fields_but_the_dropouts_and_the_embedding_init() -> None:
    from transformer_mt.common.config import ModelConfig

    keys = ModelConfig.shape_keys()
    assert not {"dropout", "attention_dropout", "activation_dropout", "embedding_init"} & set(keys)
    assert {"n_layers", "decoder_layers", "d_model", "d_ff", "n_heads", "max_positions", "norm_first", "tie_embeddings", "share_vocab",
            "src_vocab_size", "tgt_vocab_size", "activation", "positional_layout", "positional", "arch", "scale_embeddings", "layer_norm",
            "file"} == set(keys)


def test_decoder_layers_is_refused_for_a_language_model() -> None:
    """A decoder_only model has model.n_layers layers: a decoder_layers it would ignore is refused."""
    with pytest.raises(ConfigError) as err:
        load_config("lm_tiny", ["--model.decoder_layers=1"])
    assert str(err.value).startswith("--model.decoder_layers=1: sizes a translator's decoder only")
    assert load_config("tiny", ["--model.decoder_layers=1"]).model.n_decoder_layers == 1
    assert load_config("tiny").model.n_decoder_layers == load_config("tiny").model.n_layers == 2


def test_a_run_config_with_a_retired_key_loads_and_a_new_config_is_told_what_replaced_it(tmp_path: Path) -> None:
    """config.yaml of a run made when train.average_every existed: a run's own loads (the key
    left out); a config that sets it to its former default loads too; another value is refused."""
    from transformer_mt.common.config import config_yaml

    text = config_yaml(load_config("tiny")).replace("train:\n", "train:\n  average_every: 4\n", 1)
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert load_config(path, drop_retired=True) == load_config("tiny")
    with pytest.raises(ConfigError, match="train.average_every: no longer an option: snapshots for averaging"):
        load_config(path)
    path.write_text(text.replace("average_every: 4", "average_every: 0"))
    assert load_config(path) == load_config("tiny")
