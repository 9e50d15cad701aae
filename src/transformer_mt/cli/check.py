"""`transformer-mt check FILE[:NAME] [--json] [--quick]`: the learner's own Transformer code
checked against the paper, each check with a stable id (check/)."""

from __future__ import annotations

import argparse
import json

from transformer_mt.cli import path_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check", help="check your own Transformer code against the paper",
        description="Import FILE in a child process (nothing is written beside it), build a small model with NAME "
                    "(default: make_model, else get_model, else a class Transformer) and check it against the "
                    "paper: masks, equation 1 and the heads, positions, embeddings, LayerNorm, residuals, the "
                    "feed-forward network, dropout, gradients, initialisation, the output, the parameter count, and "
                    "that it learns the copy task. Exit code 0 when nothing failed, 1 when a check failed, 2 when "
                    "FILE cannot be checked.",
        epilog="Two conventions need nothing more: the Annotated Transformer's (encode, decode, generator) and the "
               "assembled tutorial model's (forward(src, trg, src_mask, trg_mask) giving logits). Another style: "
               "docs/check.md#your-code-in-another-shape.",
    )
    check.add_argument("target", type=path_arg, metavar="FILE[:NAME]",
                       help="your Python file, and the function or class in it that builds the model")
    check.add_argument("--json", action="store_true",
                       help='print one JSON object: {"model": {"convention", "sizes", "parameters"}, "checks": '
                            '[{"id", "status", "section", "message", "fix"}]}')
    check.add_argument("--quick", action="store_true", help="skip learns_copy (about 15-30 s of training)")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from transformer_mt.check.child import check_in_child
    from transformer_mt.learner.loading import split_target

    path, name = split_target(args.target)
    outcome = check_in_child(path, name, args.quick)
    print(json.dumps(outcome["report"]) if args.json else outcome["text"])
    return 1 if outcome["failed"] else 0
