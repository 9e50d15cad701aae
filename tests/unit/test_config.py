"""Configs: presets load, mistakes are caught at load time with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_mt.config import CONFIG_DIR, ConfigError, load_config


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
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(path)
    path.write_text("model:\n  n_heads: 3\n  d_model: 16\ndata:\n  task: numbers\n")
    with pytest.raises(ConfigError, match="bad.yaml: model.d_model"):
        load_config(path)


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match="no such config file or preset"):
        load_config("gigantic")
