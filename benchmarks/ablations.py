"""The study notes' question answered in their own recipe (issue 63): why their Transformer
translated poorly. Trains named rows on Multi30k de->en, each seed of each row a run of its
own, and keeps per run the final training loss, validation BLEU and test BLEU/chrF (last
weights) in one results file; --markdown prints every row's mean ± sample standard deviation over seeds.

Rows (`--show --rows NAME` prints a row's whole resolved config: the package defaults, or
its preset, with the row's overrides below and the run's own (seed, steps, one validation
at the end, every step's loss logged); nothing else is applied):
  notes            experiment 1 as the notes ran it: the first 5,000 pairs, N=2, d_model 128,
                   d_ff 256, h=4, pre-norm with a final LayerNorm after each stack, their
                   make_model's initialisation (PyTorch's draws, one Linear deep-copied into
                   W^Q, W^K, W^V, W^O, one attention into every attention, one feed-forward
                   network into every layer: model.init notes), word vocabularies per side of every training word,
                   unknown words as padding at translation, dropout 0.1 (sub-layer outputs,
                   embedding sums, attention weights, feed-forward), Adam at a constant 1e-3
                   (betas 0.9/0.999, eps 1e-8), no label smoothing, batches of 32 sentences,
                   30 epochs (4,680 steps), fp32, greedy search, the last weights
  +independent_init
                   `notes` with each module its own PyTorch draw (model.init pytorch), as the
                   rows below were measured
  notes_10k        experiment 2: 10,000 pairs, d_model 512, d_ff 1,024 (30 epochs: 9,360 steps)
  notes_n4/n6/d512 their hypotheses ("N too small", "d_model too small") in their recipe,
                   from `+independent_init`
  +xavier ... +no_dropout
                   one fix at a time from `+independent_init` (same 4,680 steps); +beam4 and
                   +unk change decoding only: they decode `notes`' own runs, seed by seed
  all_fixes        the fixes together in the notes' shape (N=2, d_model 128); the base of
                   Table 3's rows
  ours             the multi30k_de_en preset (N=4, its dropout, batching, schedule and beam)
                   without its time budget, at the notes' 4,680 steps
  A_h1 ... E_learned (--rows table3)
                   the paper's Table 3 at CPU scale, each one change from `all_fixes`

The corpus: the notes trained on the first pairs of WMT16 de-en's training set, which the
`wmt16` builder yields from Europarl v7 first (Common Crawl and News Commentary follow), so
their 5,000 and 10,000 pairs are parliament speeches, long and formal; it is not on this
machine, so Multi30k de->en (image captions of ~12 words, val and test drawn like train)
stands in: the same task and sizes, an easier text (their WMT16 scores would be lower).
Differences from the notes' code that are kept, each small: sentences are padded to the
batch's longest, not to 500 (padded positions change no output: test_ablations.py checks
it; only time); the source has no <sos> in front of its words; an epoch drops its last
partial batch (156 batches of 32 per 5,000 pairs, where the notes' DataLoader adds a 157th
of 8); nn.LayerNorm (biased variance, eps 1e-5 under the square root) where the notes
divide by the unbiased std + 1e-6; the vocabularies hold an unused <unk>; a run validates
once, at its end (the notes never validate).

Each record of --results: row, seed, the overrides and the config's fingerprint, steps,
epochs, parameters, the mean training loss of the last epoch, validation loss, BLEU and
chrF, test_2016 BLEU and chrF of the last weights, minutes, date, torch, the host's matmul
peaks. benchmarks/results/ablations.jsonl holds an earlier 2,000-step table of post-norm
rows in its own format; this script neither reads nor writes it.

    python benchmarks/ablations.py                          # every study row, seeds 1,2,3
    python benchmarks/ablations.py --rows notes --seeds 1
    python benchmarks/ablations.py --rows notes_10k --seeds 1 --checkpoint-every 1872   # over an hour: resumable
    python benchmarks/ablations.py --markdown --chart docs/ablations.png   # the table, from the results only
    python benchmarks/ablations.py --rows ladder --markdown --chart docs/ablations_ladder.png
    python benchmarks/ablations.py --quick                  # a smoke run: 200 steps, 2,000 pairs
    python benchmarks/ablations.py --rows notes,all_fixes --seeds 1 --doctor   # what `doctor` says of them

A (row, seed) whose record is in --results with the same recipe (the config's fingerprint)
is not trained again: the table can be filled in several sittings, or by processes with
disjoint --rows. A run stopped part-way (a closed session) continues from its folder's last
checkpoint on the next call: give long rows --checkpoint-every (notes_10k: 1872, a fifth of
its steps). --markdown and --chart train nothing: they read the results file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _timing import matmul_peaks  # noqa: E402
from transformer_mt.common.config import Config, config_from_dict, config_yaml, load_config, parse_override, replace  # noqa: E402
from transformer_mt.data.corpus import read_parallel  # noqa: E402
from transformer_mt.diagnosis.case import open_case  # noqa: E402
from transformer_mt.diagnosis.report import diagnose  # noqa: E402
from transformer_mt.common.evaluation import score  # noqa: E402
from transformer_mt.runs.directory import read_events  # noqa: E402
from transformer_mt.training import fit  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
RESULTS = Path(__file__).resolve().parent / "results" / "ablations_seeds.jsonl"
DOCTOR = Path(__file__).resolve().parent / "results" / "ablations_doctor.jsonl"  # `--doctor`'s reports
EPOCHS, BATCH, NOTES_PAIRS = 30, 32, 5000  # the notes' train(epochs=30, batch_size=32), max_samples=5000
FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def epoch_steps(pairs: int, epochs: int = EPOCHS) -> int:
    """Steps of `epochs` epochs of `pairs` pairs in batches of BATCH sentences (an epoch's
    last partial batch dropped: data.batch_sentences)."""
    return epochs * (pairs // BATCH)


NOTES = (
    "--data.train_pairs=5000", "--data.vocab_type=word", "--data.joint_vocab=false",
    "--data.vocab_size=30000",  # more than the 24,889 German words of all 29,000 pairs: every word kept
    "--data.max_len_ratio=1000",  # the notes drop no pair
    "--data.batch_sentences=32",
    "--model.n_layers=2", "--model.d_model=128", "--model.d_ff=256", "--model.n_heads=4",
    "--model.norm_first=true", "--model.init=notes", "--model.scale_embeddings=true",
    "--model.share_vocab=false", "--model.tie_embeddings=false", "--model.positional=sinusoidal",
    "--model.dropout=0.1", "--model.attention_dropout=0.1", "--model.activation_dropout=0.1",
    "--train.schedule=constant", "--train.lr=0.001", "--train.adam_betas=[0.9, 0.999]", "--train.adam_eps=1e-8",
    "--train.weight_decay=0", "--train.clip_norm=0", "--train.label_smoothing=0", "--train.precision=fp32",
    "--decode.beam=1", "--decode.max_len_a=0",
    "--decode.max_len_b=49",  # + 1 for eos: the notes' 50 greedy steps
    "--decode.unknown_words=pad",
)
INDEPENDENT = ("--model.init=pytorch",)  # each module PyTorch's own draw: the notes' recipe as first measured
DECODE_ONLY = ("+beam4", "+unk")  # change decoding only: they decode `notes`' weights, paired seed by seed
WARMUP = epoch_steps(NOTES_PAIRS) // 10  # 10% of the run (the paper's 4,000 are 4% of its 100,000 steps)
FIXES = {  # one change each from the notes' recipe
    "+xavier": ("Xavier-uniform initialisation (our default)", ("--model.init=xavier",)),
    "+normal_embedding": ("Xavier matrices, token embeddings N(0, 1/d_model) (tensor2tensor, fairseq)",
                          ("--model.init=xavier", "--model.embedding_init=normal")),
    "+unscaled_embedding": ("PyTorch's N(0, 1) embeddings not multiplied by sqrt(d_model): at the positions' scale",
                            ("--model.scale_embeddings=false",)),
    "+unk": ("unknown source words as <unk>, not masked", ("--decode.unknown_words=unk",)),
    "+bpe": ("one joint BPE vocabulary of 8,000", ("--data.vocab_type=bpe", "--data.joint_vocab=true",
                                                   "--data.vocab_size=8000", "--model.share_vocab=true")),
    "+all_pairs": ("all 29,000 pairs in the same 4,680 steps (5.2 epochs)", ("--data.train_pairs=0",)),
    "+warmup": (f"the paper's Adam (0.9/0.98/1e-9) and rate, equation 3 with {WARMUP} warmup steps (peak 4.1e-3)",
                ("--train.schedule=paper", f"--train.warmup_steps={WARMUP}", "--train.lr_scale=1",
                 "--train.adam_betas=[0.9, 0.98]", "--train.adam_eps=1e-9")),
    "+warmup_only": (f"their Adam and rate 1e-3 after a linear warmup of {WARMUP} steps (nothing else of the paper's)",
                     ("--train.schedule=warmup_constant", f"--train.warmup_steps={WARMUP}")),
    "+smoothing": ("label smoothing 0.1", ("--train.label_smoothing=0.1",)),
    "+beam4": ("beam 4, length penalty 0.6", ("--decode.beam=4", "--decode.length_penalty=0.6")),
    "+tied": ("the generator tied to the target embedding", ("--model.tie_embeddings=true",)),
    "+paper_dropout": ("dropout 0.1 on sub-layer outputs and embedding sums only (section 5.4)",
                       ("--model.attention_dropout=0", "--model.activation_dropout=0")),
    "+no_dropout": ("no dropout", ("--model.dropout=0", "--model.attention_dropout=0", "--model.activation_dropout=0")),
}
TOGETHER = ("+xavier", "+unk", "+bpe", "+all_pairs", "+warmup", "+smoothing", "+beam4", "+tied", "+paper_dropout")
# The fixes of `all_fixes` applied one after another from `notes`, in the order of what each
# gained on its own (the table of single changes): the ladder's last rung is `all_fixes`.
LADDER = ("+xavier", "+all_pairs", "+bpe", "+beam4", "+smoothing", "+warmup", "+paper_dropout", "+unk", "+tied")
LEFT_OUT = ("+tied", "+warmup", "+bpe")  # `all_fixes` without each of these
TABLE_3 = {
    "A_h1": ("(A) h = 1", ("--model.n_heads=1",)),
    "A_h8": ("(A) h = 8", ("--model.n_heads=8",)),
    "A_h16": ("(A) h = 16", ("--model.n_heads=16",)),
    "C_n1": ("(C) N = 1", ("--model.n_layers=1",)),
    "C_n4": ("(C) N = 4", ("--model.n_layers=4",)),
    "C_d64": ("(C) d_model 64, d_ff 128", ("--model.d_model=64", "--model.d_ff=128")),
    "C_d256": ("(C) d_model 256, d_ff 512", ("--model.d_model=256", "--model.d_ff=512")),
    "D_drop0": ("(D) dropout 0", ("--model.dropout=0",)),
    "D_drop03": ("(D) dropout 0.3", ("--model.dropout=0.3",)),
    "D_ls0": ("(D) label smoothing 0", ("--train.label_smoothing=0",)),
    "D_ls02": ("(D) label smoothing 0.2", ("--train.label_smoothing=0.2",)),
    "E_learned": ("(E) learned positional embeddings", ("--model.positional=learned",)),
}
# The paper's Table 3 (newstest2013 dev BLEU, base model 25.8) for the change a row makes; the
# paper varied its base (N=6, d_model 512, h=8), these rows vary `all_fixes` (N=2, d_model 128, h=4).
PAPER_TABLE_3 = {
    "all_fixes": "(A) h=4: 25.5", "A_h1": "(A) h=1: 24.9", "A_h8": "base, h=8: 25.8", "A_h16": "(A) h=16: 25.8",
    "C_n1": "(C) N=2 (from 6): 23.7", "C_n4": "(C) N=8 (from 6): 25.5", "C_d64": "(C) d_model 256 (from 512): 24.5",
    "C_d256": "(C) d_model 1024: 26.0", "D_drop0": "(D) P_drop 0.0: 24.6", "D_drop03": "(D) P_drop 0.2: 25.5",
    "D_ls0": "(D) eps_ls 0.0: 25.3", "D_ls02": "(D) eps_ls 0.2: 25.7", "E_learned": "(E) learned positions: 25.7",
}
GROUPS = {"notes": "the notes' recipe", "fix": "one fix from it", "together": "all together",
          "table3": "Table 3 at CPU scale", "ladder": "the fixes one after another"}


@dataclass(frozen=True)
class Row:
    """One row: config overrides of the package defaults (or of `preset`), the steps it
    trains, the row its difference is measured from (`base`) and the weights it is scored
    with (`checkpoint`: the last, as the notes keep)."""

    name: str
    what: str
    group: str
    overrides: tuple[str, ...]
    steps: int
    base: str = "notes"
    preset: str = ""
    checkpoint: str = "last"
    decode_only: bool = False  # scored by decoding its base's run of the same seed, not trained


def rows() -> dict[str, Row]:
    """Every row by name, in the table's order."""
    steps = epoch_steps(NOTES_PAIRS)
    found = [
        Row("notes", "the notes' experiment 1, as they ran it (their deep copies)", "notes", NOTES, steps, base=""),
        Row("+independent_init", "each module its own PyTorch draw, no deep copies", "notes", NOTES + INDEPENDENT,
            steps),
        Row("notes_10k", "their experiment 2: 10,000 pairs, d_model 512, d_ff 1,024", "notes",
            NOTES + INDEPENDENT + ("--data.train_pairs=10000", "--model.d_model=512", "--model.d_ff=1024"),
            epoch_steps(10000), base="+independent_init"),
        Row("notes_n4", "N = 4", "notes", NOTES + INDEPENDENT + ("--model.n_layers=4",), steps, base="+independent_init"),
        Row("notes_n6", "N = 6", "notes", NOTES + INDEPENDENT + ("--model.n_layers=6",), steps, base="+independent_init"),
        Row("notes_d512", "d_model 512, d_ff 1,024", "notes",
            NOTES + INDEPENDENT + ("--model.d_model=512", "--model.d_ff=1024"), steps, base="+independent_init"),
    ]
    found += [Row(name, what, "fix", NOTES + overrides, steps, decode_only=True) if name in DECODE_ONLY else
              Row(name, what, "fix", NOTES + INDEPENDENT + overrides, steps, base="+independent_init")
              for name, (what, overrides) in FIXES.items()]
    together = NOTES + tuple(o for name in TOGETHER for o in FIXES[name][1])
    found += [
        Row("all_fixes", f"all together: {', '.join(TOGETHER)}", "together", together, steps),
        Row("ours", "the multi30k_de_en preset without its time budget", "together",
            ("--train.budget_minutes=0", "--train.patience=0"), steps,
            preset="multi30k_de_en"),
    ]
    found += [Row(name, what, "table3", together + overrides, steps, base="all_fixes")
              for name, (what, overrides) in TABLE_3.items()]
    return {row.name: row for row in found + ladder(steps)}


