"""Sub-commands that create runs: demo, train, vocab, average."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from transformer_mt.cli import add_option_flag, path_arg, positive_int
from transformer_mt.common.config import TrainConfig, load_config, preset_names
from transformer_mt.common.errors import UserError
from transformer_mt.runs.directory import RunDir

log = logging.getLogger("transformer_mt")


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="generate the numbers task, train a small model (under 5 min on 2 CPU cores), translate",
        description="Offline end-to-end demo: English -> German number phrases.",
    )
    demo.add_argument("--out", type=path_arg,
                      help="run directory to write (default: runs/demo, with --lm runs/lm_demo)")
    demo.add_argument("--lm", action="store_true", help="the language-model demo instead: a GPT-style model of "
                      "number phrases and their digits (under 5 min), then generation and a figure")
    demo.set_defaults(func=run_demo, overrides=[])

    train = subparsers.add_parser(
        "train", help="train a model from a config (resumes an existing run directory)",
        description="Train CONFIG (a YAML file or a preset name) into RUN; on an existing RUN, resume.",
    )
    train.add_argument("config", nargs="?", type=path_arg,
                       help=f"YAML config or preset ({', '.join(preset_names())}); omit to resume RUN with its "
                            "saved config")
    train.add_argument("--run", type=path_arg, help="run directory (created, or resumed if it exists; default: "
                                                    "runs/NAME for the config NAME)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_option_flag(train, "train.init_from", "--init-from", default="the config's")
    add_option_flag(train, "model.file", "--model", default="the config's")
    train.add_argument("--no-check", action="store_true", help="with --model: train without checking the model "
                       "first (train.check_model: false)")
    train.set_defaults(func=run_train, overrides=[])
    prepare = subparsers.add_parser(
        "prepare", help="train the vocabulary and encode the training data once (train does it on first use)",
        description="Stream the corpus of CONFIG, train RUN's joint vocabulary on a sample of it, encode every "
                    "pair on all cores into memory-mapped arrays (RUN/prepared/) and write RUN/config.yaml; "
                    "`train --run RUN` (one process or many) then starts at once. On an existing RUN, check "
                    "that its prepared data still matches its corpus files.",
    )
    prepare.add_argument("config", nargs="?", type=path_arg, help="YAML config or preset; omit for an existing RUN")
    prepare.add_argument("--run", required=True, type=path_arg, help="run directory (created)")
    prepare.add_argument("--no-progress", action="store_true", help="no progress bar")
    prepare.set_defaults(func=run_prepare, overrides=[])

    vocab = subparsers.add_parser(
        "vocab", help="train the sentencepiece vocabulary of a run (train does this too)",
        description="Train one sentencepiece model on both sides of the training data of CONFIG "
                    "and store it as RUN/tokenizer.model (ids: pad 0, unk 1, bos 2, eos 3); with "
                    "data.joint_vocab false, one per side: RUN/source.model and RUN/target.model.",
    )
    vocab.add_argument("config", type=path_arg, help="YAML config or preset")
    vocab.add_argument("--run", required=True, type=path_arg, help="run directory to write the vocabulary into")
    vocab.set_defaults(func=run_vocab, overrides=[])

    average = subparsers.add_parser(
        "average", help="average the last N snapshots (or checkpoints) of a run into average.safetensors",
        description="Average the weights of the last N snapshots that training kept (train.average_last), "
                    "or else of the last N step checkpoints (the paper averaged the last 5 for base, 20 for "
                    "big); translate/evaluate then use them with --checkpoint average.",
    )
    average.add_argument("run", type=path_arg, help="run directory")
    average.add_argument("--last", type=positive_int, default=5, help="how many checkpoints (default 5)")
    average.set_defaults(func=run_average)

    for parser in (demo, train, prepare, vocab):
        parser.epilog = "Any --section.key=value overrides a config key, e.g. --train.max_steps=100."


def split_overrides(items: list[str]) -> list[str]:
    for item in items:
        if not item.startswith("--") or "=" not in item:
            raise UserError(f"{item}: overrides look like --section.key=value (e.g. --train.max_steps=100)")
    return items


def run_train(args: argparse.Namespace) -> int:
    from transformer_mt.training import fit

    if args.run is None:
        if not args.config:
            raise UserError("give a config (a preset such as small, or a YAML file) to start a run, or --run RUN "
                            "to resume one")
        args.run = str(Path("runs") / Path(args.config).stem)
        log.info("run directory: %s (--run to choose another)", args.run)

    overrides = split_overrides(args.overrides) + ([f"--train.init_from={args.init_from}"] if args.init_from else [])
    overrides += ([f"--model.file={args.file}"] if args.file else []) + (
        ["--train.check_model=false"] if args.no_check else [])
    if args.init_from and not args.config:
        raise UserError("--init-from starts a new run: give a config too (e.g. the config.yaml of the run it starts from)")
    saved = RunDir(Path(args.run)).config
    if args.config:
        cfg = load_config(args.config, overrides)
    else:  # a resume: the overrides change its saved config (fit says which changes apply)
        cfg = load_config(saved, overrides, drop_retired=True) if overrides and saved.is_file() else None
    trainer = fit(cfg, args.run, progress=not args.no_progress)
    if trainer.rank == 0:  # under torchrun, one line for the run, not one a process
        log.info("finished at step %d after %.0f s%s", trainer.state.step, trainer.state.elapsed,
                 time_cap_note(trainer.cfg.train, trainer.state.step, trainer.state.elapsed))
    return 0


def time_cap_note(train: TrainConfig, step: int, elapsed: float) -> str:
    """What ended a step plan before its last step: train.max_seconds (a preset's limit set for
    its own model; a slower model, a learner's with a wider feed-forward say, trains fewer steps)."""
    if train.budget_minutes > 0 or not 0 < train.max_seconds <= elapsed or step >= train.max_steps:
        return ""
    return (f": train.max_seconds={train.max_seconds:g} ended it before step {train.max_steps} "
            "(--train.max_seconds=0 trains every step)")


def run_prepare(args: argparse.Namespace) -> int:
    from transformer_mt.training import prepare_run

    cfg = load_config(args.config, split_overrides(args.overrides)) if args.config else None
    summary = prepare_run(cfg, args.run, progress=not args.no_progress)
    log.info("%s: %s, ready to train", RunDir(Path(args.run)).prepared, summary)
    return 0


def run_vocab(args: argparse.Namespace) -> int:
    from transformer_mt.data.tokenizers.registry import vocab_sizes
    from transformer_mt.training import train_vocabulary

    cfg = load_config(args.config, split_overrides(args.overrides))
    run = RunDir(Path(args.run))
    tokenizer = train_vocabulary(cfg, run)
    source, target = vocab_sizes(tokenizer)
    sizes = f"{target}" if cfg.data.joint_vocab else f"{source} source and {target} target"
    log.info("%s: %s pieces (%s)", run.tokenizer_file, sizes, cfg.data.vocab_type)
    return 0


def run_average(args: argparse.Namespace) -> int:
    from transformer_mt.runs.directory import average_checkpoints

    run = RunDir(Path(args.run)).require()
    used = average_checkpoints(run, args.last)
    log.info("averaged %s into %s", ", ".join(p.name for p in used), run.average)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from transformer_mt.demo import run_demo as demo, run_lm_demo

    preset, default_out, run = ("lm_demo", "runs/lm_demo", run_lm_demo) if args.lm else ("demo", "runs/demo", demo)
    result = run(load_config(preset, split_overrides(args.overrides)), Path(args.out or default_out))
    print(json.dumps(result))
    return 0
