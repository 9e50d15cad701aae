"""A learner's own Transformer trained here, beside the toolkit's (issue 93): the study notes'
model file as written, with its three-line fix, and a model in seed 003's style, each trained
through `train --model` on the same recipe and seed as the toolkit's own model.

    python benchmarks/learner_models.py --recipe demo                      # every model, seed 1
    python benchmarks/learner_models.py --recipe multi30k_30 --models ours,notes_fixed --seeds 1,2
    python benchmarks/learner_models.py --recipe demo --json               # last line: a JSON summary

The models (their files are the check's test cases, written from the paper in the notes'
conventions; the notes themselves are never copied):
- ours: the recipe's preset as it is;
- notes: tests/check_cases/cases.py NOTES, the Annotated Transformer's classes with the make_model
  of the notes' Modular_Transformer.py: deep copies never re-drawn, nn.Embedding's N(0, 1) times
  sqrt(d_model) (`check` fails cloned_init and embedding_init);
- notes_fixed: the same with the Annotated Transformer's three Xavier lines (tests/check_cases/annotated.py);
- seed003: seed 003's components assembled as its tutorial does, post-norm, forward giving logits
  (tests/check_cases/tutorial.py), with the Xavier loop;
- seed003_pre_norm: the same with each Norm moved before its sub-layer and a final Norm in each
  stack (tests/check_cases/cases.py pre_norm), the layer order of the tutorial those components
  come from.

The recipes: demo (the `demo` preset: 1,200 steps within 280 s, numbers task; test exact match
and character BLEU on the 1,000 held-out numbers) and multi30k_30 (`multi30k_en_de` with
--train.budget_minutes=30 --model.dropout=0.2, the README's half hour; cased sacreBLEU on
test_2016_flickr); multi30k_30_warmup1000, the same with the warmup over 1,000 steps (a peak
learning rate sqrt(2) higher, 0.007), for a host where a model takes more than 0.9 s a step (a
budget refuses a warmup of 2,000 steps that does not fit its 30 minutes); multi30k_30_lr_scale1.25,
the same with half the preset's peak (0.0025 for 0.0049), for post-norm code. A learner's model is
built at the preset's n_layers, d_model, d_ff, n_heads and dropout; the preset's other model keys
(pre-norm, tied embeddings, attention_dropout 0, ...) describe ours only: their code decides.
Same data, subwords, batches, schedule, budget, label smoothing, precision and validation.

Each run reports the test score, the steps it trained, its training speed (target tokens per
second, the median of its logged steps) and its decoding speed (test sentences per second with
the recipe's beam, one process on this host; a learner's model decodes without a cache, the prefix
again at each step, ours with one). Records are appended to --results with the host's matmul
peaks."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402

from _timing import matmul_peaks  # noqa: E402
from check_cases.cases import HERE as CASES, NOTES, OPEN_CHOICES  # noqa: E402
from transformer_mt.common.config import load_config  # noqa: E402
from transformer_mt.common.errors import UserError  # noqa: E402
from transformer_mt.common.evaluation import score  # noqa: E402
from transformer_mt.common.files import atomic_open  # noqa: E402
from transformer_mt.data.corpus import read_parallel  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.runs.directory import RunDir, read_events  # noqa: E402
from transformer_mt.training import fit  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "learner_models.jsonl"
MODELS = ("ours", "notes", "notes_fixed", "seed003", "seed003_pre_norm")
RECIPES = {  # name -> (preset, overrides)
    "demo": ("demo", []),
    "multi30k_30": ("multi30k_en_de", ["--train.budget_minutes=30", "--model.dropout=0.2"]),
    "multi30k_30_warmup1000": ("multi30k_en_de", ["--train.budget_minutes=30", "--model.dropout=0.2",
                                                  "--train.warmup_steps=1000"]),
    "multi30k_30_lr_scale1.25": ("multi30k_en_de", ["--train.budget_minutes=30", "--model.dropout=0.2",
                                                    "--train.lr_scale=1.25"]),
}


def model_file(model: str, folder: Path) -> str | None:
    """The --model.file of `model` (None: ours), written into `folder`."""
    if model == "ours":
        return None
    if model == "notes":
        return f"{NOTES.write(folder)}:make_model"
    if model == "seed003_pre_norm":
        return f"{next(case for case in OPEN_CHOICES if case.name == 'pre_norm').write(folder)}:get_model"
    return f"{CASES / ('annotated.py' if model == 'notes_fixed' else 'tutorial.py')}:" + (
        "make_model" if model == "notes_fixed" else "get_model")


def test_pairs(run: Path, recipe: str):
    """The recipe's test set: the demo's held-out numbers, or test_2016_flickr."""
    if recipe == "demo":
        return read_parallel(*(RunDir(run).data / f"test.{side}" for side in ("src", "tgt")))
    data = load_config(run / "config.yaml").data
    return read_parallel(Path(data.test_src), Path(data.test_tgt))


def train_and_measure(model: str, recipe: str, seed: int, out: Path) -> dict:
    """Train one model on one recipe and seed into `out`; its scores and speeds."""
    preset, overrides = RECIPES[recipe]
    out.mkdir(parents=True, exist_ok=True)
    file = model_file(model, out)
    args = [*overrides, f"--train.seed={seed}"] + ([f"--model.file={file}"] if file else [])
    run = out / f"{recipe}_{model}_seed{seed}"
    fit(load_config(preset, args), run, progress=False)
    events = read_events(run / "metrics.jsonl")
    train = [e for e in events if e.get("event") == "train" and e["step"] > 1]
    cfg = load_config(run / "config.yaml")
    pairs = test_pairs(run, recipe)
    translator = Translator.from_run(run, device="cpu")
    start = time.perf_counter()
    hypotheses = translator.translate(pairs.src)
    seconds = time.perf_counter() - start
    scores = score(hypotheses, pairs.tgt, tokenize=cfg.data.bleu_tokenize)
    return {"date": date.today().isoformat(), "recipe": recipe, "model": model, "seed": seed,
            "file": file and Path(file.split(":")[0]).name, "steps": max(e["step"] for e in events),
            "train_seconds": round(train[-1]["elapsed"], 1) if train else None,
            "train_tokens_per_s": round(statistics.median(e["tokens_per_s"] for e in train)) if train else None,
            "test_exact_match": round(scores.exact_match, 4), "test_bleu": round(scores.bleu, 2),
            "test_chrf": round(scores.chrf, 2), "bleu_tokenize": cfg.data.bleu_tokenize, "beam": cfg.decode.beam,
            "decode_sentences_per_s": round(len(pairs.src) / seconds, 1), "test_sentences": len(pairs.src),
            "threads": torch.get_num_threads()}


def append(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text(encoding="utf-8") if path.is_file() else ""
    with atomic_open(path, "w") as handle:
        handle.write(lines + json.dumps(record) + "\n")


def table(records: list[dict]) -> str:
    head = ("| recipe | model | seed | steps | test exact | test BLEU | train tokens/s | decode sentences/s |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = [f"| {r['recipe']} | {r['model']} | {r['seed']} | {r['steps']} | {100 * r['test_exact_match']:.1f}% | "
            f"{r['test_bleu']:.2f} | {r['train_tokens_per_s']:,} | {r['decode_sentences_per_s']:.1f} |" for r in records]
    return "\n".join([head, *rows])


def read_records(path: Path = RESULTS) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def page_table(records: list[dict]) -> str:
    """The table of docs/your_model.md: each recipe and model, means over its seeds (the newest
    record of each recipe, model and seed): the test score, steps, training and decoding speed."""
    newest = {(r["recipe"], r["model"], r["seed"]): r for r in records}
    head = ("| recipe | model | seeds | test score | steps | train tokens/s | decode sentences/s |\n"
            "| --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for recipe in RECIPES:
        for model in MODELS:
            runs = [r for (rec, mod, _), r in sorted(newest.items()) if (rec, mod) == (recipe, model)]
            if not runs:
                continue
            mean = lambda key: statistics.fmean(r[key] for r in runs)  # noqa: E731
            found = (f"exact {100 * mean('test_exact_match'):.1f}%" if recipe == "demo"
                     else f"BLEU {mean('test_bleu'):.2f}")
            rows.append(f"| {recipe} | {model} | {len(runs)} | {found} | {mean('steps'):,.0f} | "
                        f"{mean('train_tokens_per_s'):,.0f} | {mean('decode_sentences_per_s'):,.1f} |")
    return "\n".join([head, *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=RECIPES, default="demo")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--seeds", default="1", help="comma-separated train.seed values")
    parser.add_argument("--out", type=Path, default=Path("runs/learner_models"), help="where the runs go")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSONL file records are appended to")
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    parser.add_argument("--page", action="store_true", help="print the table of docs/your_model.md from --results "
                                                             "and train nothing")
    args = parser.parse_args()
    if args.page:
        print(page_table(read_records(args.results)))
        return 0
    models = args.models.split(",")
    if unknown := set(models) - set(MODELS):
        parser.error(f"unknown models: {', '.join(sorted(unknown))} (choose from {', '.join(MODELS)})")
    peaks = {key: round(value, 1) for key, value in matmul_peaks(torch.device("cpu")).items()}
    print(f"host matmul peaks (GFLOP/s): fp32 {peaks['fp32']:.0f}, bf16 {peaks['bf16']:.0f}", flush=True)
    records = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for model in models:
            try:
                record = {**train_and_measure(model, args.recipe, seed, args.out), "peaks_gflops": peaks}
            except UserError as err:  # a refusal (the warmup does not fit the budget here): the others still run
                print(f"{args.recipe} {model} seed {seed}: refused: {err}", flush=True)
                continue
            append(record, args.results)
            records.append(record)
            print(json.dumps(record), flush=True)
    print(table(records))
    if args.json:
        print(json.dumps({"records": records}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