def ladder(steps: int) -> list[Row]:
    """The ladder's rungs (`L1+xavier` ... `L9+tied`, the last `all_fixes` itself, so that its
    records are the rung's), each its predecessor with one more fix (a decoding fix decodes the
    predecessor's runs); then `all_fixes` without each fix of LEFT_OUT (without `+tied` it is
    `L8+unk`)."""
    rungs, overrides, base = [], NOTES, "notes"
    for number, fix in enumerate(LADDER, start=1):
        overrides = overrides + FIXES[fix][1]
        name = f"L{number}{fix}"
        rungs.append(Row(name, f"{base} and {fix}", "ladder", overrides, steps, base=base,
                         decode_only=fix in DECODE_ONLY))
        base = name
    for fix in LEFT_OUT:
        kept = NOTES + tuple(o for name in TOGETHER if name != fix for o in FIXES[name][1])
        rungs.append(Row(f"all_fixes-{fix[1:]}", f"all_fixes without {fix}", "ladder", kept, steps,
                         base="all_fixes"))
    return rungs


def data_overrides(folder: Path) -> list[str]:
    """The Multi30k de->en files of `folder`: train, val (validation), test_2016_flickr."""
    return [f"--data.{split}_{side}={folder / f'{name}.{lang}.gz'}"
            for split, name in FILES.items() for side, lang in (("src", "de"), ("tgt", "en"))]


