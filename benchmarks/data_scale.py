"""Large corpora: preparing N sentence pairs, and what training on them costs a process.

Makes a synthetic corpus of N pairs of about 26 words a side (two Multi30k sentences
joined, drawn at random: realistic words and lengths, ~10k-word vocabularies), then

  1. `transformer-mt prepare` (small preset): wall time and the peak resident memory of
     the whole process tree (the main process and its encoding workers, summed);
  2. `transformer-mt train` on the prepared run, one process: seconds from start to the
     first logged step, and its private (anonymous) memory at the end of training;
  3. `train` again on the finished run: how long a resume takes to be ready (it then stops);
  4. the same with two processes under torchrun (private memory of each rank);
  5. for comparison, 1. to 3. on Multi30k itself (29,000 pairs).

    python benchmarks/data_scale.py --pairs 4500000 --json

The corpus and runs live in a temporary folder (about 320 bytes per pair on disk).
Reads /proc: Linux only."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
STEPS = 5


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def make_corpus(folder: Path, pairs: int, seed: int = 1) -> None:
    """train.{en,de}: `pairs` lines, each two random Multi30k training pairs joined;
    valid.{en,de}: the first 200 Multi30k validation pairs."""
    en, de = read_gz(MULTI30K / "train.en.gz"), read_gz(MULTI30K / "train.de.gz")
    rng = random.Random(seed)
    with open(folder / "train.en", "w", encoding="utf-8") as src, open(folder / "train.de", "w", encoding="utf-8") as tgt:
        for start in range(0, pairs, 100_000):
            picks = [(rng.randrange(len(en)), rng.randrange(len(en))) for _ in range(min(100_000, pairs - start))]
            src.write("".join(f"{en[a]} {en[b]}\n" for a, b in picks))
            tgt.write("".join(f"{de[a]} {de[b]}\n" for a, b in picks))
    for lang in ("en", "de"):
        lines = read_gz(MULTI30K / f"val.{lang}.gz")[:200]
        (folder / f"valid.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def kib(pid: int, path: str, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """pid and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(child) for child in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def python_children(pid: int) -> list[int]:
    """The Python processes below a torchrun launcher (its ranks), or the process itself."""
    below = [p for p in descendants(pid) if p != pid]
    ranks = [p for p in below if "RANK=" in _environ(p)]
    return ranks or [pid]


def _environ(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def watch(command: list[str], metrics: Path | None = None) -> dict:
    """Run `command`; sample the tree's summed RSS and the ranks' anonymous memory every
    0.2 s; note when `metrics` (metrics.jsonl) first holds a training step."""
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}
    env = {k: v for k, v in env.items() if v}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    peak_tree, anon, first_step = 0, {}, None
    while process.poll() is None:
        peak_tree = max(peak_tree, sum(kib(p, "status", "VmRSS") for p in descendants(process.pid)))
        for p in python_children(process.pid):
            value = kib(p, "smaps_rollup", "Anonymous")
            if value:
                anon[p] = value  # the last sample: after the steps, before the process exits
        if first_step is None and metrics is not None and metrics.is_file() and '"event": "train"' in metrics.read_text():
            first_step = time.perf_counter() - start
        time.sleep(0.2)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit code {process.returncode}")
    return {"seconds": time.perf_counter() - start, "peak_tree_mb": peak_tree / 1024,
            "first_step_seconds": first_step, "private_mb": [v / 1024 for v in anon.values()]}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "transformer_mt", "-q", *args]


def data_overrides(folder: Path, train: tuple[Path, Path]) -> list[str]:
    return [f"--data.train_src={train[0]}", f"--data.train_tgt={train[1]}",
            f"--data.valid_src={folder}/valid.en", f"--data.valid_tgt={folder}/valid.de", "--data.test_src=",
            "--data.test_tgt=", f"--train.max_steps={STEPS}", "--train.log_every=1", "--train.max_seconds=0",
            f"--train.valid_every={STEPS}", "--decode.max_len_b=5"]


def measure(folder: Path, train: tuple[Path, Path], work: Path, two_processes: bool) -> dict:
    """Prepare a corpus into a run, then train it with one (and two) processes."""
    run = work / "run"
    prepared = watch(cli("prepare", "small", "--run", str(run), "--no-progress", *data_overrides(folder, train)))
    result = {"prepare_seconds": prepared["seconds"], "prepare_peak_rss_mb": prepared["peak_tree_mb"]}
    if two_processes:  # the same prepared run for the torchrun measurement (hard links: no copy)
        subprocess.run(["cp", "-al", str(run), str(work / "run2")], check=True)
    trained = watch(cli("train", "--run", str(run), "--no-progress"), run / "metrics.jsonl")
    result.update(first_step_seconds=trained["first_step_seconds"], train_private_mb=max(trained["private_mb"]))
    # a resume of the finished run: start, map the data, plan the epoch, load the checkpoint, stop
    result["resume_seconds"] = watch(cli("train", "--run", str(run), "--no-progress"))["seconds"]
    if two_processes:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   "-m", "transformer_mt", "--", "-q", "train", "--run", str(work / "run2"), "--no-progress"]
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            two = watch(command, work / "run2" / "metrics.jsonl")
        finally:
            del os.environ["OMP_NUM_THREADS"]
        result.update(first_step_seconds_2proc=two["first_step_seconds"],
                      train_private_mb_per_rank_2proc=max(two["private_mb"]))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="synthetic pairs (default 1,000,000)")
    parser.add_argument("--keep", help="keep the corpus and runs in this folder")
    parser.add_argument("--json", action="store_true", help="last line: a JSON summary")
    args = parser.parse_args()
    if sys.platform != "linux":
        parser.error("reads /proc: Linux only")
    if not MULTI30K.is_dir():
        parser.error(f"{MULTI30K}: missing (the synthetic corpus is made from Multi30k)")
    root = Path(args.keep or tempfile.mkdtemp(prefix="data_scale-"))
    try:
        corpus, baseline = root / "corpus", root / "multi30k"
        for folder in (corpus, baseline):
            folder.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        make_corpus(corpus, args.pairs)
        make_corpus(baseline, 0)
        print(f"made {args.pairs:,} synthetic pairs in {time.perf_counter() - t:.0f} s")
        big = measure(corpus, (corpus / "train.en", corpus / "train.de"), root / "big", two_processes=True)
        small = measure(baseline, (MULTI30K / "train.en.gz", MULTI30K / "train.de.gz"), root / "small", False)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows = [("prepare seconds", "prepare_seconds"), ("prepare peak RSS MB (tree)", "prepare_peak_rss_mb"),
            ("first step seconds (1 proc)", "first_step_seconds"), ("private MB (1 proc)", "train_private_mb"),
            ("resume of a finished run, seconds", "resume_seconds"),
            ("first step seconds (2 proc)", "first_step_seconds_2proc"),
            ("private MB per rank (2 proc)", "train_private_mb_per_rank_2proc")]
    print(f"{'':34} {args.pairs:>14,} {'Multi30k 29,000':>16}")
    for label, key in rows:
        value = lambda d: f"{d[key]:,.1f}" if d.get(key) is not None else "-"  # noqa: E731
        print(f"{label:34} {value(big):>14} {value(small):>16}")
    if args.json:
        summary = {"pairs": args.pairs, **{key: round(big[key], 1) for _, key in rows if big.get(key) is not None},
                   "multi30k_train_private_mb": round(small["train_private_mb"], 1)}
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
