"""A search at a budget's step count (issue 25): train candidates with the plan a CPU budget
reached, fixed by hand, on whatever device is fastest (a lent GPU), and record val BLEU.

    python benchmarks/step_proxy_search.py --preset multi30k_en_de --steps 7600 --stands-for 60-minute \\
        --candidate seed2=--train.seed=2 --candidate wd01=--train.weight_decay=0.1 --parallel 5

A budgeted run's plan is a number of steps N, a linear decay of the learning rate to ~0 at N,
validation points and the last 5 snapshots averaged (training/budget.py). What the model learns
depends on that plan, not on the machine that runs it, so the same config with the plan given
as overrides (--train.budget_minutes=0 --train.schedule=linear --train.max_steps=N
--train.valid_every=N/2 --train.average_last=5 --train.average_every=N/50) trains the same
model anywhere, up to floating-point noise; a candidate whose CPU step is slower or faster
than the recipe's gets its own N (--candidate NAME@STEPS=...). The candidates train at once,
`--parallel` at a time (small models leave a GPU mostly idle), each as a `transformer-mt train`
process logging to --out/NAME.log; each finished run is appended to --results with its overrides, plan, device and
validation points (docs/benchmarks.md, "A search on a lent GPU"). Only validation is scored:
the test sets stay for the CPU runs that confirm a winner (benchmarks/time_to_quality.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from time_to_quality import DATA, LANGUAGES, data_overrides  # noqa: E402
from transformer_mt.runs import read_events  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "step_proxy_search.jsonl"


@dataclass
class Candidate:
    """One run of the search: a name, its config overrides and its step count."""

    name: str
    overrides: list[str]
    steps: int
    process: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0


def parse_candidate(text: str, default_steps: int) -> Candidate:
    """NAME[@STEPS]=OVERRIDE[,OVERRIDE...] -> a Candidate ("base=" for the recipe itself)."""
    head, sep, rest = text.partition("=")
    name, _, steps = head.partition("@")
    if not sep or not name:
        raise SystemExit(f"--candidate {text!r}: write NAME[@STEPS]=OVERRIDE[,OVERRIDE...] (NAME= for none)")
    if steps and not steps.isdigit():
        raise SystemExit(f"--candidate {text!r}: STEPS after @ must be a whole number")
    overrides = [o for o in rest.split(",") if o]
    bad = [o for o in overrides if not o.startswith("--") or "=" not in o]
    if bad:
        raise SystemExit(f"--candidate {name}: {bad[0]!r} is not an override; write --section.key=value")
    return Candidate(name, overrides, int(steps) if steps else default_steps)


def plan_overrides(steps: int) -> list[str]:
    """The plan a budget of `steps` steps fixes (training/budget.py), given by hand."""
    return [f"--train.max_steps={steps}", "--train.budget_minutes=0", "--train.schedule=linear",
            f"--train.valid_every={steps // 2}", "--train.average_last=5",
            f"--train.average_every={max(1, steps // 50)}", "--train.patience=0", "--train.max_seconds=0"]


def command(candidate: Candidate, preset: str, run: Path, data: Path) -> list[str]:
    """The `transformer-mt train` command line of one candidate."""
    src, tgt = LANGUAGES[preset]
    return [sys.executable, "-m", "transformer_mt", "train", preset, "--run", str(run),
            *data_overrides(data, src, tgt), *plan_overrides(candidate.steps), *candidate.overrides]


def record(candidate: Candidate, args: argparse.Namespace, device: str, run: Path) -> dict:
    """The results-file line of a finished candidate: its best validation (the default model's)."""
    events = [e for e in read_events(run / "metrics.jsonl") if e.get("event") in ("valid", "average")]
    chosen = max(events, key=lambda e: e.get("bleu", 0.0))
    return {"name": candidate.name, "preset": args.preset, "stands_for": args.stands_for, "steps": candidate.steps,
            "overrides": candidate.overrides, "plan": plan_overrides(candidate.steps), "device": device,
            "parallel_runs": args.parallel, "train_seconds": round(candidate.seconds, 1),
            "valid_bleu": round(chosen["bleu"], 2), "valid_loss": chosen.get("valid_loss"),
            "default_model": chosen["event"], "valid_points": events, "date": date.today().isoformat()}


def device_name() -> str:
    """What trains: the GPU's name, or the CPU."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, CUDA bf16 autocast, torch {torch.__version__}"
    return f"CPU, torch {torch.__version__}"


def run_all(candidates: list[Candidate], args: argparse.Namespace, finished) -> int:
    """Train the candidates, `args.parallel` at a time, handing each finished one to
    `finished` as it ends (a search cut short keeps what it got); how many failed."""
    waiting, running, failed = list(candidates), [], 0
    while waiting or running:
        while waiting and len(running) < args.parallel:
            c = waiting.pop(0)
            args.out.mkdir(parents=True, exist_ok=True)
            with (args.out / f"{c.name}.log").open("w") as log:  # the child keeps its own handle
                c.process = subprocess.Popen(command(c, args.preset, args.out / c.name, args.data),
                                             stdout=log, stderr=subprocess.STDOUT, text=True)
            c.started = time.perf_counter()
            running.append(c)
        time.sleep(1.0)
        for c in [c for c in running if c.process.poll() is not None]:
            running.remove(c)
            c.seconds = time.perf_counter() - c.started
            if c.process.returncode == 0:
                finished(c)
            else:
                failed += 1
                tail = (args.out / f"{c.name}.log").read_text().splitlines()[-3:]
                print(f"{c.name}: failed (exit {c.process.returncode}): {' | '.join(tail)}", flush=True)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", required=True, choices=sorted(LANGUAGES))
    parser.add_argument("--steps", type=int, required=True, help="the steps the CPU budget reached (each plan's N)")
    parser.add_argument("--stands-for", required=True, help="which budget the plan stands for, e.g. 60-minute")
    parser.add_argument("--candidate", action="append", required=True,
                        help="NAME[@STEPS]=OVERRIDE[,OVERRIDE...]; repeat for each run (NAME= for the recipe)")
    parser.add_argument("--parallel", type=int, default=4, help="runs at once (default 4)")
    parser.add_argument("--data", type=Path, default=DATA, help="a Multi30k folder (default ../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=Path("runs/step_proxy"), help="run folders")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"JSONL to append to (default {RESULTS})")
    parser.add_argument("--json", action="store_true", help="last line: the records as JSON")
    args = parser.parse_args()
    if args.steps < 2 or args.parallel < 1:
        raise SystemExit("--steps must be at least 2 and --parallel at least 1")
    candidates = [parse_candidate(text, args.steps) for text in args.candidate]
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise SystemExit(f"--candidate names must differ: {', '.join(names)}")
    taken = [n for n in names if (args.out / n).exists()]
    if taken:
        raise SystemExit(f"{args.out / taken[0]} exists: choose another --out or candidate name")
    device = device_name()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    records = []

    def finished(c: Candidate) -> None:
        records.append(record(c, args, device, args.out / c.name))
        with args.results.open("a") as f:
            f.write(json.dumps(records[-1]) + "\n")
        print(f"{c.name}: val BLEU {records[-1]['valid_bleu']:.2f} after {c.seconds / 60:.1f} min", flush=True)

    failed = run_all(candidates, args, finished)
    print(f"{'candidate':<16}{'steps':>7}{'val BLEU':>10}{'val loss':>10}{'minutes':>9}  default")
    for r in records:
        print(f"{r['name']:<16}{r['steps']:>7}{r['valid_bleu']:>10.2f}{r['valid_loss']:>10.3f}"
              f"{r['train_seconds'] / 60:>9.1f}  {r['default_model']}")
    if args.json:
        print(json.dumps(records))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