def run_overrides(row: Row, seed: int, steps: int | None = None, quick: bool = False) -> list[str]:
    """What every run adds to its row: the seed, the steps (the row's unless `steps`), one
    validation at the end, every step's loss logged (the last epoch's mean is the training
    loss), one checkpoint kept; --quick's shorter data and outputs."""
    steps = steps or row.steps
    fixed = [f"--train.seed={seed}", f"--train.max_steps={steps}", f"--train.valid_every={steps}",
             "--train.log_every=1", "--train.keep_last=1"]
    return fixed + (["--data.train_pairs=2000", "--decode.max_len_b=10"] if quick else [])


def row_config(row: Row, data: Path, seed: int = 1, steps: int | None = None, quick: bool = False) -> Config:
    """The resolved config a run of `row` trains: its preset (or the package defaults), the
    data files of `data`, the row's overrides, then run_overrides."""
    overrides = data_overrides(data) + list(row.overrides) + run_overrides(row, seed, steps, quick)
    if row.preset:
        return load_config(row.preset, overrides)
    raw: dict[str, dict] = {}
    for text in overrides:
        (section, key), value = parse_override(text)
        raw.setdefault(section, {})[key] = value
    return config_from_dict(raw)


def recipe(cfg: Config) -> str:
    """A fingerprint of what a run trains: the settings that differ from the package defaults,
    the data files left out (they name a folder of this machine)."""
    config, defaults = cfg.to_dict(), Config().to_dict()
    kept = {section: {k: v for k, v in values.items() if v != defaults[section][k]}
            for section, values in config.items()}
    for split in FILES:
        for side in ("src", "tgt"):
            kept["data"].pop(f"{split}_{side}", None)
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def last_epoch_loss(events: list[dict], steps_per_epoch: int) -> float | None:
    """The mean training loss of the last `steps_per_epoch` steps (what the notes print after
    each epoch), from the run's metrics (one train event per step)."""
    losses = [e["loss"] for e in events if e.get("event") == "train"][-max(steps_per_epoch, 1):]
    return sum(losses) / len(losses) if losses else None


