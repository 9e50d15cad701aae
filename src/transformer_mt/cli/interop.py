"""Sub-commands that carry a run to other tools: export.

    transformer-mt export ctranslate2 RUN --out DIR [--quantization int8] [--checkpoint best] [--force]
"""

from __future__ import annotations

import argparse
import logging

from transformer_mt.config import CHECKPOINT_CHOICES
# interop.ctranslate2 imports ctranslate2 only when an export runs: the parser needs none of it
from transformer_mt.interop.ctranslate2 import QUANTIZATIONS, export_ctranslate2

log = logging.getLogger("transformer_mt")


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export", help="write a run in another engine's format (CTranslate2)",
        description="Write a trained run's model in the format of another inference engine.",
    )
    targets = export.add_subparsers(dest="target", required=True, metavar="FORMAT")
    ct2 = targets.add_parser(
        "ctranslate2", help="a CTranslate2 model folder (needs pip install 'transformer-mt[interop]')",
        description="Write RUN as a CTranslate2 model folder: model.bin, config.json, "
                    "shared_vocabulary.json, the run's tokenizer.model and transformer_mt.json.",
        epilog="CTranslate2 takes sentencepiece pieces: encode with DIR/tokenizer.model, pass "
               "max_input_length=MAX_POSITIONS (see DIR/transformer_mt.json) so that long inputs are "
               "truncated as `translate` does, and decode the output pieces with the same model.",
    )
    ct2.add_argument("run", help="run directory written by `train` or `demo`")
    ct2.add_argument("--out", required=True, metavar="DIR",
                     help="output folder (created; must be empty unless --force)")
    ct2.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                     help="weight type in the folder (default float32; int8 for fast CPU decoding)")
    ct2.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="best",
                     help="best (default), last step checkpoint, or average.safetensors")
    ct2.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    ct2.set_defaults(func=run_export_ctranslate2)


def run_export_ctranslate2(args: argparse.Namespace) -> int:
    out = export_ctranslate2(args.run, args.out, quantization=args.quantization,
                             checkpoint=args.checkpoint, force=args.force)
    log.info("wrote the CTranslate2 model of %s (%s checkpoint, %s weights) to %s",
             args.run, args.checkpoint, args.quantization, out)
    return 0
