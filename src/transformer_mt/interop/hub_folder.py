"""A Hugging Face model folder as the importers read it (interop/marian.py, interop/gpt2.py):
a local folder, or a model name downloaded from the Hub; its JSON files and its weights,
each problem one UserError line that names the file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from transformer_mt.common.errors import UserError
from transformer_mt.interop.folders import check_new_run
from transformer_mt.runs.tensor_checks import refuse_non_finite_load, unreadable_reason

HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # name or namespace/name
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def open_import(source: str | Path, run_dir: str | Path, kind: str, example: str,
                downloaded: list[str]) -> tuple[Path, Path, dict[str, Any]]:
    """What every import starts with: refuse an existing run (a non-empty folder) and one
    that cannot be created (interop/folders.py), find the source folder (downloading a
    model name) and read its config.json. Returns (the run folder, the source folder, its
    config)."""
    run = check_new_run(run_dir)
    folder = resolve_source(source, kind, example, downloaded)
    return run, folder, read_json(folder / "config.json", required=True, kind=kind)


def resolve_source(source: str | Path, kind: str, example: str, downloaded: list[str]) -> Path:
    """A local folder as it is; anything else is a model name whose `downloaded` files (and
    weights) are fetched from the Hub. `kind` (Marian, GPT-2) and `example` (a model name)
    make the error messages."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise UserError(f"{source}: not a folder (give a folder in the Hugging Face {kind} layout or a model name)")
    if not HUB_NAME.match(str(source)):
        raise UserError(f"{source}: no such folder (nor a Hub model name such as {example})")
    return download(str(source), downloaded)


def download(name: str, downloaded: list[str]) -> Path:
    """The files `downloaded` and the weights (safetensors if the model has them) of the Hub model `name`."""
    how = (f"on a machine that is online run `hf download {name} --local-dir DIR` (or fetch "
           f"{', '.join(downloaded)} and model.safetensors or pytorch_model.bin from https://huggingface.co/{name}), "
           "then import DIR")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(f"{name}: no such folder, and downloading a model by name needs huggingface_hub "
                        f"(pip install 'transformer-mt[interop]'); or {how}") from None
    try:
        folder = Path(snapshot_download(repo_id=name, allow_patterns=downloaded + ["model.safetensors"]))
        if not (folder / "model.safetensors").is_file():
            folder = Path(snapshot_download(repo_id=name, allow_patterns=downloaded + ["pytorch_model.bin"]))
    except Exception as err:  # offline, unknown name, HTTP errors: all end here
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{name}: no such folder, and downloading it from the Hugging Face Hub failed "
                        f"({type(err).__name__}: {reason}); {how}") from None
    return folder


def read_json(path: Path, required: bool = False, kind: str = "") -> dict[str, Any]:
    """A JSON object file; {} if it is missing and not `required` (then the message asks
    whether the folder is a Hugging Face `kind` model folder)."""
    if not path.is_file():
        if required:
            raise UserError(f"{path}: missing; is {path.parent} a Hugging Face {kind} model folder?")
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"{path}: not readable JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(found, dict):
        raise UserError(f"{path}: expected a JSON object")
    return found


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (read with weights_only=True), as float32;
    a NaN or infinite weight is refused."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                state = load_file(str(path))
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # a damaged or foreign file
            raise UserError(f"{path}: not a readable weights file ({unreadable_reason(err)})") from None
        if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
            raise UserError(f"{path}: expected a dictionary of tensors")
        refuse_non_finite_load(state.items(), path, "fetch the model again")
        return {key: tensor.float() for key, tensor in state.items()}
    sharded = [p.name for p in folder.glob("*.index.json")]
    raise UserError(f"{folder}: no {' or '.join(WEIGHT_FILES)}" + (f" (sharded weights, {sharded[0]}, are not supported)"
                                                                   if sharded else ""))


def load_mapped_weights(model: torch.nn.Module, ours: dict[str, torch.Tensor], unused: set[str], folder: Path) -> None:
    """Load the weights an import mapped to our names (`ours`) into `model`. A weight of the
    folder the mapping did not use (`unused`), or a shape config.json does not imply, is one
    UserError line instead of load_state_dict's report."""
    if unused:
        names = sorted(unused)
        raise UserError(f"{folder}: weights this import does not know: {', '.join(names[:4])}"
                        + (f" and {len(names) - 4} more" if len(names) > 4 else ""))
    expected = model.state_dict()
    for key, tensor in ours.items():
        if key not in expected or expected[key].shape != tensor.shape:
            raise UserError(f"{folder}: {key} has shape {tuple(tensor.shape)}, config.json implies "
                            f"{tuple(expected[key].shape) if key in expected else 'none'}")
    model.load_state_dict(ours, strict=True)
