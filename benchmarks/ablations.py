"""Why the study notes' Transformer translated poorly, and the paper's Table 3 at CPU scale
(issue 27): train named variants on Multi30k de->en, each a set of config overrides of the
`multi30k_de_en` preset for a stated number of steps, and print one table of test_2016 BLEU
and chrF (cased).

Rows:
  notes        the notes' recipe: the first 5,000 pairs, word vocabularies per side, N=2,
               d_model 128, d_ff 256, h=4, post-norm, untied embeddings, plain Adam 1e-3
               (betas 0.9/0.999, eps 1e-8), no label smoothing, 32-sentence batches, greedy
  notes_10k    their second try: 10,000 pairs, d_model 512, d_ff 1024
  notes_n4/n6  the notes' own hypothesis, "N is too small"
  notes_n6_warmup, notes_n6_prenorm, notes_10k_warmup
               the deeper and the wider model again, trained with the paper's Adam and warmup
               or with pre-norm: is a bigger model worse, or only worse trained?
  +bpe, +paper_adam, +smoothing, +beam4, +all_pairs, +tied, +prenorm
               one change at a time from `notes` towards the paper
  ours         all of them together (ours_seed2: the same with another seed, the noise of a row)
  A_h1 ... E_learned
               Table 3 from `ours`: (A) heads at constant compute, (C) size, (D) dropout and
               label smoothing, (E) learned positions. (B), a smaller d_k alone, is not a row:
               here d_k = d_model / h, so it cannot change without changing h or d_model.

Every row trains its own run under --out and evaluates its last weights (the notes select
nothing). Finished rows are kept in --out/results.jsonl and skipped when run again, so the
table can be filled in several sittings, or by two processes at once (each on its own core,
with disjoint --rows: the file is read again before every row).

    python benchmarks/ablations.py                      # every row, --steps each
    python benchmarks/ablations.py --rows notes,ours    # some rows
    python benchmarks/ablations.py --quick              # a short version: 200 steps, short outputs
    python benchmarks/ablations.py --markdown --chart docs/ablations.png   # the finished rows as docs/ablations.md shows them
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from transformer_mt.config import load_config
from transformer_mt.data.corpus import read_parallel
from transformer_mt.evaluation import score
from transformer_mt.training import fit
from transformer_mt.translator import Translator

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
NOTES = ["--data.train_pairs=5000", "--data.vocab_type=word", "--data.joint_vocab=false", "--data.vocab_size=30000",
         "--model.share_vocab=false", "--model.tie_embeddings=false", "--model.n_layers=2", "--model.d_model=128",
         "--model.d_ff=256", "--model.n_heads=4", "--model.dropout=0.1", "--model.norm_first=false",
         "--train.schedule=constant", "--train.lr=0.001", "--train.adam_betas=[0.9, 0.999]", "--train.adam_eps=1e-8",
         "--train.label_smoothing=0.0", "--data.batch_sentences=32", "--decode.beam=1"]
TOWARDS_THE_PAPER = {
    "+bpe": ("joint BPE vocabulary", ["--data.vocab_type=bpe", "--data.joint_vocab=true", "--data.vocab_size=8000",
                                      "--model.share_vocab=true"]),
    "+paper_adam": ("Adam 0.9/0.98/1e-9, warmup + inverse sqrt", ["--train.schedule=paper", "--train.adam_betas=[0.9, 0.98]",
                                                                "--train.adam_eps=1e-9"]),
    "+smoothing": ("label smoothing 0.1", ["--train.label_smoothing=0.1"]),
    "+beam4": ("beam 4, length penalty 0.6", ["--decode.beam=4", "--decode.length_penalty=0.6"]),
    "+all_pairs": ("all 29,000 pairs", ["--data.train_pairs=0"]),
    "+tied": ("tied embeddings (needs +bpe's shared vocabulary)", ["--data.vocab_type=bpe", "--data.joint_vocab=true",
                                                                   "--data.vocab_size=8000", "--model.share_vocab=true",
                                                                   "--model.tie_embeddings=true"]),
    "+prenorm": ("pre-norm", ["--model.norm_first=true"]),
}
# What the rows inherited from the multi30k_de_en preset when they were measured (before it
# became issue 25's budgeted recipe): pinned so the table stays reproducible.
PRESET_AS_MEASURED = ["--train.budget_minutes=0", "--train.lr_scale=0.4", "--model.attention_dropout=-1",
                      "--model.activation_dropout=-1", "--data.max_tokens=4096", "--train.average_last=0"]
OURS = NOTES + [o for _, overrides in TOWARDS_THE_PAPER.values() for o in overrides]
TABLE_3 = {
    "A_h1": ("(A) h = 1", ["--model.n_heads=1"]),
    "A_h8": ("(A) h = 8", ["--model.n_heads=8"]),
    "A_h16": ("(A) h = 16", ["--model.n_heads=16"]),
    "C_n1": ("(C) N = 1", ["--model.n_layers=1"]),
    "C_n4": ("(C) N = 4", ["--model.n_layers=4"]),
    "C_d64": ("(C) d_model 64, d_ff 128", ["--model.d_model=64", "--model.d_ff=128"]),
    "C_d256": ("(C) d_model 256, d_ff 512", ["--model.d_model=256", "--model.d_ff=512"]),
    "D_drop0": ("(D) dropout 0", ["--model.dropout=0.0"]),
    "D_drop03": ("(D) dropout 0.3", ["--model.dropout=0.3"]),
    "D_ls0": ("(D) label smoothing 0", ["--train.label_smoothing=0.0"]),
    "D_ls02": ("(D) label smoothing 0.2", ["--train.label_smoothing=0.2"]),
    "E_learned": ("(E) learned positional embeddings", ["--model.positional=learned"]),
}


# The paper's Table 3 (newstest2013 dev BLEU, base model 25.8) for the change a row makes;
# the paper varied its base (N=6, d_model 512, h=8), ours varies the `ours` row (N=2, d_model 128, h=4).
PAPER_TABLE_3 = {
    "ours": "(A) h=4: 25.5",
    "A_h1": "(A) h=1: 24.9",
    "A_h8": "base, h=8: 25.8",
    "A_h16": "(A) h=16: 25.8",
    "C_n1": "(C) N=2 (from 6): 23.7",
    "C_n4": "(C) N=8 (from 6): 25.5",
    "C_d64": "(C) d_model 256 (from 512): 24.5",
    "C_d256": "(C) d_model 1024: 26.0",
    "D_drop0": "(D) P_drop 0.0: 24.6",
    "D_drop03": "(D) P_drop 0.2: 25.5",
    "D_ls0": "(D) eps_ls 0.0: 25.3",
    "D_ls02": "(D) eps_ls 0.2: 25.7",
    "E_learned": "(E) learned positions: 25.7",
}
GROUPS = {"notes": "the notes", "towards": "one change towards the paper", "table3": "Table 3 at CPU scale"}


def group_of(name: str) -> str:
    """Which part of the table a row belongs to (the chart colours them)."""
    if name.startswith("notes"):
        return "notes"
    return "towards" if name.startswith(("+", "ours")) else "table3"


def variants() -> dict[str, tuple[str, list[str]]]:
    """Every row: name -> (what changed, its overrides of the multi30k_de_en preset)."""
    rows = {"notes": ("the notes' recipe", NOTES),
            "notes_10k": ("10,000 pairs, d_model 512, d_ff 1024", NOTES + ["--data.train_pairs=10000",
                                                                          "--model.d_model=512", "--model.d_ff=1024"]),
            "notes_n4": ("N = 4", NOTES + ["--model.n_layers=4"]),
            "notes_n6": ("N = 6", NOTES + ["--model.n_layers=6"]),
            "notes_n6_warmup": ("N = 6, the paper's Adam and warmup", NOTES + ["--model.n_layers=6"]
                                + TOWARDS_THE_PAPER["+paper_adam"][1]),
            "notes_n6_prenorm": ("N = 6, pre-norm", NOTES + ["--model.n_layers=6", "--model.norm_first=true"]),
            "notes_10k_warmup": ("10,000 pairs, d_model 512, d_ff 1024, the paper's Adam and warmup",
                                 NOTES + ["--data.train_pairs=10000", "--model.d_model=512", "--model.d_ff=1024"]
                                 + TOWARDS_THE_PAPER["+paper_adam"][1])}
    rows |= {name: (what, NOTES + overrides) for name, (what, overrides) in TOWARDS_THE_PAPER.items()}
    rows["ours"] = ("all the changes above together", OURS)
    rows["ours_seed2"] = ("the same, another seed: how much one row's BLEU is noise", OURS + ["--train.seed=2"])
    rows |= {name: (what, OURS + overrides) for name, (what, overrides) in TABLE_3.items()}
    return rows


def data_overrides(folder: Path) -> list[str]:
    """The Multi30k de->en files of `folder` (train, val, test_2016_flickr)."""
    files = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
    return [f"--data.{split}_{side}={folder / f'{name}.{lang}.gz'}"
            for split, name in files.items() for side, lang in (("src", "de"), ("tgt", "en"))]


def run_row(name: str, overrides: list[str], args: argparse.Namespace) -> dict:
    """Train one row for args.steps steps and score its last weights on test_2016."""
    run = args.out / name
    fixed = [f"--train.max_steps={args.steps}", f"--train.valid_every={args.steps}", "--train.max_seconds=0",
             "--train.patience=0", f"--train.warmup_steps={max(args.steps // 10, 1)}"]
    if args.quick:
        fixed += ["--decode.max_len_b=10", "--data.train_pairs=2000"]
    cfg = load_config("multi30k_de_en", data_overrides(args.data) + PRESET_AS_MEASURED + overrides + fixed)
    start = time.perf_counter()
    trainer = fit(cfg, run, progress=False)
    test = read_parallel(*(args.data / f"test_2016_flickr.{lang}.gz" for lang in ("de", "en")))
    hypotheses = Translator.from_run(run, checkpoint="last").translate(test.src)
    scores = score(hypotheses, test.tgt)
    return {"steps": trainer.state.step, "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "train_minutes": trainer.state.train_seconds / 60, "wall_minutes": (time.perf_counter() - start) / 60,
            "bleu": scores.bleu, "chrf": scores.chrf}


def markdown_table(rows: list[dict]) -> str:
    """The finished rows as the Markdown table of docs/ablations.md."""
    lines = ["| row | what changed | parameters | steps | minutes | BLEU | chrF | the paper's Table 3 |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| `{r['row']}` | {r['what']} | {r['parameters']:,} | {r['steps']} | {r['train_minutes']:.1f} "
                     f"| {r['bleu']:.1f} | {r['chrf']:.1f} | {PAPER_TABLE_3.get(r['row'], '')} |")
    return "\n".join(lines)


def draw_chart(rows: list[dict], path: Path) -> None:
    """A horizontal bar of test BLEU per row, coloured by group, the notes' and our BLEU as lines."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(9, 0.32 * len(rows) + 1.8), dpi=100, layout="constrained")
    ax = fig.subplots()
    colours = {"notes": "tab:red", "towards": "tab:blue", "table3": "tab:green"}
    names = [r["row"] for r in rows][::-1]
    values = [r["bleu"] for r in rows][::-1]
    bars = ax.barh(names, values, color=[colours[group_of(n)] for n in names])
    ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=8, padding=2)
    for name, style in (("notes", ":"), ("ours", "--")):
        found = [r["bleu"] for r in rows if r["row"] == name]
        if found:
            ax.axvline(found[0], color="gray", linestyle=style, linewidth=1)
    handles = [Patch(color=colours[group], label=label) for group, label in GROUPS.items()]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=8)
    ax.set_xlabel("BLEU, Multi30k de->en test_2016 (cased sacreBLEU)")
    steps = sorted({r["steps"] for r in rows})
    ax.set_title(f"The notes' experiment and Table 3 at CPU scale ({', '.join(map(str, steps))} steps each)")
    fig.savefig(path)


