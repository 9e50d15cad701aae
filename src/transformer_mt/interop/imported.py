"""What every import writes, whatever the format: a run folder built whole or not at all.

An importer (interop/marian.py, gpt2.py, annotated.py) reads its source, builds the config and
the model, and hands them here with its tokenizer's files and where the run came from:

    write_imported_run(root, cfg, model, write_tokenizer, record, readme)

writes the tokenizer's files, config.yaml, best.safetensors, imported.json (`record`, with the
time of the import) and README.md in a temporary folder beside `root`, then renames it into place
(interop/folders.py), so a failed import leaves nothing."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from torch import nn

from transformer_mt.common.config import Config
from transformer_mt.common.files import atomic_write_text
from transformer_mt.interop.folders import write_folder
from transformer_mt.runs.directory import RunDir, save_weights


def import_time() -> str:
    """When an import ran, as imported.json and README.md say it (UTC, to the minute)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def sha256_of(paths: Iterable[Path]) -> dict[str, str]:
    """The SHA-256 of each file of `paths` that exists, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def write_imported_run(root: Path, cfg: Config, model: nn.Module, write_tokenizer: Callable[[Path], None],
                       record: dict[str, Any], readme: str) -> RunDir:
    """The run folder `root` of an import (the module docstring): `write_tokenizer(folder)` writes
    the tokenizer's files, `record` becomes imported.json and `readme` README.md."""
    def fill(tmp_root: Path) -> None:
        tmp = RunDir(tmp_root)
        write_tokenizer(tmp.root)
        tmp.write_config(cfg)
        save_weights(model, tmp.best)
        atomic_write_text(tmp.root / "imported.json", json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        atomic_write_text(tmp.root / "README.md", readme)

    write_folder(Path(root).resolve(), fill, "--run")
    return RunDir(Path(root))
