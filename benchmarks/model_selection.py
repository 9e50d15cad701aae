"""Which model should a budgeted run hand over: the step checkpoint that validated best,
or the average of its last snapshots? Measured on the validation set only.

    python benchmarks/model_selection.py runs/ttq/multi30k_en_de_60m_* [--splits 1000] [--json]

A run's best checkpoint is the maximum of a dozen noisy validation scores, so its own
validation BLEU overstates what it translates (the winner's curse); the average is scored
once. The trainer's rule (training/hooks.py, PreferAverage) compares the two on the same
validation set that chose the checkpoint. This script asks how each rule does on sentences
it did not choose on: for each run it decodes the validation set with the run's decoding
settings once per candidate (every kept step checkpoint, and average.safetensors), keeps
sacreBLEU's per-sentence statistics (cased, 13a, as validation scores), and then, for
--splits random halves A / B of the sentences, lets each rule pick a model on A and scores
the pick on B:

    trainer          the checkpoint best on A; the average if it beats that on A (the run's rule)
    best checkpoint  the checkpoint best on A
    average          average.safetensors, always
    last             the last step checkpoint, always

It prints each rule's mean BLEU on the held-out halves per run and over the runs. Choosing
on half the sentences is noisier than on all of them, so the winner's curse is larger here
than in a run; the order of the rules is what carries over. Only the kept checkpoints
(train.keep_last) are candidates, not every validation point: in the runs measured, the
best one was among them. Decoding the 1,014 Multi30k validation sentences takes ~5 s per
candidate with a 128-wide model on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from transformer_mt.data.corpus import read_lines
from transformer_mt.errors import UserError
from transformer_mt.runs import RunDir, list_checkpoints, load_checkpoint, load_model_state
from transformer_mt.training.task import Selection
from transformer_mt.translator import Translator

AVERAGE = "average"
BLEU_SELECTION = Selection("bleu")  # the trainer's comparison (PreferAverage): strictly higher wins
Stats = np.ndarray  # (sentences, 10): matches of 1-4-grams, 1-4-grams in the hypothesis, its length, the reference's


def sentence_stats(hypotheses: Sequence[str], references: Sequence[str]) -> Stats:
    """sacreBLEU's per-sentence sufficient statistics (cased, 13a): summed over any subset of
    sentences they give that subset's corpus BLEU (`corpus_bleu`)."""
    bleu = BLEU(effective_order=True)  # only silences the sentence-level warning: the counts are the same
    rows = []
    for hyp, ref in zip(hypotheses, references, strict=True):
        s = bleu.sentence_score(hyp, [ref])
        rows.append([*s.counts, *s.totals, s.sys_len, s.ref_len])
    return np.asarray(rows, dtype=np.int64)


def corpus_bleu(stats: Stats) -> float:
    """Corpus BLEU of summed statistics, as BLEU().corpus_score computes it (smoothing exp)."""
    total = stats.sum(0).tolist()
    return BLEU.compute_bleu(total[0:4], total[4:8], total[8], total[9], smooth_method="exp").score


def rule_trainer(scores: dict[str, float]) -> str:
    """The run's rule: the best checkpoint, replaced by the average if the average beats it."""
    best = rule_best_checkpoint(scores)
    return AVERAGE if AVERAGE in scores and BLEU_SELECTION.better(scores[AVERAGE], scores[best]) else best


def rule_best_checkpoint(scores: dict[str, float]) -> str:
    return max((name for name in scores if name != AVERAGE), key=lambda name: scores[name])


def rule_average(scores: dict[str, float]) -> str:
    return AVERAGE


def rule_last(scores: dict[str, float]) -> str:
    return [name for name in scores if name != AVERAGE][-1]  # the checkpoints are in step order


RULES: dict[str, Callable[[dict[str, float]], str]] = {
    "trainer": rule_trainer, "best checkpoint": rule_best_checkpoint, "average": rule_average, "last": rule_last,
}


def held_out_bleu(candidates: dict[str, Stats], splits: int, seed: int = 0) -> dict[str, float]:
    """Each rule's mean BLEU on half B over `splits` random halves, having picked on half A
    (both halves of each split are used in turn, so every sentence is held out as often)."""
    n = len(next(iter(candidates.values())))
    rng = random.Random(seed)
    totals = dict.fromkeys(RULES, 0.0)
    for _ in range(splits):
        order = list(range(n))
        rng.shuffle(order)
        halves = (np.asarray(order[: n // 2]), np.asarray(order[n // 2:]))
        for pick_on, score_on in (halves, halves[::-1]):
            on_a = {name: corpus_bleu(stats[pick_on]) for name, stats in candidates.items()}
            for rule, choose in RULES.items():
                totals[rule] += corpus_bleu(candidates[choose(on_a)][score_on])
    return {rule: total / (2 * splits) for rule, total in totals.items()}


def candidate_translators(rundir: RunDir, checkpoints: list[Path]) -> Iterator[tuple[str, Translator]]:
    """One Translator with the run's decoding settings, holding in turn the run's average,
    then each kept step checkpoint (in step order): one config, tokenizer and model loaded."""
    translator = Translator.from_run(rundir.root, device="cpu", checkpoint=AVERAGE)
    yield AVERAGE, translator
    for path in checkpoints:
        load_model_state(translator.model, load_checkpoint(path)["model"], path, rundir.config)
        yield path.stem, translator


def measure_run(run: Path, splits: int) -> dict:
    """Full-validation BLEU of each candidate and each rule's held-out BLEU, for one run."""
    rundir = RunDir(run).require()
    if not rundir.average.is_file():
        raise UserError(f"{rundir.average}: missing; this compares a run's average with its checkpoints "
                        "(train with train.average_last > 0, or make one with `transformer-mt average`)")
    checkpoints = list_checkpoints(rundir.checkpoints)
    if not checkpoints:
        raise UserError(f"{rundir.checkpoints}: no step_N.pt checkpoint to compare the average with")
    src_path, tgt_path = rundir.text_files(("valid",))
    sources, references = read_lines(src_path), read_lines(tgt_path)
    candidates, validation = {}, {}
    for name, translator in candidate_translators(rundir, checkpoints):
        candidates[name] = sentence_stats(translator.translate(sources), references)
        validation[name] = corpus_bleu(candidates[name])
        print(f"  {run.name} {name}: validation BLEU {validation[name]:.2f}", flush=True)
    return {"run": str(run), "validation": validation, "held_out": held_out_bleu(candidates, splits)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories with step checkpoints and average.safetensors")
    parser.add_argument("--splits", type=int, default=1000, help="random halves of the validation set")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = parser.parse_args(argv)
    if args.splits < 1:
        parser.error(f"--splits must be at least 1, got {args.splits}")
    try:
        results = [measure_run(run, args.splits) for run in args.runs]
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"\nheld-out validation BLEU (picked on a random half, scored on the other; {args.splits} splits)")
    print(f"{'run':40s}" + "".join(f"{rule:>17s}" for rule in RULES))
    for result in results:
        print(f"{Path(result['run']).name[:40]:40s}" + "".join(f"{result['held_out'][r]:17.2f}" for r in RULES))
    mean = {rule: float(np.mean([r["held_out"][rule] for r in results])) for rule in RULES}
    print(f"{'mean':40s}" + "".join(f"{mean[r]:17.2f}" for r in RULES))
    if args.json:
        print(json.dumps({"splits": args.splits, "runs": results, "mean": mean}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
