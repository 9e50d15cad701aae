"""The layers of design.md hold: inference never imports training, the server never
imports matplotlib, model code imports no data code, config imports nothing of the package."""

from __future__ import annotations

import subprocess
import sys

import pytest


def modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", ["transformer_mt.translator", "transformer_mt.server", "transformer_mt.runs"])
def test_inference_imports_no_training_code(module: str) -> None:
    loaded = modules_after_import(module)
    assert not {m for m in loaded if m.startswith("transformer_mt.training")}


def test_the_server_imports_no_plotting() -> None:
    loaded = modules_after_import("transformer_mt.server")
    assert "matplotlib" not in loaded and "transformer_mt.viz" not in loaded


def test_model_imports_no_data_code_and_config_nothing() -> None:
    assert not {m for m in modules_after_import("transformer_mt.model") if m.startswith("transformer_mt.data")}
    assert {m for m in modules_after_import("transformer_mt.config") if m.startswith("transformer_mt")} == {
        "transformer_mt", "transformer_mt.config"}