def run_folder(args: argparse.Namespace, row: Row, seed: int, fingerprint: str) -> Path:
    """Where the run of `row` and `seed` trains: under --out, named by its recipe's fingerprint."""
    return args.out / f"{row.name}_seed{seed}_{fingerprint}"


def decode_and_score(row: Row, seed: int, args: argparse.Namespace, records: list[dict]) -> dict:
    """A decode-only row: the weights of its base's run of the same seed, decoded with the
    row's decode.* settings on validation and test_2016: its record, with the base's
    training numbers (the same weights) and a difference free of training noise."""
    base = rows()[row.base]
    trained = record_of(records, base, seed, args)  # of today's recipe of `base`
    run = run_folder(args, base, seed, recipe(row_config(base, args.data, seed, args.steps, args.quick)))
    if trained is None or not (run / "config.yaml").is_file():
        raise SystemExit(f"{row.name} decodes the run of {base.name} seed {seed}: train it first "
                         f"(--rows {base.name} --seeds {seed}; its folder {run} must be there)")
    cfg = row_config(row, args.data, seed, args.steps, args.quick)
    settings = {key: getattr(cfg.decode, key) for key in ("beam", "length_penalty", "unknown_words")}
    translator = Translator.from_run(run, checkpoint=row.checkpoint, **settings)
    start = time.perf_counter()
    split = {name: read_parallel(*(args.data / f"{FILES[name]}.{lang}.gz" for lang in ("de", "en")))
             for name in ("valid", "test")}
    valid, test = (score(translator.translate(split[name].src), split[name].tgt) for name in ("valid", "test"))
    same = ("steps", "epochs", "training_pairs", "parameters", "train_loss", "valid_loss", "train_minutes")
    return {"row": row.name, "seed": seed, "what": row.what, "base": row.base, "preset": row.preset,
            "overrides": list(row.overrides) + run_overrides(row, seed, args.steps, args.quick),
            "recipe": recipe(cfg), "checkpoint": row.checkpoint, **{key: trained[key] for key in same},
            "decoded": trained["recipe"], "valid_bleu": valid.bleu, "valid_chrf": valid.chrf,
            "test_bleu": test.bleu, "test_chrf": test.chrf, "wall_minutes": (time.perf_counter() - start) / 60,
            "date": date.today().isoformat(), "torch": torch.__version__, "peaks_gflops": args.peaks}


