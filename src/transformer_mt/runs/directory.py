"""The run directory: one place that knows its files and reads and writes them (see
ARCHITECTURE.md). Training writes a run, translation, the server and the plots read it.

    runs/NAME/config.yaml            the resolved config
    runs/NAME/tokenizer.model        sentencepiece model (+ .vocab); an imported Marian run has
                                     vocab.json, source.spm and target.spm instead, an imported
                                     GPT-2 run gpt2_tokenizer.json, a run with
                                     data.joint_vocab: false source.model and target.model
    runs/NAME/checkpoints/step_N.pt  full training state
    runs/NAME/snapshots/step_N.safetensors  model-only weights kept for averaging (train.average_last)
    runs/NAME/best.safetensors       weights of the best validation checkpoint
    runs/NAME/average.safetensors    the average of the last snapshots (or checkpoints)
    runs/NAME/metrics.jsonl          one JSON object per log / validation event
    runs/NAME/tensorboard/           event files
    runs/NAME/data/                  the corpus of a built-in task (numbers, copy)
    runs/NAME/prepared/              the training data encoded once, memory-mapped (data/prepare.py)
    runs/NAME/model.py, model.json   a run of the learner's own model (model.file): a copy of their
                                     file, and where it came from, its sha256 and its mask encoding;
    runs/NAME/model_imports/         copies of the other files of theirs it imports

Every write goes through `files.atomic_open` / `atomic_path`: a process killed mid-save
leaves the old files intact. Loading uses `torch.load(weights_only=True)` and
safetensors, so opening a checkpoint never executes code."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from transformer_mt.common.config import CHECKPOINT_CHOICES, Config, config_yaml, load_config
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.data.tokenizers.registry import find_tokenizer, load_tokenizer, tokenizer_files
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_open, atomic_path, atomic_write_text
from transformer_mt.learner.loading import load_file
from transformer_mt.learner.model import LearnerSource, build_learner, sizes_for
from transformer_mt.model.language_model import build_any_model
from transformer_mt.runs.tensor_checks import refuse_non_finite_load, refuse_non_finite_save, unreadable_reason

log = logging.getLogger("transformer_mt")

STEP_FILE = re.compile(r"^step_(\d+)\.pt$")
SNAPSHOT_FILE = re.compile(r"^step_(\d+)\.safetensors$")


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def tokenizer(self) -> Path:
        """Where the run's own vocabulary is trained: tokenizer.model."""
        return self.root / SentencePieceTokenizer.file_name

    @property
    def tokenizer_file(self) -> Path:
        """The file that names the run's vocabulary: tokenizer.model, the vocab.json of an
        imported Marian run or the gpt2_tokenizer.json of an imported GPT-2 run
        (data/tokenizers/registry.py); tokenizer.model if none exists yet."""
        return find_tokenizer(self.root)

    def tokenizer_files(self) -> list[Path]:
        """The vocabulary's files that exist (what a fine-tuned run copies)."""
        return [path for path in tokenizer_files(self.tokenizer_file) if path.is_file()]

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def snapshots(self) -> Path:
        return self.root / "snapshots"

    @property
    def best(self) -> Path:
        return self.root / "best.safetensors"

    @property
    def average(self) -> Path:
        return self.root / "average.safetensors"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def prepared(self) -> Path:
        return self.root / "prepared"

    @property
    def learner_file(self) -> Path:
        """The copy of the learner's model file that a run of their model keeps."""
        return self.root / "model.py"

    @property
    def learner_imports(self) -> Path:
        """Copies of the other files of theirs that their file imports (model_imports/)."""
        return self.root / "model_imports"

    @property
    def learner_record(self) -> Path:
        """Where that copy came from, its sha256, builder name, mask encoding, the files of theirs it
    imports and the longest sentence their model runs on (JSON)."""
        return self.root / "model.json"

    def require(self) -> "RunDir":
        """Check the files every consumer of a trained run needs."""
        if not self.root.is_dir():
            raise UserError(f"{self.root}: no such run directory")
        for path in (self.config, self.tokenizer_file):
            if not path.is_file():
                raise UserError(f"{path}: missing; is {self.root} a run directory written by `transformer-mt train`?")
        return self

    def check_writable(self) -> None:
        """A run directory can be created (or already is one) at `root`."""
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"{self.root}: exists and is not a folder; choose another --run")

    def read_config(self) -> Config:
        return load_config(self.config, drop_retired=True)

    def write_config(self, cfg: Config) -> None:
        atomic_write_text(self.config, config_yaml(cfg))

    def read_tokenizer(self) -> Tokenizer:
        """The run's tokenizer: a SentencePieceTokenizer, or for an imported run a MarianTokenizer
        (Marian) or ByteLevelBPETokenizer (GPT-2)."""
        return load_tokenizer(self.tokenizer_file)

    def text_files(self, splits: tuple[str, ...]) -> tuple[Path, Path]:
        """The (source, target) files of the first of `splits` found: the run's generated
        task (data/SPLIT.src) or the config's data.SPLIT_src / SPLIT_tgt."""
        data = self.read_config().data
        candidates = []
        for split in splits:
            candidates.append((self.data / f"{split}.src", self.data / f"{split}.tgt"))
            if getattr(data, f"{split}_src") and getattr(data, f"{split}_tgt"):
                candidates.append((Path(getattr(data, f"{split}_src")), Path(getattr(data, f"{split}_tgt"))))
        for src, tgt in candidates:
            if src.is_file() and tgt.is_file():
                return src, tgt
        raise UserError(f"{self.root}: no {' or '.join(splits)} text found (looked for "
                        f"{', '.join(str(src) for src, _ in candidates)}; relative paths of config.yaml "
                        "count from the current folder)")


