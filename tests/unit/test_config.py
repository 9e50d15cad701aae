"""Configs: presets load, mistakes are caught at load time with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_mt.config import CONFIG_DIR, TASK_NAMES, ConfigError, load_config
from transformer_mt.data.toy_corpora import TOY_CORPORA


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_preset_loads(name: str) -> None:
    cfg = load_config(name)
    assert cfg.model.d_model % cfg.model.n_heads == 0


def test_paper_presets() -> None:
    base, big, small = load_config("base"), load_config("big"), load_config("small")
    assert (base.model.n_layers, base.model.d_model, base.model.d_ff, base.model.n_heads,
            base.model.dropout) == (6, 512, 2048, 8, 0.1)
    assert (big.model.d_model, big.model.d_ff, big.model.n_heads, big.model.dropout) == (1024, 4096, 16, 0.3)
    assert (small.model.n_layers, small.model.d_model, small.model.d_ff, small.model.n_heads) == (3, 256, 1024, 4)
    assert base.train.adam_betas == (0.9, 0.98) and base.train.label_smoothing == 0.1


def test_every_preset_key_is_commented() -> None:
    for path in CONFIG_DIR.glob("*.yaml"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("  ") and ":" in line:
                assert "#" in line, f"{path.name}:{number} has no comment"


def test_overrides_apply() -> None:
    cfg = load_config("tiny", ["--train.max_steps=7", "--model.dropout=0.2", "--train.adam_betas=[0.8, 0.9]"])
    assert cfg.train.max_steps == 7 and cfg.model.dropout == 0.2 and cfg.train.adam_betas == (0.8, 0.9)


@pytest.mark.parametrize(
    "override,message",
    [
        ("--model.d_modle=3", "model.d_modle: unknown key (did you mean 'd_model'?)"),
        ("--model.d_model=31", "model.d_model: must be divisible by model.n_heads"),
        ("--model.dropout=1.0", "model.dropout: must be in [0, 1)"),
        ("--model.dropout=-0.1", "model.dropout: must be in [0, 1)"),
        ("--train.max_steps=many", "train.max_steps: expected int"),
        ("--train.precision=fp8", "train.precision: must be 'auto', 'bf16' or 'fp32'"),
        ("--decode.beam=0", "decode.beam: must be at least 1"),
        ("--model.activation=tanh", "model.activation: must be one of relu, swish, gelu"),
        ("--model.positional_layout=random", "model.positional_layout: must be one of interleaved, halves"),
        ("--model.positional=rotary", "model.positional: must be one of sinusoidal, learned"),
        ("--model.embedding_init=uniform", "model.embedding_init: must be one of xavier, normal"),
        ("--data.train_pairs=-1", "data.train_pairs: must be >= 0 (0 = every training pair)"),
        ("--model.decoder_layers=-1", "model.decoder_layers: must be >= 0 (0 = model.n_layers)"),
        ("--train.weight_decay=1.5", "train.weight_decay: must be in [0, 1) (0 = Adam, no decay)"),
        ("--train.rdrop_alpha=-1", "train.rdrop_alpha: must be >= 0 (0 = off: each sentence once)"),
        ("--trian.seed=1", "trian: unknown section"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [override])
    assert message in str(err.value)


def test_bad_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  n_heads: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml, line 3, column 1: not valid YAML \(expected") as err:
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


def test_old_model_max_len_is_read_as_max_positions_with_a_warning(tmp_path: Path, caplog) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("model:\n  max_len: 300\n")
    with caplog.at_level("WARNING", logger="transformer_mt"):
        cfg = load_config(path)
    assert cfg.model.max_positions == 300
    assert "model.max_len is now called model.max_positions" in caplog.text
    with pytest.raises(ConfigError, match="renamed to model.max_positions, which is set too"):
        load_config("tiny", ["--model.max_len=300"])


def test_training_length_must_fit_the_positional_table() -> None:
    with pytest.raises(ConfigError, match=r"data.max_len: .* need model.max_positions >= 301, got 300"):
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
    source = (Path(__file__).resolve().parents[2] / "src" / "transformer_mt" / "config.py").read_text()
    assert "from transformer_mt" not in source and "import transformer_mt" not in source


@pytest.mark.parametrize("override,message", [
    ("train.schedule=cosine", "train.schedule: must be one of paper, constant"),
    ("train.lr=0", "train.lr: must be positive"),
    ("train.average_last=-1", "train.average_last: must be >= 0"),
    ("train.average_every=-2", "train.average_every: must be >= 0"),
])
def test_schedule_and_averaging_keys_are_checked(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("tiny", [f"--{override}"])


def test_shape_keys_are_the_model_fields_but_the_dropouts_and_the_embedding_init() -> None:
    from transformer_mt.config import ModelConfig

    keys = ModelConfig.shape_keys()
    assert not {"dropout", "attention_dropout", "activation_dropout", "source_word_dropout", "embedding_init"} & set(keys)
    assert {"n_layers", "decoder_layers", "d_model", "d_ff", "n_heads", "max_positions", "norm_first", "tie_embeddings", "share_vocab",
            "src_vocab_size", "tgt_vocab_size", "activation", "positional_layout", "positional", "arch", "scale_embeddings"} == set(keys)


def test_decoder_layers_is_refused_for_a_language_model() -> None:
    """A decoder_only model has model.n_layers layers: a decoder_layers it would ignore is refused."""
    with pytest.raises(ConfigError) as err:
        load_config("lm_tiny", ["--model.decoder_layers=1"])
    assert "model.decoder_layers: sizes a translator's decoder only" in str(err.value)
    assert load_config("tiny", ["--model.decoder_layers=1"]).model.n_decoder_layers == 1
    assert load_config("tiny").model.n_decoder_layers == load_config("tiny").model.n_layers == 2