def train_and_score(row: Row, seed: int, args: argparse.Namespace) -> dict:
    """Train one seed of `row` and score its `row.checkpoint` weights on test_2016: its record."""
    if row.decode_only:
        return decode_and_score(row, seed, args, read_records(args.results))
    cfg = row_config(row, args.data, seed, args.steps, args.quick)
    fingerprint = recipe(cfg)
    if args.checkpoint_every:  # after the fingerprint: validations and checkpoints change no weight
        cfg = replace(cfg, train=replace(cfg.train, valid_every=args.checkpoint_every))
    run = run_folder(args, row, seed, fingerprint)
    start = time.perf_counter()
    trainer = fit(cfg, run, progress=False)
    events = read_events(run / "metrics.jsonl")
    valid = [e for e in events if e.get("event") == "valid"][-1]
    steps_per_epoch = len(trainer.batches) // cfg.train.accumulate
    test = read_parallel(*(args.data / f"test_2016_flickr.{lang}.gz" for lang in ("de", "en")))
    scores = score(Translator.from_run(run, checkpoint=row.checkpoint).translate(test.src), test.tgt)
    return {"row": row.name, "seed": seed, "what": row.what, "base": row.base, "preset": row.preset,
            "overrides": list(row.overrides) + run_overrides(row, seed, args.steps, args.quick),
            "recipe": fingerprint, "checkpoint": row.checkpoint, "steps": trainer.state.step,
            "epochs": trainer.state.step / steps_per_epoch, "training_pairs": len(trainer.task.data.train_src),
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "train_loss": last_epoch_loss(events, steps_per_epoch), "valid_loss": valid["valid_loss"],
            "valid_bleu": valid["bleu"], "valid_chrf": valid["chrf"],
            "test_bleu": scores.bleu, "test_chrf": scores.chrf,
            "train_minutes": trainer.state.elapsed / 60, "wall_minutes": (time.perf_counter() - start) / 60,
            "date": date.today().isoformat(), "torch": torch.__version__, "peaks_gflops": args.peaks}


