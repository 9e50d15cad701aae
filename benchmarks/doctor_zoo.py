"""The doctor's zoo: runs whose cause is known, and what `transformer-mt doctor` says of each.

    python benchmarks/doctor_zoo.py                    # train what is missing under --out, diagnose all
    python benchmarks/doctor_zoo.py --runs healthy_base,lr_far_too_high --json
    python benchmarks/doctor_zoo.py --diagnose-only    # the doctor again on the runs already trained

Each faulty run is one healthy recipe with one fault injected by one override or one data change;
each declares its root cause (the ids the doctor must report) and the symptoms that may follow
from it (ids it may report besides: a diverged run also repeats). The healthy runs declare no
root cause; `undertrained` is allowed on those where more training measurably helps (every
short run of a real corpus) and never on a model at its task's ceiling (the demo, the copy task).

The table: run, injected cause, expected ids, found ids; then per id the runs where it was
expected and found (true positives), expected and not found (misses), found on a run that
neither expects nor allows it (false alarms), and recall and precision. `--json`: the last line
is {"runs": [...], "ids": {...}, "recall": R, "precision": P}. Results are appended to
benchmarks/results/doctor_zoo.jsonl with the date and the host's matmul peaks.

The faults train the zoo's Multi30k recipe (a 2 + 2-layer Transformer on 10,000 English -> German
pairs, 900 steps, about two minutes on 2 cores), the healthy runs are that recipe, the demo, the
tiny copy task and the multi30k_en_de preset on a short budget. A run already under --out is
not trained again."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _timing import matmul_peaks  # noqa: E402
from transformer_mt.common.config import load_config, replace  # noqa: E402
from transformer_mt.diagnosis.case import open_case  # noqa: E402
from transformer_mt.diagnosis.report import CHECKS, FOLLOWS, diagnose  # noqa: E402
from transformer_mt.runs.directory import RunDir  # noqa: E402
from transformer_mt.training import fit  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
RESULTS = Path(__file__).resolve().parent / "results" / "doctor_zoo.jsonl"
TRAIN_PAIRS, VALID_PAIRS = 10_000, 200

# The zoo's healthy Multi30k recipe: the multi30k_en_de preset at two layers, on the zoo's
# 10,000 pairs for 900 steps (validation every 300) with a short warmup.
RECIPE = ["--model.n_layers=2", "--model.dropout=0.1", "--data.vocab_size=4000", "--train.budget_minutes=0",
          "--train.max_steps=900", "--train.valid_every=300", "--train.warmup_steps=300", "--train.lr_scale=1.0",
          "--train.patience=0", "--train.log_every=20", "--decode.length_penalty=0.6"]
SHORT = ("undertrained",)  # the zoo's recipe is short of its best: more training measurably helps it


@dataclass(frozen=True)
class Run:
    """One run of the zoo: how it is made and what the doctor should say of it."""

    name: str
    cause: str  # what was injected, in words ("" for a healthy run)
    expected: tuple[str, ...]  # the root cause's ids: the doctor must report them
    allowed: tuple[str, ...] = SHORT  # besides what may follow from the cause (report.FOLLOWS)
    preset: str = "multi30k_en_de"
    overrides: tuple[str, ...] = ()
    data: str = "aligned"  # the training text: aligned, or shuffled (targets shuffled against sources)
    decode: dict = field(default_factory=dict)  # decoding settings changed after training (a copy of `base`)
    base: str = ""  # the run whose weights a decode-only fault reuses

    @property
    def may_follow(self) -> tuple[str, ...]:
        """What the doctor may report besides the cause: its symptoms (report.FOLLOWS), and `allowed`."""
        return tuple(dict.fromkeys([*self.allowed, *(s for cause in self.expected for s in FOLLOWS.get(cause, ()))]))


RUNS = (
    Run("healthy_demo", "", (), (), preset="demo"),  # at their task's ceiling: nothing at all
    Run("healthy_copy", "", (), (), preset="tiny"),
    Run("healthy_recipe", "", ()),
    Run("healthy_budget", "", (), overrides=("--train.budget_minutes=4", "--train.max_steps=100000",
                                            "--train.valid_every=1000", "--train.warmup_steps=500",
                                            "--train.lr_scale=1.25")),
    Run("lr_far_too_high", "train.lr_scale 50: a peak 50 times the recipe's", ("schedule",),
        overrides=("--train.lr_scale=50",)),
    Run("rate_far_too_low", "train.lr_scale 0.01: the loss stops at the unigram entropy", ("schedule",),
        overrides=("--train.lr_scale=0.01",)),
    Run("misaligned", "the training targets shuffled against their sources", ("misaligned_pairs",),
        data="shuffled"),
    Run("memorization", "300 training pairs, no dropout", ("memorization",),
        overrides=("--data.train_pairs=300", "--model.dropout=0")),
    Run("unknown_words", "a 1,000-word vocabulary per side", ("unknown_words",),
        overrides=("--data.vocab_type=word", "--data.vocab_size=1000", "--data.joint_vocab=false",
                   "--model.share_vocab=false")),
    Run("truncation", "data.max_len 10: pairs longer than 10 subwords dropped", ("truncation",),
        overrides=("--data.max_len=10",)),
    Run("deep_copies", "model.init notes (deep copies, nothing re-drawn), unscaled untied embeddings, 60 steps",
        ("cloned_init",), overrides=("--model.init=notes", "--model.scale_embeddings=false",
                                               "--model.tie_embeddings=false", "--train.max_steps=60",
                                               "--train.valid_every=30")),
    Run("embedding_scale", "model.init pytorch: N(0, 1) embeddings times sqrt(d_model), untied", ("embedding_scale",),
        overrides=("--model.init=pytorch", "--model.tie_embeddings=false")),
    Run("tied_large", "an output layer tied to unscaled N(0, 1) embeddings", ("tied_scale",),
        overrides=("--model.init=pytorch", "--model.scale_embeddings=false", "--model.tie_embeddings=true")),
    Run("length_limit", "decode.max_len_a 0, decode.max_len_b 4: outputs cut at 4 tokens", ("length",),
        decode={"max_len_a": 0.0, "max_len_b": 4}, base="healthy_recipe"),
    Run("stopped_early", "train.max_seconds 30 of a 900-step plan", ("undertrained",), (),
        overrides=("--train.max_seconds=30", "--train.valid_every=100")),
)

# Ids no single fault of a healthy recipe provokes as its root cause, and why: the zoo checks
# that they stay silent on healthy runs and follow from a cause where they fire.
NOT_PROVOKED = {
    "source_ignored": "a symptom: a decoder that reads no source follows from a cause the zoo injects (misaligned "
                      "pairs, a diverged or stalled rate, deep copies); no config option breaks the encoder alone",
    "repetition": "a symptom: loops follow from an undertrained, diverged or memorizing model; no option of a "
                  "healthy recipe makes a model loop by itself",
}


def write_corpus(folder: Path) -> None:
    """The zoo's Multi30k files: the first TRAIN_PAIRS training pairs (and a copy with the targets
    shuffled), the first VALID_PAIRS validation pairs."""
    if (folder / "valid.de").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for side in ("en", "de"):
        for split, name, count in (("train", "train", TRAIN_PAIRS), ("valid", "val", VALID_PAIRS)):
            with gzip.open(DATA / f"{name}.{side}.gz", "rt", encoding="utf-8") as lines:
                (folder / f"{split}.{side}").write_text("".join(islice(lines, count)), encoding="utf-8")
    targets = (folder / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    random.Random(1).shuffle(targets)
    (folder / "shuffled.de").write_text("".join(targets), encoding="utf-8")


def corpus_overrides(run: Run, folder: Path) -> list[str]:
    if run.preset not in ("multi30k_en_de",):
        return []
    target = "shuffled.de" if run.data == "shuffled" else "train.de"
    return [f"--data.train_src={folder / 'train.en'}", f"--data.train_tgt={folder / target}",
            f"--data.valid_src={folder / 'valid.en'}", f"--data.valid_tgt={folder / 'valid.de'}",
            "--data.test_src=", "--data.test_tgt="]


def train(run: Run, out: Path, corpus: Path) -> float:
    """Train `run` into out/NAME (seconds; 0 where it was there already)."""
    folder = out / run.name
    if (folder / "best.safetensors").is_file():
        return 0.0
    shutil.rmtree(folder, ignore_errors=True)
    if run.base:  # a decoding fault: the base run's weights, its decode settings changed
        shutil.copytree(out / run.base, folder, ignore=shutil.ignore_patterns("checkpoints", "prepared", "ctranslate2"))
        cfg = RunDir(folder).read_config()
        RunDir(folder).write_config(replace(cfg, decode=replace(cfg.decode, **run.decode)))
        return 0.0
    start = time.perf_counter()
    recipe = RECIPE if run.preset == "multi30k_en_de" else []
    cfg = load_config(run.preset, [*recipe, *corpus_overrides(run, corpus), *run.overrides])
    fit(cfg, folder, progress=False)
    return time.perf_counter() - start


def judge(run: Run, found: list[str]) -> dict:
    """The run's row: its true positives, misses and false alarms."""
    return {"run": run.name, "cause": run.cause, "expected": list(run.expected), "allowed": list(run.may_follow),
            "found": found, "missed": [i for i in run.expected if i not in found],
            "false": [i for i in found if i not in run.expected and i not in run.may_follow]}