def finished_rows(results_file: Path) -> dict[str, dict]:
    """The rows already in the results file, by name."""
    if not results_file.is_file():
        return {}
    return {r["row"]: r for r in map(json.loads, results_file.read_text(encoding="utf-8").splitlines()) if r}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a Multi30k folder (default ../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=Path("runs/ablations"), help="run folders and results.jsonl")
    parser.add_argument("--rows", help="comma-separated row names (default: every row)")
    parser.add_argument("--steps", type=int, default=3000, help="training steps of every row (default 3000)")
    parser.add_argument("--quick", action="store_true", help="200 steps, 2,000 pairs, outputs of at most source + 10")
    parser.add_argument("--json", action="store_true", help="last line: every row as JSON")
    parser.add_argument("--markdown", action="store_true", help="also print the table in Markdown (docs/ablations.md)")
    parser.add_argument("--chart", type=Path, help="draw the BLEU of every row to this PNG")
    args = parser.parse_args()
    if args.quick:
        args.steps = min(args.steps, 200)
    rows = variants()
    chosen = args.rows.split(",") if args.rows else list(rows)
    unknown = [name for name in chosen if name not in rows]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)}; rows: {', '.join(rows)}")
    logging.getLogger("transformer_mt").setLevel(logging.WARNING)
    results_file = args.out / "results.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{'row':<12} {'what changed':<44} {'params':>9} {'steps':>6} {'minutes':>8} {'BLEU':>6} {'chrF':>6}")
    table = []
    for name in chosen:
        what, overrides = rows[name]
        done = finished_rows(results_file)  # read before every row: another process may fill the same table
        result = done.get(name) or {"row": name, "what": what, "overrides": overrides, **run_row(name, overrides, args)}
        if name not in done:
            with open(results_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(result) + "\n")
        table.append(result)
        print(f"{name:<12} {what[:44]:<44} {result['parameters']:>9,} {result['steps']:>6} "
              f"{result['train_minutes']:>8.1f} {result['bleu']:>6.1f} {result['chrf']:>6.1f}", flush=True)
    if args.markdown:
        print(markdown_table(table))
    if args.chart:
        draw_chart(table, args.chart)
    if args.json:
        print(json.dumps(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
