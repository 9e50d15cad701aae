"""The offline demos: generate the numbers task, train the `demo` preset, translate the
held-out test numbers and score them (what `transformer-mt demo` and `make demo` run); and
the language-model default (`transformer-mt demo --lm`, the `lm_demo` preset)."""

from __future__ import annotations

import logging
import math
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from transformer_mt.common.config import Config
from transformer_mt.data.corpus import read_parallel
from transformer_mt.common.errors import UserError
from transformer_mt.common.evaluation import score
from transformer_mt.runs.directory import RunDir
from transformer_mt.training import fit
from transformer_mt.inference.translator import Translator

log = logging.getLogger("transformer_mt")


def fresh_run_dir(path: Path) -> None:
    """The demo starts over: replace an old run directory, never some other folder."""
    RunDir(path).check_writable()
    if path.exists() and any(path.iterdir()):
        if not RunDir(path).config.is_file():
            raise UserError(f"{path}: exists and is not a run directory; choose another --out")
        shutil.rmtree(path)


def program_name() -> str:
    """The command to type again: `transformer-mt` when that is what runs on the PATH, else
    the script as this process was started (`.venv/bin/transformer-mt` under `make demo`)."""
    started = Path(sys.argv[0])
    on_path = shutil.which("transformer-mt")
    if started.name != "transformer-mt" or (on_path and Path(on_path).resolve() == started.resolve()):
        return "transformer-mt"
    return str(started)


def next_commands(out: Path, program: str = "transformer-mt") -> list[str]:
    """What to do with the trained run: translate at a prompt, and open the page on it."""
    command = f"{shlex.quote(program)} {{}} {shlex.quote(str(out))}"
    return [f"{command.format('translate')}   # type a number phrase, get its German (Ctrl-D ends)",
            f"{command.format('serve')}       # then open http://127.0.0.1:8000/ to see inside the model"]


def run_demo(cfg: Config, out: Path, examples: int = 5) -> dict[str, Any]:
    """Train `cfg` into `out` from scratch, translate the test split, print `examples`
    of them; returns exact match, character BLEU and training time."""
    fresh_run_dir(out)
    log.info("demo: English -> German number phrases, %d training pairs, run directory %s",
             cfg.data.task_size, out)
    state = fit(cfg, out).state
    log.info("trained %d steps in %.0f s", state.step, state.elapsed)
    test = read_parallel(*(RunDir(out).data / f"test.{side}" for side in ("src", "tgt")))
    hypotheses = Translator.from_run(out).translate(test.src)
    scores = score(hypotheses, test.tgt, tokenize=cfg.data.bleu_tokenize)
    for src, hyp, ref in list(zip(test.src, hypotheses, test.tgt))[:examples]:
        mark = "ok " if hyp == ref else "BAD"
        print(f"{mark} {src}\n    -> {hyp}\n    ref {ref}")
    print(f"test exact match {100 * scores.exact_match:.1f}% on {len(test)} unseen numbers, "
          f"BLEU {scores.bleu:.1f} ({scores.bleu_signature})")
    print("next:\n" + "\n".join(f"  {line}" for line in next_commands(out, program_name())))
    return {"exact_match": round(scores.exact_match, 4), "bleu": round(scores.bleu, 2),
            "train_seconds": round(state.elapsed, 1), "run_dir": str(out)}


def completion_prompts(lines: list[str]) -> tuple[list[str], list[str]]:
    """Held-out number_lines split at " = ": prompts "words =" and the digits they expect."""
    prompts, answers = [], []
    for line in lines:
        words, _, digits = line.rpartition(" = ")
        prompts.append(f"{words} =")
        answers.append(digits)
    return prompts, answers


def run_lm_demo(cfg: Config, out: Path, examples: int = 5, prompts: int = 300) -> dict[str, Any]:
    """Train the language-model default `cfg` into `out` from scratch on the number_lines
    text; then continue held-out "words =" prompts greedily (is the number right?), sample
    lines from their first word (are they well-formed?), and draw both beside the
    validation perplexity and the unigram baseline into OUT/learned.png."""
    from transformer_mt.data.text_stream import open_text, unigram_loss
    from transformer_mt.data.toy_corpora import is_well_formed
    from transformer_mt.inference.language_model import LanguageModel
    from transformer_mt.viz.curves import read_metrics
    from transformer_mt.viz.figure import save_figure
    from transformer_mt.viz.language_model import learning_figure

    fresh_run_dir(out)
    log.info("demo: a GPT-style language model of English number phrases and their digits, run directory %s", out)
    state = fit(cfg, out).state
    lm = LanguageModel.from_run(out)
    held_out = (RunDir(out).data / "test.txt").read_text(encoding="utf-8").splitlines()[:prompts]
    questions, answers = completion_prompts(held_out)
    completed = lm.generate(questions, max_new_tokens=12)
    correct = sum(text == f"{q} {a}" for text, q, a in zip(completed, questions, answers)) / len(questions)
    sampled = lm.generate([q.split()[0] for q in questions], max_new_tokens=40, temperature=1.0, seed=1)
    well_formed = sum(map(is_well_formed, sampled)) / len(sampled)
    data = open_text(RunDir(out).prepared)
    unigram = math.exp(unigram_loss(data.train.tokens, data.valid.tokens, len(lm.tokenizer)))
    shares = {"held-out prompts\ncompleted correctly": correct, "sampled lines\nwell-formed": well_formed}
    figure = save_figure(learning_figure(read_metrics(out)["valid_ppl"], unigram, shares, out.name), out / "learned.png")
    for text in completed[:examples]:
        print(f"  {text}")
    print(f"held-out completions correct {100 * correct:.1f}%, sampled lines well-formed {100 * well_formed:.1f}%, "
          f"validation perplexity {read_metrics(out)['valid_ppl'].values[-1]:.2f} (unigram {unigram:.1f}); "
          f"figure {figure}")
    program = shlex.quote(program_name())
    print(f"next:\n  {program} generate {shlex.quote(str(out))} --prompt 'forty-two thousand'")
    return {"completed_correctly": round(correct, 4), "well_formed": round(well_formed, 4),
            "unigram_ppl": round(unigram, 2), "train_seconds": round(state.elapsed, 1), "steps": state.step,
            "figure": str(figure), "run_dir": str(out)}