def scores(rows: list[dict]) -> dict:
    """Per id: true positives, misses, false alarms, recall and precision; and over all ids."""
    ids, totals = {}, {"tp": 0, "fn": 0, "fp": 0}
    for check in CHECKS:
        tp = sum(check in r["expected"] and check in r["found"] for r in rows)
        fn = sum(check in r["missed"] for r in rows)
        fp = sum(check in r["false"] for r in rows)
        ids[check] = {"tp": tp, "fn": fn, "fp": fp, "recall": tp / (tp + fn) if tp + fn else None,
                      "precision": tp / (tp + fp) if tp + fp else None}
        totals = {"tp": totals["tp"] + tp, "fn": totals["fn"] + fn, "fp": totals["fp"] + fp}
    recall = totals["tp"] / max(totals["tp"] + totals["fn"], 1)
    precision = totals["tp"] / max(totals["tp"] + totals["fp"], 1)
    return {"ids": ids, "recall": recall, "precision": precision}


def print_table(rows: list[dict], summary: dict) -> None:
    print("| run | injected cause | expected | found |\n| --- | --- | --- | --- |")
    for r in rows:
        found = ", ".join(f"**{i}**" if i in r["false"] else i for i in r["found"]) or "none"
        print(f"| {r['run']} | {r['cause'] or 'healthy'} | {', '.join(r['expected']) or 'none'} | {found} |")
    print("\n| id | fired where expected | missed | false alarms | recall | precision |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for check, s in summary["ids"].items():
        fmt = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"| {check} | {s['tp']} | {s['fn']} | {s['fp']} | {fmt(s['recall'])} | {fmt(s['precision'])} |")
    print(f"\nrecall {summary['recall']:.2f}, precision {summary['precision']:.2f} over {len(rows)} runs")
    for check, why in NOT_PROVOKED.items():
        print(f"{check}: not provoked as a root cause: {why}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/doctor_zoo"), help="run folders (default runs/doctor_zoo)")
    parser.add_argument("--runs", help=f"comma-separated runs (default all: {', '.join(r.name for r in RUNS)})")
    parser.add_argument("--diagnose-only", action="store_true", help="train nothing; diagnose the runs under --out")
    parser.add_argument("--json", action="store_true", help="last line: the runs and the scores as JSON")
    parser.add_argument("--no-record", action="store_true", help=f"do not append the result to {RESULTS.name}")
    args = parser.parse_args()
    chosen = [r for r in RUNS if args.runs is None or r.name in args.runs.split(",")]
    if args.runs and len(chosen) != len(args.runs.split(",")):
        parser.error(f"--runs: known runs are {', '.join(r.name for r in RUNS)}")
    if not args.diagnose_only and any(r.preset == "multi30k_en_de" for r in chosen) and not DATA.is_dir():
        parser.error(f"{DATA}: the Multi30k folder is missing")
    corpus = args.out / "corpus"
    rows, seconds = [], {}
    for run in chosen:
        if not args.diagnose_only:
            write_corpus(corpus)
            seconds[run.name] = round(train(run, args.out, corpus), 1)
        if not (args.out / run.name / "config.yaml").is_file():
            print(f"{run.name}: not trained under {args.out}; skipped", file=sys.stderr)
            continue
        case = open_case(str(args.out / run.name))
        report = diagnose(case)
        row = judge(run, [f.id for f in report.findings])
        row["measured"] = {key: round(value, 4) for key, value in case.measured.items()}
        rows.append(row)
    summary = scores(rows)
    print_table(rows, summary)
    record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "peaks_gflops": matmul_peaks(torch.device("cpu")),
              "train_seconds": seconds, "runs": rows, **summary}
    if not args.no_record and rows:
        with open(RESULTS, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    if args.json:
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
