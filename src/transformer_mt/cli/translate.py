"""Sub-commands that use a trained run: translate, evaluate."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    translate = subparsers.add_parser(
        "translate", help="translate stdin (or a file) with a trained run",
        description="Translate lines from stdin to stdout, one output line per input line.",
    )
    translate.add_argument("run", help="run directory written by `train` or `demo`")
    translate.add_argument("--device", default="auto", help="auto, cpu, cuda ...")
    translate.set_defaults(func=run_translate)


def run_translate(args: argparse.Namespace) -> int:
    from transformer_mt.translator import Translator

    translator = Translator.from_run(args.run, device=args.device)
    for line in sys.stdin:
        print(translator.translate([line.rstrip("\r\n")])[0], flush=True)
    return 0