def examine(row: Row, seed: int, args: argparse.Namespace) -> dict:
    """The doctor's report on the run of `row` and `seed` (its validation set): a record."""
    fingerprint = recipe(row_config(row, args.data, seed, args.steps, args.quick))
    report = diagnose(open_case(str(run_folder(args, row, seed, fingerprint))))
    print(f"doctor {row.name} seed {seed}: {', '.join(f.id for f in report.findings) or 'nothing found'}")
    return {"row": row.name, "seed": seed, "recipe": fingerprint, "report": report.to_dict(),
            "date": date.today().isoformat(), "torch": torch.__version__}


def doctor_reports(path: Path = DOCTOR) -> dict[tuple[str, int], dict]:
    """The newest `--doctor` record of each (row, seed)."""
    return {(r["row"], r["seed"]): r for r in read_records(path)}


def read_records(path: Path) -> list[dict]:
    """The records of the results file (none where it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_record(path: Path, record: dict) -> None:
    """Add one record as one line in one write to a file opened for appending: a record is
    whole or absent, and two processes filling disjoint rows never overwrite each other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def record_of(records: list[dict], row: Row, seed: int, args: argparse.Namespace) -> dict | None:
    """The newest record of `seed` with the recipe `row` trains today, whichever row trained it
    (a recipe reached twice, as `all_fixes` without tying is `L8+unk`, or renamed, as the first
    `notes` is `+independent_init`, is trained once); none for a row whose definition changed."""
    fingerprint = recipe(row_config(row, args.data, seed, args.steps, args.quick))
    found = [r for r in records if r["seed"] == seed and r["recipe"] == fingerprint]
    return found[-1] if found else None