# ---- checkpoints ------------------------------------------------------------------------
def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """torch.save of the full training state, atomically; never with a NaN or infinite weight."""
    refuse_non_finite_save(state.get("model", {}).items(), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as handle:
        torch.save(state, handle)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`, without unpickling code; a NaN or
    infinite model weight makes it as unreadable as a damaged file."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except Exception as err:  # any unreadable or foreign file
        raise UserError(f"{path}: not a readable checkpoint ({unreadable_reason(err)})") from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        refuse_non_finite_load(state["model"].items(), path)
    return state


def _step_files(directory: str | Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    """(step, path) of the files of `directory` named by `pattern`, oldest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := pattern.match(p.name)))


def list_checkpoints(directory: str | Path) -> list[Path]:
    """checkpoints/step_N.pt files, oldest step first."""
    return [p for _, p in _step_files(directory, STEP_FILE)]


def list_snapshots(directory: str | Path) -> list[Path]:
    """snapshots/step_N.safetensors files, oldest step first."""
    return [p for _, p in _step_files(directory, SNAPSHOT_FILE)]


def latest_checkpoint(directory: str | Path, resuming: bool = True) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that can be read, and its state. A damaged newer one (a disk
    that filled up, a copy cut short) is skipped with one warning that names it and what
    is used instead: an older checkpoint or, `resuming`, none (training starts from step 0;
    not resuming, no readable checkpoint at all is a UserError)."""
    damaged: list[str] = []
    found = None
    for path in reversed(list_checkpoints(directory)):
        try:
            found = path, load_checkpoint(path)
            break
        except UserError as err:
            damaged.append(str(err))
    if damaged and not found and not resuming:
        raise UserError(f"{damaged[0]}; no older checkpoint can be read")
    if damaged:
        used = f"using {found[0].name}, the newest readable one" if found else "training starts from step 0"
        log.warning("%s; %s (delete the damaged file to silence this)", "; ".join(damaged), used)
    return found


def prune_checkpoints(directory: str | Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints."""
    for path in list_checkpoints(directory)[:-keep_last]:
        path.unlink(missing_ok=True)


def load_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor], path: Path, config: Path) -> None:
    """`model.load_state_dict(state)`; a mismatch (config.yaml edited after training
    started) is a one-line UserError naming both files."""
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError) as err:
        raise UserError(f"{path}: does not match the model in {config} ({_first_line(err)}); "
                        "restore the config.yaml the run was trained with, or start a new run") from None


def save_snapshot(model: torch.nn.Module, directory: Path, step: int, keep_last: int) -> Path:
    """The model's weights as snapshots/step_N.safetensors; only the newest `keep_last` stay."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step}.safetensors"
    save_weights(model, path)
    for old in list_snapshots(directory)[:-keep_last]:
        old.unlink(missing_ok=True)
    return path


def drop_snapshots_after(directory: Path, step: int) -> None:
    """Delete the snapshots of steps after `step` (written by a run that then crashed)."""
    for later, path in _step_files(directory, SNAPSHOT_FILE):
        if later > step:
            path.unlink(missing_ok=True)


# ---- weights ----------------------------------------------------------------------------
def save_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Model weights only, as safetensors (tied weights stored once), atomically; never
    a NaN or infinite weight (the file already there stays)."""
    refuse_non_finite_save(model.state_dict().items(), Path(path))
    with atomic_path(path) as tmp:
        save_model(model, str(tmp))


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    """Load safetensors weights into `model`; a damaged file or a shape mismatch is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such weights file")
    try:
        load_model(model, str(path), device=str(next(model.parameters()).device))
    except (SafetensorError, OSError) as err:
        raise UserError(f"{path}: damaged or not a safetensors file ({_first_line(err)}); delete it "
                        "(or pick other weights with --checkpoint last)") from None
    except (RuntimeError, ValueError) as err:
        raise UserError(f"{path}: does not match the model in config.yaml ({_first_line(err)})") from None
    refuse_non_finite_load(model.state_dict().items(), path, "delete it, or pick other weights with --checkpoint")


def load_run_weights(model: torch.nn.Module, run: RunDir, checkpoint: str = "best") -> Path:
    """Load weights from a run: best.safetensors, average.safetensors or the last
    readable step checkpoint; `best` falls back to the last checkpoint when none was
    selected yet. Returns the file the weights came from."""
    if checkpoint not in CHECKPOINT_CHOICES:
        raise UserError(f"checkpoint must be one of {', '.join(CHECKPOINT_CHOICES)}, got {checkpoint!r}")
    if checkpoint in ("best", "average"):
        path = run.best if checkpoint == "best" else run.average
        if path.is_file():
            load_weights(model, path)
            return path
        if checkpoint == "average":
            raise UserError(f"{path}: missing; create it with `transformer-mt average {run.root} --last N`")
    others = " or ".join(f"--checkpoint {name}" for name, path in (("best", run.best), ("average", run.average))
                         if name != checkpoint and path.is_file())
    try:
        found = latest_checkpoint(run.checkpoints, resuming=False)
    except UserError as err:
        raise UserError(f"{err}; " + (f"use {others}" if others else "delete it and resume training")) from None
    if found is None:
        missing = f" (and no {run.best.name})" if checkpoint == "best" else ""
        raise UserError(f"{run.checkpoints}: no readable step_N.pt checkpoint{missing}; "
                        + (f"use {others}" if others else "train the run first"))
    path, state = found
    if checkpoint == "best":
        log.info("%s: missing (no validation has selected weights yet); using %s, the newest step checkpoint",
                 run.best, path)
    load_model_state(model, state["model"], path, run.config)
    return path


ARCH_COMMANDS = {  # what a run of each model.arch is for, for the one-line refusal of the other commands
    "encoder_decoder": "a translation model (model.arch: encoder_decoder); use `transformer-mt translate`, "
                       "or `evaluate --src/--ref`",
    "decoder_only": "a language model (model.arch: decoder_only); use `transformer-mt generate`, "
                    "or `evaluate --text` for its perplexity",
}


def load_run_model(run: RunDir, checkpoint: str = "best",
                   arch: str | None = None) -> tuple[Config, Tokenizer, torch.nn.Module]:
    """Config, tokenizer and model with weights of a trained run: the model model.arch
    names (an EncoderDecoder, or a decoder-only DecoderOnly). With `arch`, a run of the
    other kind is refused in one line that says which command serves it."""
    run.require()
    cfg = run.read_config()
    if arch is not None and cfg.model.arch != arch:
        raise UserError(f"{run.root}: is {ARCH_COMMANDS[cfg.model.arch]}")
    tokenizer = run.read_tokenizer()
    if len(tokenizer) != cfg.model.tgt_vocab_size:
        raise UserError(f"{run.tokenizer_file}: has {len(tokenizer)} subwords but {run.config} says "
                        f"model.tgt_vocab_size={cfg.model.tgt_vocab_size}")
    model = build_run_model(run, cfg)
    load_run_weights(model, run, checkpoint)
    return cfg, tokenizer, model


# ---- the learner's own model ----------------------------------------------------------
def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def keep_learner_file(run: RunDir, source: LearnerSource, original: Path, imports: dict[Path, Path]) -> None:
    """Copy the learner's file into the run with its record, atomically, and the files of theirs
    it imports (`imports`: relative path -> file) into model_imports/, sub-folders kept: the run
    then loads with the originals moved, edited or deleted. `original`: the file they named."""
    for relative, path in imports.items():
        (run.learner_imports / relative).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(run.learner_imports / relative) as tmp:
            tmp.write_bytes(path.read_bytes())
    data = source.path.read_bytes()
    with atomic_path(run.learner_file) as tmp:
        tmp.write_bytes(data)
    record = {"file": str(original.resolve()), "name": source.name, "sha256": sha256_of(data),
              "encoding": source.encoding, "imports": [str(relative) for relative in imports],
              "longest": source.longest}
    atomic_write_text(run.learner_record, json.dumps(record, indent=2) + "\n")


_EDITED_SAID: set[Path] = set()


def learner_source(run: RunDir) -> LearnerSource:
    """The run's copy of the learner's file as a LearnerSource; a copy edited since training
    is said in one line (once a process) and loaded as it is."""
    try:
        record = json.loads(run.learner_record.read_text(encoding="utf-8"))
        expected, original, name, encoding = record["sha256"], Path(record["file"]), record["name"], record["encoding"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{run.learner_record}: missing or not the record `train --model` writes; the run cannot "
                        "tell which model it trained") from None
    if not run.learner_file.is_file():
        raise UserError(f"{run.learner_file}: missing; the run keeps a copy of the model file it was trained with "
                        f"({original}, sha256 {expected[:12]}): put that file back as {run.learner_file}")
    if sha256_of(run.learner_file.read_bytes()) != expected and run.learner_file not in _EDITED_SAID:
        _EDITED_SAID.add(run.learner_file)
        log.warning("%s: edited since the run was trained (its sha256 is no longer %s): loading it as it is now",
                    run.learner_file, expected[:12])
    return LearnerSource(run.learner_file, name, encoding,
                         run.learner_imports if record.get("imports") else original.parent, record.get("longest"))


def require_ours(run: RunDir, what: str) -> None:
    """One line where `what` maps this package's model and the run trained the learner's."""
    cfg = run.require().read_config()
    if cfg.model.file:
        raise UserError(f"{run.root}: trained your own model ({cfg.model.file}); {what} reads the layers of this "
                        "package's model by name and cannot know those of your code (translate, evaluate, serve and "
                        "doctor read your run)")


def build_run_model(run: RunDir, cfg: Config, seed: int = 0) -> torch.nn.Module:
    """The model of a run's config, its weights as built: ours (model.arch), or the learner's
    from the run's copy of their file (model.file)."""
    if not cfg.model.file:
        return build_any_model(cfg.model)
    source = learner_source(run)
    return build_learner(load_file(source.path, beside=source.beside), source, sizes_for(cfg.model), seed)


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of model state dicts (the paper averaged the last 5 checkpoints for base, 20 for big)."""
    if not states:
        raise ValueError("nothing to average")
    averaged = {}
    for key, first in states[0].items():
        if first.is_floating_point():
            averaged[key] = sum(s[key].double() for s in states).div(len(states)).to(first.dtype)
        else:
            averaged[key] = first.clone()
    return averaged


def model_state_of(path: Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model weights in `path`: a step checkpoint (.pt) or a weights file
    (.safetensors, loaded through `model`, whose tied weights it stores once)."""
    if path.suffix == ".safetensors":
        load_weights(model, path)
        return {key: tensor.detach().clone() for key, tensor in model.state_dict().items()}
    return load_checkpoint(path)["model"]


def average_weight_files(model: torch.nn.Module, paths: list[Path], out: Path, config: Path) -> None:
    """Average the weights in `paths` (see `model_state_of`) into `model` and save them as `out`."""
    states = [model_state_of(path, model) for path in paths]
    load_model_state(model, average_state_dicts(states), paths[-1], config)
    save_weights(model, out)


def average_checkpoints(run: RunDir, last: int) -> list[Path]:
    """Average the model weights of the run's last `last` snapshots (kept when trained
    with train.average_last), or else of its last `last` step checkpoints, into
    average.safetensors; returns the files used. When the run keeps fewer than `last`,
    it averages those it has and says so in one warning line (a silent shortfall would
    pass for the average asked for)."""
    snapshots = list_snapshots(run.snapshots)
    found = snapshots[-last:] or list_checkpoints(run.checkpoints)[-last:]
    if not found:
        raise UserError(f"{run.checkpoints}: no step_N.pt checkpoints to average")
    if len(found) < last:
        key = "train.average_last" if snapshots else "train.keep_last"
        log.warning("averaging the %d checkpoints the run keeps, not the last %d asked for: raise %s "
                    "before training to keep more", len(found), last, key)
    average_weight_files(build_run_model(run, run.read_config()), found, run.average, run.config)
    return found


# ---- metrics ----------------------------------------------------------------------------
def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of metrics.jsonl that have a step, in order; a line that is not complete
    JSON (a run writing its next line, or one cut short by a crash) is skipped."""
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("step"), int):
            events.append(event)
    return events


def drop_metrics_after(path: Path, step: int) -> int:
    """Rewrite metrics.jsonl without the events logged after `step` (what a crashed run
    logged past its last checkpoint: the resumed run logs those steps again). Returns how
    many events were dropped."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1  # a line cut short by the crash
                continue
            if isinstance(event, dict) and isinstance(event.get("step"), int) and event["step"] > step:
                dropped += 1
                continue
            kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        atomic_write_text(path, "".join(kept))
    return dropped


def _first_line(err: BaseException) -> str:
    """The first informative line of an error (load_state_dict's first line only says
    'Error(s) in loading state_dict'; the mismatch is on the next)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Error(s) in loading")] or lines
    return lines[0].rstrip(".") if lines else type(err).__name__
