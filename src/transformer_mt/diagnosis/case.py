"""What the doctor reads of one model: a `Case`.

A case is a run (trained here, or imported: Marian, GPT-2 aside, or an Annotated-Transformer
checkpoint) or a preset or config before training, whose model is built with the config's
seed. It holds the config, the model, the tokenizer, the run's metrics and imported.json, and
up to a few hundred sentence pairs to translate (--src/--ref, else the run's validation set);
the translations and the teacher-forced losses are computed once, when a check first asks."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from transformer_mt.common.config import Config, load_config, replace
from transformer_mt.data.batching import pad_sequences
from transformer_mt.data.corpus import read_parallel
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.data.tokenizers.protocol import Tokenizer
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import read_json_file
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import EncoderDecoder, build_model
from transformer_mt.runs.directory import RunDir, build_run_model, load_run_model, read_events
from transformer_mt.inference.translator import Hypothesis, Translator

BATCH = 32  # sentences per teacher-forced batch


class NotChecked(Exception):
    """A check that this case gives nothing to measure with: the reason, in a few words."""


@dataclass
class Case:
    """One model and what is known of it. `trained` is False for a config before training."""

    name: str
    cfg: Config
    model: EncoderDecoder
    tokenizer: Tokenizer | None = None
    run: RunDir | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    imported: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    pairs_from: str = ""
    trained: bool = True
    measured: dict[str, float] = field(default_factory=dict)  # what each check measured, fired or not

    def need_pairs(self) -> None:
        """NotChecked unless there are sentences to translate with a tokenizer."""
        if self.tokenizer is None:
            raise NotChecked("no vocabulary yet (a config before training)")
        if not self.sources:
            raise NotChecked("no sentences: give --src and --ref (the run has no validation set)")

    @functools.cached_property
    def initial_model(self) -> EncoderDecoder:
        """The model as training started it, where the config says how (a run trained here from
        scratch: train.seed's draws of model.init), else the model itself (an imported checkpoint,
        a fine-tuned run, a config before training). What the initialisation checks read: a run
        whose weights grew as it diverged did not start with large embeddings."""
        if not self.trained or self.run is None or self.imported or self.cfg.train.init_from:
            return self.model
        if self.cfg.model.file:  # the learner's builder, from the run's copy, seeded as training seeded it
            return build_run_model(self.run, self.cfg, self.cfg.train.seed).eval()
        return initial_weights(self.cfg)

    def need_ours(self, measure: str) -> None:
        """NotChecked where the run trained the learner's own model, whose parts the doctor
        does not know by name: `check` finds them by what they do."""
        if self.cfg.model.file:
            raise NotChecked(f"{measure} reads this package's embeddings; for your own model "
                             f"({self.cfg.model.file}) `transformer-mt check` measures it (embedding_init)")

    @functools.cached_property
    def translator(self) -> Translator:
        return Translator(self.model, self.tokenizer, self.cfg.decode, torch.device("cpu"))

    @functools.cached_property
    def hypotheses(self) -> list[Hypothesis]:
        """The best hypothesis of each source, with the run's decoding settings."""
        self.need_pairs()
        return [row[0] for row in self.translator.search(self.sources)]

    @functools.cached_property
    def losses(self) -> tuple[float, float]:
        """Cross entropy per reference token (nats, teacher-forced, eos included) with the
        right sources and with every source moved to the next pair's reference."""
        self.need_pairs()
        shifted = self.sources[1:] + self.sources[:1]
        return (pair_loss(self.translator, self.sources, self.references),
                pair_loss(self.translator, shifted, self.references))


