"""The offline demo: generate the numbers task, train the `demo` preset, translate the
held-out test numbers and score them (what `transformer-mt demo` and `make demo` run)."""

from __future__ import annotations

import logging
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from transformer_mt.config import Config
from transformer_mt.data.corpus import read_parallel
from transformer_mt.errors import UserError
from transformer_mt.evaluation import score
from transformer_mt.runs import RunDir
from transformer_mt.training import fit
from transformer_mt.translator import Translator

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
    start = time.perf_counter()
    state = fit(cfg, out).state
    log.info("trained %d steps in %.0f s (%.0f s wall)", state.step, state.train_seconds,
             time.perf_counter() - start)
    test = read_parallel(*(RunDir(out).data / f"test.{side}" for side in ("src", "tgt")))
    hypotheses = Translator.from_run(out).translate(test.src)
    scores = score(hypotheses, test.tgt, tokenize="char")
    for src, hyp, ref in list(zip(test.src, hypotheses, test.tgt))[:examples]:
        mark = "ok " if hyp == ref else "BAD"
        print(f"{mark} {src}\n    -> {hyp}\n    ref {ref}")
    print(f"test exact match {100 * scores.exact_match:.1f}% on {len(test)} unseen numbers, "
          f"BLEU {scores.bleu:.1f} ({scores.bleu_signature})")
    print("next:\n" + "\n".join(f"  {line}" for line in next_commands(out, program_name())))
    return {"exact_match": round(scores.exact_match, 4), "bleu": round(scores.bleu, 2),
            "train_seconds": round(state.train_seconds, 1), "run_dir": str(out)}