def current(records: list[dict], chosen: list[Row], args: argparse.Namespace) -> dict[str, list[dict]]:
    """Each chosen row's records of today's recipe, one per seed of args.seeds, by row name, and
    those of the rows they are measured from, so that `--rows table3` still gives each row's
    difference from `all_fixes`."""
    every = rows()
    wanted = dict.fromkeys(chosen + [every[row.base] for row in chosen if row.base])
    return {row.name: [r for seed in args.seeds if (r := record_of(records, row, seed, args))] for row in wanted}


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (None for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def cell(values: list[float], digits: int = 1) -> str:
    """"mean ± sd" over seeds ("mean" for one seed, "" for none)."""
    if not values:
        return ""
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")


def difference(name: str, found: dict[str, list[dict]], base: str) -> tuple[float, float | None] | None:
    """(mean test BLEU of `name` minus that of `base`, the larger of their seed spreads)."""
    mine, theirs = [r["test_bleu"] for r in found.get(name, [])], [r["test_bleu"] for r in found.get(base, [])]
    if not mine or not theirs:
        return None
    spreads = [sd for sd in (mean_sd(mine)[1], mean_sd(theirs)[1]) if sd is not None]
    return statistics.fmean(mine) - statistics.fmean(theirs), max(spreads) if spreads else None


# The table in Chinese (docs/ablations.zh.md): its header, its last line, and each row's change.
HEADER = {"en": "| row | what changed | seeds | steps | epochs | parameters | training loss | valid BLEU | test BLEU "
                "| test chrF | test BLEU from base | the paper's Table 3 |",
          "zh": "| 行 | 改了什么 | 种子数 | 步数 | epoch | 参数量 | 训练损失 | 验证 BLEU | 测试 BLEU | 测试 chrF "
                "| 相对基准的测试 BLEU | 论文表 3 |"}
UNSURE = {"en": "Differences under twice the larger seed spread (or with one seed): ",
          "zh": "差值小于较大种子波动的两倍（或只有一个种子）的行："}
WHAT_ZH = {
    "notes": "笔记的第一次实验，照原样（包括深拷贝）", "+independent_init": "每个模块各自用 PyTorch 默认方式独立初始化，不深拷贝",
    "notes_10k": "笔记的第二次实验：10,000 个句对，d_model 512，d_ff 1,024", "notes_n4": "N = 4", "notes_n6": "N = 6",
    "notes_d512": "d_model 512，d_ff 1,024", "+xavier": "Xavier 均匀初始化（本工具包的默认）",
    "+normal_embedding": "Xavier 矩阵，词嵌入 N(0, 1/d_model)（tensor2tensor、fairseq）",
    "+unscaled_embedding": "PyTorch 的 N(0, 1) 词嵌入不乘 sqrt(d_model)：与位置编码同一尺度",
    "+unk": "未登录的源端词记为 <unk>，不屏蔽", "+bpe": "一个共享的 8,000 BPE 词表",
    "+all_pairs": "全部 29,000 个句对，同样 4,680 步（5.2 个 epoch）",
    "+warmup": "论文的 Adam（0.9/0.98/1e-9）和学习率，公式 3，预热 468 步（峰值 4.1e-3）",
    "+warmup_only": "笔记的 Adam 和 1e-3，前面加 468 步线性预热（论文调度的其余部分都不用）",
    "+smoothing": "标签平滑 0.1", "+beam4": "束宽 4，长度惩罚 0.6", "+tied": "输出层与目标端词嵌入共享",
    "+paper_dropout": "dropout 0.1 只用在子层输出和嵌入之和上（5.4 节）", "+no_dropout": "不用 dropout",
    "all_fixes": "全部一起：+xavier、+unk、+bpe、+all_pairs、+warmup、+smoothing、+beam4、+tied、+paper_dropout",
    "ours": "multi30k_de_en 预设，不限训练时间", "E_learned": "(E) 可学习的位置编码",
}


def what_in(row: Row, language: str) -> str:
    """The row's change in `language` (en or zh): the ladder's rungs and the rows left out
    of all_fixes say theirs from their names; Table 3's rows are the paper's own labels."""
    if language == "en":
        return row.what
    if row.group == "ladder":
        base, fix = row.what.split(" ", 1)[0], row.what.rsplit(" ", 1)[-1]
        return f"{base} 再加 {fix}" if row.name.startswith("L") else f"all_fixes 去掉 {fix}"
    return WHAT_ZH.get(row.name, row.what.replace("label smoothing", "标签平滑"))


def markdown_table(chosen: list[Row], found: dict[str, list[dict]], language: str = "en") -> str:
    """The rows' means ± seed spreads as a Markdown table, and which differences are under
    twice the spread (those rows want more seeds); `language` en or zh."""
    lines = [HEADER[language], "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    unsure = []
    for row in chosen:
        rs = found[row.name]
        if not rs:
            lines.append(f"| `{row.name}` | {what_in(row, language)} | 0 | | | | | | | | | |")
            continue
        diff = difference(row.name, found, row.base) if row.base else None
        if diff is not None and (diff[1] is None or abs(diff[0]) < 2 * diff[1]):
            unsure.append(row.name)
        value = f"{round(diff[0], 1) + 0.0:+.1f}" if diff is not None else ""  # no "-0.0"
        change = (f"{value} from `{row.base}`" if language == "en" else f"相对 `{row.base}` {value}") if value else ""
        lines.append(f"| `{row.name}` | {what_in(row, language)} | {len(rs)} | {rs[0]['steps']:,} | {rs[0]['epochs']:.1f} "
                     f"| {rs[0]['parameters']:,} | {cell([r['train_loss'] for r in rs], 2)} "
                     f"| {cell([r['valid_bleu'] for r in rs])} | {cell([r['test_bleu'] for r in rs])} "
                     f"| {cell([r['test_chrf'] for r in rs])} | {change} | {PAPER_TABLE_3.get(row.name, '')} |")
    if unsure:
        lines += ["", UNSURE[language] + ("、" if language == "zh" else ", ").join(f"`{name}`" for name in unsure)]
    return "\n".join(lines)


def draw_chart(chosen: list[Row], found: dict[str, list[dict]], path: Path) -> None:
    """Mean test BLEU per row with its seed spread as an error bar, coloured by group, the
    notes' mean as a dotted line."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    shown = [row for row in chosen if found[row.name]][::-1]
    fig = Figure(figsize=(9, 0.32 * len(shown) + 1.8), dpi=100, layout="constrained")
    ax = fig.subplots()
    colours = {"notes": "tab:red", "fix": "tab:blue", "together": "tab:purple", "table3": "tab:green",
               "ladder": "tab:orange"}
    stats = [mean_sd([r["test_bleu"] for r in found[row.name]]) for row in shown]
    bars = ax.barh([row.name for row in shown], [m for m, _ in stats], xerr=[sd or 0 for _, sd in stats],
                   color=[colours[row.group] for row in shown])
    ax.bar_label(bars, labels=[f"{m:.1f}" for m, _ in stats], fontsize=8, padding=2)
    if found.get("notes"):
        ax.axvline(mean_sd([r["test_bleu"] for r in found["notes"]])[0], color="gray", linestyle=":", linewidth=1)
    handles = [Patch(color=colours[group], label=label) for group, label in GROUPS.items()
               if any(row.group == group for row in shown)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=4, fontsize=8)
    ax.set_xlabel("BLEU, Multi30k de->en test_2016 (cased sacreBLEU), mean ± sample standard deviation over seeds")
    ax.set_title("The fixes of all_fixes one after another, from the notes' recipe"
                 if all(row.group == "ladder" for row in shown) else
                 "The study notes' recipe, their hypotheses, and each fix from it")
    fig.savefig(path)


GROUP_NAMES = {"study": ("notes", "fix", "together"), "table3": ("table3",), "ladder": ("ladder",),
               "all": tuple(GROUPS)}


def choose(text: str | None, every: dict[str, Row], parser: argparse.ArgumentParser) -> list[Row]:
    """The rows --rows names (row names or the groups study, table3, all; default study)."""
    chosen: list[Row] = []
    for name in (text or "study").split(","):
        if name in GROUP_NAMES:
            chosen += [row for row in every.values() if row.group in GROUP_NAMES[name]]
        elif name in every:
            chosen.append(every[name])
        else:
            parser.error(f"--rows: unknown row {name!r}; rows: {', '.join(every)}; groups: {', '.join(GROUP_NAMES)}")
    return list(dict.fromkeys(chosen))


def parse_args() -> tuple[argparse.Namespace, list[Row]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a Multi30k folder (default ../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=Path("runs/ablations"), help="run folders (default runs/ablations)")
    parser.add_argument("--results", type=Path, help=f"the JSONL of finished runs (default {RESULTS}; "
                        "with --quick, OUT/quick.jsonl)")
    parser.add_argument("--rows", help="comma-separated rows or groups (study, table3, all; default study)")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, a run each (default 1,2,3)")
    parser.add_argument("--steps", type=int, help="train every row this many steps (default: the row's own, "
                        "30 epochs of the notes' pairs)")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="validate and checkpoint every N steps "
                        "(default: once, at the end), so that a run stopped part-way resumes from its folder on the "
                        "next call; not part of the row's recipe")
    parser.add_argument("--quick", action="store_true", help="at most 200 steps, 2,000 pairs, outputs of at most 10")
    parser.add_argument("--show", action="store_true", help="print each row's resolved config and train nothing")
    parser.add_argument("--markdown", action="store_true", help="print the table of the results file; train nothing")
    parser.add_argument("--language", choices=("en", "zh"), default="en", help="the table's language (zh: "
                        "docs/ablations.zh.md's)")
    parser.add_argument("--chart", type=Path, help="draw the results' test BLEU to this PNG; train nothing")
    parser.add_argument("--json", action="store_true", help="last line: the chosen rows' records as JSON")
    parser.add_argument("--doctor", action="store_true", help=f"after training, examine each run with "
                        f"`transformer-mt doctor` (its validation set) and append the reports to {DOCTOR.name}")
    args = parser.parse_args()
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    if not args.seeds:
        parser.error("--seeds: give at least one seed")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: must be at least 1, got {args.steps}")
    if args.checkpoint_every < 0:
        parser.error(f"--checkpoint-every: must be >= 0, got {args.checkpoint_every}")
    if args.quick:
        args.steps = min(args.steps or 200, 200)
    args.results = args.results or (args.out / "quick.jsonl" if args.quick else RESULTS)
    return args, choose(args.rows, rows(), parser)


def main() -> int:
    args, chosen = parse_args()
    if args.show:
        for row in chosen:
            cfg = row_config(row, args.data, args.seeds[0], args.steps, args.quick)
            print(f"# {row.name}: {row.what}\n{config_yaml(cfg)}")
        return 0
    logging.getLogger("transformer_mt").setLevel(logging.WARNING)
    report_only = args.markdown or args.chart is not None
    args.peaks = None
    if not report_only:
        print(f"{'row':<18} {'seed':>4} {'steps':>6} {'epochs':>6} {'loss':>6} {'valid':>6} {'test':>6} {'minutes':>8}")
    for row in [] if report_only else chosen:
        for seed in args.seeds:
            if record_of(read_records(args.results), row, seed, args):
                continue  # read again before every run: another process may fill the same file
            args.peaks = args.peaks or (None if args.quick else matmul_peaks(torch.device("cpu")))
            r = train_and_score(row, seed, args)
            append_record(args.results, r)
            print(f"{row.name:<18} {seed:>4} {r['steps']:>6} {r['epochs']:>6.1f} {r['train_loss']:>6.2f} "
                  f"{r['valid_bleu']:>6.1f} {r['test_bleu']:>6.1f} {r['train_minutes']:>8.1f}", flush=True)
    if args.doctor and not report_only:
        for row in chosen:
            for seed in args.seeds:
                append_record(DOCTOR, examine(row, seed, args))
    found = current(read_records(args.results), chosen, args)
    if args.markdown:
        print(markdown_table(chosen, found, args.language))
    if args.chart:
        draw_chart(chosen, found, args.chart)
    if args.json:
        print(json.dumps([r for row in chosen for r in found[row.name]]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