@torch.inference_mode()
def pair_loss(translator: Translator, sources: Sequence[str], references: Sequence[str]) -> float:
    """Mean cross entropy of the references given the sources, as validation computes it
    (no label smoothing; padding, and the unknown target words a word vocabulary maps to
    it, skipped)."""
    model, tokenizer = translator.model.eval(), translator.tokenizer
    src = translator.encode_sources(list(sources), translator.defaults.unknown_words)
    tgt = tokenizer.encode_target(list(references))
    total = tokens = 0.0
    for start in range(0, len(src), BATCH):
        s = pad_sequences([ids or [EOS_ID] for ids in src[start:start + BATCH]])
        t = tgt[start:start + BATCH]
        t_in, t_out = pad_sequences([[BOS_ID] + ids for ids in t]), pad_sequences([ids + [EOS_ID] for ids in t])
        log_probs = model.generator(model(s, t_in, padding_mask(s, PAD_ID)))  # (B, T, V)
        nll = F.nll_loss(log_probs.transpose(1, 2), t_out, ignore_index=PAD_ID, reduction="sum")
        total, tokens = total + nll.item(), tokens + int(t_out.ne(PAD_ID).sum())
    return total / max(tokens, 1)


def open_case(target: str, overrides: Sequence[str] = (), src: str | None = None, ref: str | None = None,
              limit: int = 200) -> Case:
    """The case of `target`: a run folder, else a preset or config file (with `overrides`)
    whose initial model is built. Up to `limit` pairs of --src/--ref, else of the run's
    validation set."""
    if (src is None) != (ref is None):
        raise UserError("doctor: give --src and --ref together (sentences and their reference translations)")
    path = Path(target)
    if path.is_dir():
        if overrides:
            raise UserError(f"{target}: a run keeps its config; overrides go with a preset or a config file")
        case = run_case(RunDir(path))
    else:
        case = config_case(target, overrides)
    pairs = read_parallel(src, ref) if src is not None else validation_pairs(case)
    if pairs is not None:
        case.sources, case.references = pairs.src[:limit], pairs.tgt[:limit]
        case.pairs_from = f"{src}, {ref}" if src is not None else "the validation set"
    return case


def run_case(run: RunDir) -> Case:
    """A run trained here or imported: its best weights (its last checkpoint while it has none)."""
    checkpoint = "best" if run.best.is_file() else "last"
    cfg, tokenizer, model = load_run_model(run, checkpoint, arch="encoder_decoder")
    record = run.root / "imported.json"
    imported = read_json_file(record, "") if record.is_file() else {}
    imported = imported if isinstance(imported, dict) else {}
    return Case(str(run.root), cfg, model.eval(), tokenizer, run, read_events(run.root / "metrics.jsonl"), imported)


def config_case(target: str, overrides: Sequence[str]) -> Case:
    """A preset or config before training: its model as `train` would build it (seeded with
    train.seed), with vocabularies of data.vocab_size where the config leaves them to the
    tokenizer."""
    cfg = load_config(target, list(overrides))
    if cfg.model.arch != "encoder_decoder":
        raise UserError(f"{target}: model.arch is {cfg.model.arch}; the doctor reads translation models")
    if cfg.model.file:
        raise UserError(f"{target}: model.file names your own model, which the doctor reads once trained (doctor RUN); "
                        f"before training, `transformer-mt check {cfg.model.file}` reads your code")
    size = cfg.data.vocab_size
    model_cfg = replace(cfg.model, src_vocab_size=cfg.model.src_vocab_size or size,
                        tgt_vocab_size=cfg.model.tgt_vocab_size or size)
    cfg = replace(cfg, model=model_cfg)
    return Case(target, cfg, initial_weights(cfg), trained=False)


def initial_weights(cfg: Config) -> EncoderDecoder:
    """The model `train` starts from for `cfg`: model.init's draws, seeded with train.seed."""
    torch.manual_seed(cfg.train.seed)
    return build_model(cfg.model).eval()


def validation_pairs(case: Case):
    """The run's validation pairs, or None where it has none (or is a config)."""
    if case.run is None:
        return None
    try:
        return read_parallel(*case.run.text_files(("valid",)))
    except UserError:
        return None
