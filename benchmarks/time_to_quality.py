"""Time to quality (issue 25): train a Multi30k recipe under wall-clock budgets
(train.budget_minutes) and score each run's default model on the test sets.

    python benchmarks/time_to_quality.py --preset multi30k_en_de --budgets 30 --override=--model.dropout=0.2
    python benchmarks/time_to_quality.py --preset multi30k_de_en --budgets 30,60 --chart docs/time_to_quality.png
    python benchmarks/time_to_quality.py --preset multi30k_en_de --budgets 60 --override=--train.precision=fp32

Each run trains with --train.budget_minutes=B (the run fits its steps, schedule, validation
and averaging into B minutes on its host; training/plan.py), then translates
test_2016_flickr and test_2017_flickr with the model `translate` loads by default (the
average or the best checkpoint, chosen on validation) and reports cased sacreBLEU, BLEU on
lowercased 13a-tokenized text and chrF, and the validation BLEU that selected it. Every
finished run is appended to --results (a committed JSONL file, so a search can be continued
and reproduced: config overrides, budget, steps, validation and test scores, the host's
matmul peaks, and a fingerprint of the config trained); a run already there with the same
preset, budget and config is not trained again unless --again (the newer record then counts).
A seed is not a recipe: --override=--train.seed=2 trains (and records) a run of its own that
the table and the chart list beside the preset's seed. --chart draws test_2016 BLEU against
training minutes per preset (a marker per run, a line through each budget's mean; a run that
trained 1.5 times the others' steps per minute or more, on a faster host, is hollow and left out
of the mean), with the 2-hour recipe's published BLEU as a reference line.

--lowercase trains and scores on lowercased copies of the data folder's files (written under
--out): Transformer-Tiny's 41.02 (Wu et al., ACL 2021), which issue 25 measures the recipe
against, was trained and tested on Multi30k's lowercased, tokenized text (the multimodal
translation task's *.lc.norm.tok files), so a lowercased run is the like-for-like comparison for
the lowercased-tokenized column. Its output is lowercase, so its cased column means nothing: it
is a recipe of its own (its fingerprint says so), listed apart in the table and left off the
chart of cased BLEU."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import math
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _timing import matmul_peaks  # noqa: E402
from transformer_mt.common.config import RETIRED, Config, load_config, parse_override  # noqa: E402
from transformer_mt.data.corpus import read_parallel  # noqa: E402
from transformer_mt.common.device import reuse_freed_memory  # noqa: E402
from transformer_mt.common.evaluation import score  # noqa: E402
from transformer_mt.common.files import atomic_open  # noqa: E402
from transformer_mt.runs.directory import RunDir, read_events  # noqa: E402
from transformer_mt.training import fit  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
RESULTS = Path(__file__).resolve().parent / "results" / "time_to_quality.jsonl"
LANGUAGES = {"multi30k_en_de": ("en", "de"), "multi30k_de_en": ("de", "en")}
# The recipes before issue 25 (3 x 256, 10,000 steps or 2 hours): (training minutes, cased test_2016 BLEU)
TWO_HOUR_RECIPE = {"multi30k_en_de": (120, 38.8), "multi30k_de_en": (85, 41.4)}
TEST_SETS = ("test_2016_flickr", "test_2017_flickr")
FASTER_HOST = 1.5  # a run that trained this many times the charted runs' median steps per minute: drawn apart


def data_overrides(folder: Path, src: str, tgt: str) -> list[str]:
    """The Multi30k files of `folder` for one direction: train, val (selection), test_2016."""
    files = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
    return [f"--data.{split}_{side}={folder / f'{name}.{lang}.gz'}"
            for split, name in files.items() for side, lang in (("src", src), ("tgt", tgt))]


def lowercased_copy(folder: Path, out: Path) -> Path:
    """`out` holding every SPLIT.LANG.gz of `folder` lowercased line by line (str.lower, as
    Moses' lowercase.perl), each written atomically; the lowercased folder, for --data."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.glob("*.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            text = handle.read()
        with atomic_open(out / path.name, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as handle:
            handle.write(text.lower())
    return out


def test_scores(run: Path, folder: Path, src: str, tgt: str) -> dict[str, dict[str, float]]:
    """Cased BLEU, lowercased-tokenized BLEU and chrF of the run's default model on each
    test set there is."""
    translator = Translator.from_run(run)
    scores = {}
    for name in TEST_SETS:
        if (folder / f"{name}.{src}.gz").is_file() and (folder / f"{name}.{tgt}.gz").is_file():
            test = read_parallel(folder / f"{name}.{src}.gz", folder / f"{name}.{tgt}.gz")
            result = score(translator.translate(test.src), test.tgt, lowercase_tokenized=True,
                           tokenize=RunDir(run).read_config().data.bleu_tokenize)
            scores[name] = {"bleu": result.bleu, "bleu_lc_tok": result.bleu_lc_tok, "chrf": result.chrf}
    return scores


def run_folder(out: Path, preset: str | Path, budget: float, overrides: list[str], again: bool,
               lowercase: bool = False) -> Path:
    """The folder of a run of `preset` with `overrides` under `budget` minutes, named by the
    recipe's fingerprint: a run left there is resumed only if it trains the same config (a
    preset changed since has a new folder), and `again` puts a new run beside the earlier ones."""
    name = f"{Path(preset).stem}_{budget:g}m_{recipe(preset, overrides, lowercase)}"
    run, n = out / name, 1
    while run.exists() and again:
        n += 1
        run = out / f"{name}_{n}"
    return run


def train_and_score(preset: str, budget: float, overrides: list[str], args: argparse.Namespace) -> dict:
    """One run of `preset` under `budget` minutes, scored; its record for the results file."""
    src, tgt = LANGUAGES[preset]
    run = run_folder(args.out, preset, budget, overrides, args.again, args.lowercase)
    cfg = load_config(preset, data_overrides(args.data, src, tgt) + [f"--train.budget_minutes={budget}"] + overrides)
    start = time.perf_counter()
    trainer = fit(cfg, run, progress=False)
    events = read_events(run / "metrics.jsonl")
    valid = [e for e in events if e.get("event") in ("valid", "average")]
    chosen = max((e.get("bleu", 0.0) for e in valid), default=None)
    return {"preset": preset, "budget_minutes": budget, "overrides": overrides, "steps": trainer.state.step,
            "train_minutes": trainer.state.elapsed / 60, "wall_minutes": (time.perf_counter() - start) / 60,
            "valid_bleu": chosen, "test": test_scores(run, args.data, src, tgt), "run": str(run),
            "recipe": recipe(preset, overrides, args.lowercase), "date": date.today().isoformat(),
            "peaks_gflops": args.peaks, "torch": torch.__version__, **({"lowercase": True} if args.lowercase else {})}


def recipe(preset: str | Path, overrides: list[str], lowercase: bool = False) -> str:
    """A fingerprint of what a run trains: the config of `preset` with `overrides`, without
    the data files and the budget (given apart), and whether the text was lowercased
    (--lowercase; a cased run's fingerprint is as it was before that option). A run recorded
    with overrides counts as a run of the preset once the preset has become that config (the
    search's winner), and a preset that changed since a record no longer matches it. The keys
    of FINGERPRINTED are in it whatever their value, any other key only where it differs from
    its default: an option added to the config leaves every recorded fingerprint as it was."""
    config, defaults = load_config(preset, overrides).to_dict(), Config().to_dict()
    kept = {section: {key: value for key, value in values.items()
                      if key in FINGERPRINTED[section].split() or value != defaults[section][key]}
            for section, values in config.items()}
    for dotted, (former_default, _) in RETIRED.items():  # a retired key, as the records began: its default
        section, key = dotted.split(".")
        kept[section][key] = former_default
    kept["data"] = {k: v for k, v in kept["data"].items() if k not in DATA_FILES}
    if lowercase:
        kept["data"]["lowercased_text"] = True
    kept["train"].pop("budget_minutes", None)
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


DATA_FILES = {"train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "train_text", "valid_text"}
# The keys fingerprinted whatever their value, as they were when the records began (data files and
# the budget are given apart): a frozen list, never extended, so that the records keep matching.
FINGERPRINTED = {
    "model": "n_layers d_model d_ff n_heads dropout attention_dropout activation_dropout norm_first tie_embeddings "
             "share_vocab max_positions src_vocab_size tgt_vocab_size activation positional_layout positional arch "
             "scale_embeddings",
    "data": "task task_size vocab_size vocab_type vocab_sample joint_vocab max_tokens batch_sentences max_len "
            "max_len_ratio block_size",
    "train": "seed schedule lr_scale lr warmup_steps adam_betas adam_eps label_smoothing max_steps max_seconds "
             "accumulate clip_norm precision device log_every valid_every patience early_stop_metric keep_last "
             "average_last average_every init_from init_checkpoint",
    "decode": "beam length_penalty max_len_a max_len_b batch_tokens precision",
}


def key(record: dict) -> tuple:
    return record["preset"], float(record["budget_minutes"]), record["recipe"]


# The variants of today's recipes that the table and the chart show besides the recipe itself:
# issue 25 asks what the recipe reaches forced to fp32, as on a CPU without fast bf16; the
# multi30k hours drop 0.3, their half hours 0.2 (docs/benchmarks.md#what-was-tried-for-the-multi30k-recipes).
VARIANTS = {"": [], " (fp32)": ["--train.precision=fp32"], " (dropout 0.2)": ["--model.dropout=0.2"]}
# The recipe and its variants trained and scored on lowercased text (--lowercase): in the table
# (lowercased-tokenized BLEU and chrF only) with this after their label, not on the chart of cased BLEU.
LOWERCASED = " (lowercased text)"


def seed_of(record: dict) -> str:
    """The seed a record was trained with through `--train.seed=N`, or "" (the preset's own)."""
    seeds = [value for path, value in map(parse_override, record.get("overrides", [])) if path == ["train", "seed"]]
    return str(seeds[-1]) if seeds else ""


def todays_runs(records: list[dict], preset: str) -> dict[str, list[dict]]:
    """The runs of `preset`'s recipe as it is today and of each of its VARIANTS that is not
    the recipe itself (a preset that already drops 0.2), and of each on lowercased text (its
    label + LOWERCASED), by budget. A run with another seed (`--train.seed=N`) is a run of the same
    recipe: it is listed with the others, so the table and the chart show the spread between
    seeds instead of one lucky or unlucky run."""
    seeds = sorted({seed_of(r) for r in records if r["preset"] == preset} - {""})
    runs, seen = {}, set()
    for lowercase in (False, True):
        for label, overrides in VARIANTS.items():
            fingerprint = recipe(preset, overrides, lowercase)
            if fingerprint in seen:
                continue
            seen.add(fingerprint)
            fingerprints = {fingerprint} | {recipe(preset, [*overrides, f"--train.seed={seed}"], lowercase)
                                            for seed in seeds}
            runs[label + (LOWERCASED if lowercase else "")] = sorted(
                (r for r in records if r["preset"] == preset and r["recipe"] in fingerprints),
                key=lambda r: r["budget_minutes"])
    return runs


def score_cell(scores: dict | None, lowercased: bool) -> str:
    """"cased / lowercased-tokenized / chrF" of one test set ("" if not scored); a lowercased
    run's output has no case, so its cased BLEU is "-"."""
    if not scores:
        return ""
    cased = "-" if lowercased else f"{scores['bleu']:.1f}"
    return f"{cased} / {scores['bleu_lc_tok']:.1f} / {scores['chrf']:.1f}"


def markdown_table(records: list[dict]) -> str:
    """The runs of each preset's recipe of today (and its VARIANTS) as the Markdown table of
    docs/benchmarks.md."""
    lines = ["| preset | budget (min) | trained (min) | steps | val BLEU | test_2016 | test_2017 |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for preset in sorted({r["preset"] for r in records}):
        for label, runs in todays_runs(records, preset).items():
            for r in runs:
                cells = [score_cell(r["test"].get(name), label.endswith(LOWERCASED)) for name in TEST_SETS]
                seed = seed_of(r)
                lines.append(f"| {preset}{label}{f' (seed {seed})' if seed else ''} | {r['budget_minutes']:g} | {r['train_minutes']:.1f} | "
                             f"{r['steps']:,} | {r['valid_bleu'] or 0:.1f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def label_place(x: float, y: float, points: list[tuple[float, float]]) -> tuple[tuple[int, int], str]:
    """Where a point's number goes (offset in points, alignment) so that runs of one budget
    that end within a BLEU of each other stay readable: above the highest of the points within
    3 minutes of it, below the lowest, and those between to the left and the right in turn
    (from the highest down), so two close ones do not print over each other."""
    ys = sorted(b for a, b in points if abs(a - x) < 3)
    if y >= ys[-1]:
        return (0, 6), "center"
    if y <= ys[0]:
        return (0, -14), "center"
    between = ys[-2:0:-1]  # from the highest down
    return ((-7, -3), "right") if between.index(y) % 2 == 0 else ((7, -3), "left")


def budget_means(runs: list[dict]) -> list[tuple[float, float]]:
    """(training minutes, test_2016 BLEU) averaged over the runs of each budget (seeds, reruns),
    by budget: the chart's line goes through these, its markers show every run."""
    by_budget: dict[float, list[dict]] = {}
    for r in runs:
        by_budget.setdefault(float(r["budget_minutes"]), []).append(r)
    return [(sum(r["train_minutes"] for r in rs) / len(rs),
             sum(r["test"]["test_2016_flickr"]["bleu"] for r in rs) / len(rs)) for _, rs in sorted(by_budget.items())]


def chart_point(run: dict) -> tuple[float, float]:
    """Where a run goes on the chart: (training minutes, test_2016 BLEU)."""
    return run["train_minutes"], run["test"]["test_2016_flickr"]["bleu"]


def steps_per_minute(run: dict) -> float:
    """How fast a run's host trained it: optimizer steps per training minute."""
    return run["steps"] / run["train_minutes"]


def split_by_host(rows: list[dict], shown: list[dict]) -> tuple[list[dict], list[dict]]:
    """`rows` split into runs on hosts like most of `shown` and runs that trained FASTER_HOST
    times their median steps per minute or more. A budget is minutes, not steps: a faster host
    trains ~1.8 times the steps in the same hour, so its runs are shown apart (and left out of
    the budget's mean) instead of moving the mean of the others. Steps, not the host's bf16
    matmul peak: a Xeon with AMX has six times an EPYC's peak yet trains the recipe's small
    products no faster."""
    if not shown:
        return list(rows), []
    limit = FASTER_HOST * statistics.median(steps_per_minute(r) for r in shown)
    is_faster = [steps_per_minute(r) >= limit for r in rows]
    return [r for r, f in zip(rows, is_faster) if not f], [r for r, f in zip(rows, is_faster) if f]


def draw_chart(records: list[dict], path: Path) -> None:
    """test_2016 BLEU against training minutes of each preset as it is today (the runs of its
    recipe, and of its VARIANTS dotted), one line per preset through each budget's mean, runs
    of a much faster host hollow and outside the means (split_by_host), the 2-hour recipe
    dashed, the legend below the axes so that it covers no run."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 5.4), dpi=100, layout="constrained")
    ax = fig.subplots()
    markers = dict(zip(VARIANTS, "o^vDPX"))  # one marker per variant, so they differ in one colour too
    presets = sorted({r["preset"] for r in records})
    runs = {preset: {label: [r for r in rows if "test_2016_flickr" in r["test"]]
                     for label, rows in todays_runs(records, preset).items() if not label.endswith(LOWERCASED)}
            for preset in presets}
    points = {(preset, label): [chart_point(r) for r in rows]
              for preset in presets for label, rows in runs[preset].items()}
    every_point = [point for series in points.values() for point in series]
    shown = [r for preset in presets for rows in runs[preset].values() for r in rows]
    faster_hosts = False
    for index, preset in enumerate(presets):
        for label, rows in runs[preset].items():
            typical, faster = split_by_host(rows, shown)
            if typical:
                ax.plot(*zip(*budget_means(typical)), color=f"C{index}", linestyle="-" if not label else ":",
                        marker=markers[label], markevery=[], label=f"{preset}{label or ' (budgeted)'}")
            for group, face in ((typical, None), (faster, "white")):
                xy = [chart_point(r) for r in group]
                if xy:
                    ax.plot(*zip(*xy), marker=markers[label], color=f"C{index}", markerfacecolor=face, linestyle="none")
            faster_hosts = faster_hosts or bool(faster)
            for x, y in points[preset, label]:
                offset, align = label_place(x, y, every_point)
                ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=offset, ha=align, fontsize=8)
        if preset in TWO_HOUR_RECIPE:
            minutes, bleu = TWO_HOUR_RECIPE[preset]
            ax.axhline(bleu, color=f"C{index}", linestyle="--", linewidth=1)
            ax.plot([minutes], [bleu], marker="s", color=f"C{index}", linestyle="none",
                    label=f"{preset}: the earlier recipe ({bleu} after {minutes} min)")
    if faster_hosts:
        ax.plot([], [], marker="o", color="gray", markerfacecolor="white", linestyle="none",
                label=f"hollow: a faster host, {FASTER_HOST:g}x+ the steps a minute (not in the means)")
    ys = [y for _, y in every_point] or [40.0]
    ax.set_xlim(0, 130)
    top = max(45, 5 * math.ceil((max(ys) + 3) / 5))
    ax.set_ylim(min(max(0, 5 * math.floor((min(ys) - 3) / 5)), top - 15), top)  # differences of ~1 BLEU stay visible
    ax.set_xlabel("training minutes (2-core CPU)")
    ax.set_ylabel("test_2016 BLEU (cased sacreBLEU)")
    ax.set_title("BLEU against training time\n(a marker per run, lines through each budget's mean)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(fontsize=8, loc="outside lower center", ncol=2)
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", choices=sorted(LANGUAGES), help="recipe(s) (default: both)")
    parser.add_argument("--budgets", default="30,60", help="comma-separated minutes (default 30,60; the "
                        "recipes' 2,000 warmup steps need ~15 on a 2-core CPU)")
    parser.add_argument("--override", action="append", default=[], help="a config override for every run, "
                        "e.g. --override=--train.precision=fp32 (repeatable)")
    parser.add_argument("--data", type=Path, default=DATA, help="a Multi30k folder (default ../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=Path("runs/time_to_quality"), help="run folders")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"JSONL of every finished run (default {RESULTS})")
    parser.add_argument("--chart", type=Path, help="draw test_2016 BLEU against minutes to this PNG")
    parser.add_argument("--markdown", action="store_true", help="also print the table of the presets' runs "
                        "(cased / lowercased-tokenized BLEU / chrF) for docs/benchmarks.md")
    parser.add_argument("--json", action="store_true", help="last line: this invocation's records as JSON")
    parser.add_argument("--lowercase", action="store_true", help="train and score on lowercased copies of "
                        "--data (Transformer-Tiny's setting: a recipe of its own, listed apart)")
    parser.add_argument("--again", action="store_true", help="train even where the results file has this recipe "
                        "and budget (the code changed, another seed, another host); the newer record counts")
    args = parser.parse_args()
    reuse_freed_memory()  # what `transformer-mt train` sets, before the peaks below make oneDNN's first primitive
    logging.getLogger("transformer_mt").setLevel(logging.WARNING)
    budgets = [float(b) for b in args.budgets.split(",") if b]
    known = {}
    if args.results.is_file():
        known = {key(r): r for r in map(json.loads, args.results.read_text(encoding="utf-8").splitlines()) if r}
    if args.lowercase:
        args.data = lowercased_copy(args.data, args.out / "lowercased_data")
    args.peaks = matmul_peaks(torch.device("cpu"))
    print(f"host: matmul peak fp32 {args.peaks['fp32']:.0f} GFLOP/s, bf16 {args.peaks['bf16']:.0f} GFLOP/s")
    print(f"{'preset':<16} {'budget':>6} {'steps':>6} {'minutes':>7} {'val':>5} {'2016':>5} {'lc-tok':>6} "
          f"{'chrF':>5} {'2017':>5} {'lc-tok':>6}")
    mine = []
    for preset in args.preset or sorted(LANGUAGES):
        for budget in budgets:
            record = known.get((preset, budget, recipe(preset, args.override, args.lowercase)))
            if record is None or args.again:
                record = train_and_score(preset, budget, args.override, args)
                args.results.parent.mkdir(parents=True, exist_ok=True)
                with open(args.results, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record) + "\n")
                known[key(record)] = record
            mine.append(record)
            t16, t17 = (record["test"].get(name, {}) for name in TEST_SETS)
            print(f"{preset:<16} {budget:>6g} {record['steps']:>6} {record['train_minutes']:>7.1f} "
                  f"{record['valid_bleu'] or 0:>5.1f} {t16.get('bleu', 0):>5.1f} {t16.get('bleu_lc_tok', 0):>6.1f} "
                  f"{t16.get('chrf', 0):>5.1f} {t17.get('bleu', 0):>5.1f} {t17.get('bleu_lc_tok', 0):>6.1f}", flush=True)
    if args.chart:
        draw_chart(list(known.values()), args.chart)
    if args.markdown:
        print(markdown_table(list(known.values())))
    if args.json:
        print(json.dumps(mine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
