"""`transformer-mt doctor RUN|PRESET [--src F --ref F] [--json] [--section.key=value ...]`:
why a model translates poorly, each cause with the run's own numbers (diagnosis/)."""

from __future__ import annotations

import argparse
import json

from transformer_mt.cli import path_arg, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser(
        "doctor", help="name why a model translates poorly, with its own numbers",
        description="Read a run (trained here or imported) or a preset or config before training, and report "
                    "each known cause of poor translations that it shows: the measured value, the limit it "
                    "crossed, what the cause cost where docs/ablations.md measured it, and the fix. Exit code 0 "
                    "with or without findings.",
        epilog="Before training, --section.key=value overrides a preset's or config's key: `transformer-mt doctor "
               "small --model.init=pytorch` checks the initial model.",
    )
    doctor.add_argument("target", help="a run directory, or a preset name or config file")
    doctor.add_argument("--src", type=path_arg, help="source sentences to translate (default: the run's validation set)")
    doctor.add_argument("--ref", type=path_arg, help="their reference translations, line N for line N of --src")
    doctor.add_argument("--limit", type=positive_int, default=200, metavar="N",
                        help="translate at most the first N sentences (default 200)")
    doctor.add_argument("--json", action="store_true",
                        help='print one JSON object: {"findings": [{"id", "value", "limit", "message", "fix", '
                             '"cost", "follows_from"}], "checked": [...], "not_checked": {id: why}}')
    doctor.set_defaults(func=run_doctor, overrides=[])


def run_doctor(args: argparse.Namespace) -> int:
    from transformer_mt.cli.train import split_overrides
    from transformer_mt.diagnosis.case import open_case
    from transformer_mt.diagnosis.report import diagnose

    case = open_case(args.target, split_overrides(args.overrides), args.src, args.ref, args.limit)
    report = diagnose(case)
    print(json.dumps(report.to_dict()) if args.json else report.text())
    return 0
