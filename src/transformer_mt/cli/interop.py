"""Sub-commands that carry a run to other tools and models from them: export, import.

    transformer-mt export ctranslate2 RUN --out DIR [--quantization int8] [--checkpoint best] [--force]
    transformer-mt export hf RUN --out DIR [--checkpoint best] [--languages SRC TGT] [--force]
    transformer-mt import marian SOURCE --run RUN
    transformer-mt import gpt2 SOURCE --run RUN
    transformer-mt import annotated CHECKPOINT --run RUN --heads H (--src-vocab F --tgt-vocab F | --src-text F --tgt-text F)
"""

from __future__ import annotations

import argparse
import logging
import shlex
from dataclasses import dataclass
from typing import Callable

from transformer_mt.cli import add_checkpoint_flag, path_arg, positive_int
# interop.ctranslate2 imports ctranslate2 only when an export runs: the parser needs none of it
from transformer_mt.interop.ctranslate2 import QUANTIZATIONS, export_ctranslate2
# interop.huggingface writes the files itself: transformers is needed only to use them
from transformer_mt.interop.huggingface import export_hf
# interop.marian and interop.gpt2 import huggingface_hub only to download a model by name
from transformer_mt.common.errors import UserError
from transformer_mt.interop.annotated import (THEIR_MAX_LEN, import_annotated, read_vocabulary,
                                              vocabulary_of_text)
from transformer_mt.interop.gpt2 import import_gpt2
from transformer_mt.interop.marian import import_marian

log = logging.getLogger("transformer_mt")


def register(subparsers: argparse._SubParsersAction) -> None:
    register_import(subparsers)
    export = subparsers.add_parser(
        "export", help="write a run in another engine's format (CTranslate2, Hugging Face transformers)",
        description="Write a trained run's model in the format of another inference engine.",
    )
    targets = export.add_subparsers(dest="target", required=True, metavar="FORMAT")
    ct2 = targets.add_parser(
        "ctranslate2", help="a CTranslate2 model folder (needs pip install 'transformer-mt[interop]')",
        description="Write RUN as a CTranslate2 model folder: model.bin, config.json, "
                    "shared_vocabulary.json, the run's tokenizer files (tokenizer.model; or vocab.json, "
                    "source.spm, target.spm for an imported OPUS-MT run) and transformer_mt.json.",
        epilog="CTranslate2 takes sentencepiece pieces: encode with DIR/tokenizer.model (imported runs: "
               "DIR/source.spm), pass max_input_length=MAX_POSITIONS (see DIR/transformer_mt.json) so that "
               "long inputs are truncated as `translate` does, and decode the output pieces with the same "
               "model (imported runs: DIR/target.spm).",
    )
    ct2.add_argument("run", type=path_arg, help="run directory written by `train` or `demo`")
    ct2.add_argument("--out", required=True, metavar="DIR", type=path_arg,
                     help="output folder (created; must be empty unless --force)")
    ct2.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                     help="weight type in the folder (default float32; int8 for fast CPU decoding)")
    add_checkpoint_flag(ct2)
    ct2.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    ct2.set_defaults(func=run_export_ctranslate2)
    register_export_hf(targets)


def register_export_hf(targets: argparse._SubParsersAction) -> None:
    hf = targets.add_parser(
        "hf", help="a Hugging Face transformers model folder (Marian or Pegasus; loads with AutoModelForSeq2SeqLM)",
        description="Write RUN as a Hugging Face transformers folder: config.json, generation_config.json, "
                    "model.safetensors, the stock MarianTokenizer's vocab.json, source.spm, target.spm and "
                    "tokenizer_config.json, a model card (README.md), transformer_mt.json and the run's config. "
                    "Post-norm runs become MarianMTModel, pre-norm runs PegasusForConditionalGeneration.",
        epilog="Greedy and beam search with length_penalty=0 give our outputs token for token. Set the license "
               "in DIR/README.md, then upload with `hf upload USER/NAME DIR .` (`huggingface-cli upload` in "
               "huggingface_hub < 1.0) or huggingface_hub.upload_folder. `import marian DIR` of a Marian "
               "export gives the run back.",
    )
    hf.add_argument("run", type=path_arg, help="run directory written by `train`, `demo` or `import marian`")
    hf.add_argument("--out", required=True, metavar="DIR", type=path_arg,
                    help="output folder (created; must be empty unless --force)")
    add_checkpoint_flag(hf)
    hf.add_argument("--languages", nargs=2, metavar=("SRC", "TGT"),
                    help="language codes for the model card and tokenizer (default: from the training file "
                         "names, such as train.de.gz and train.en.gz)")
    hf.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    hf.set_defaults(func=run_export_hf)


def run_export_hf(args: argparse.Namespace) -> int:
    command = shlex.join(["transformer-mt", "export", "hf", str(args.run), "--out", str(args.out),
                          "--checkpoint", args.checkpoint, *(["--languages", *args.languages] if args.languages else [])])
    out = export_hf(args.run, args.out, checkpoint=args.checkpoint, force=args.force,
                    languages=tuple(args.languages) if args.languages else None, command=command)
    log.info("wrote the Hugging Face model of %s (%s checkpoint) to %s", args.run, args.checkpoint, out)
    return 0


def run_export_ctranslate2(args: argparse.Namespace) -> int:
    out = export_ctranslate2(args.run, args.out, quantization=args.quantization,
                             checkpoint=args.checkpoint, force=args.force)
    log.info("wrote the CTranslate2 model of %s (%s checkpoint, %s weights) to %s",
             args.run, args.checkpoint, args.quantization, out)
    return 0


@dataclass(frozen=True)
class ImportFormat:
    """One row of `import`: a format, its sub-command's texts, its own arguments (besides
    SOURCE and --run, which every format has) and what it runs."""

    name: str
    help: str
    description: str
    epilog: str
    source: tuple[str, str]  # the positional argument's name and help
    run: Callable[[argparse.Namespace], object]  # what the import writes: the run directory
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None

    def command(self, args: argparse.Namespace) -> int:
        self.run(args)
        return 0


def add_annotated_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--heads", required=True, type=positive_int,
                        help="h, the attention heads (make_model's h; the weights do not show it)")
    parser.add_argument("--src-vocab", type=path_arg, metavar="FILE", help="the source vocabulary as JSON")
    parser.add_argument("--tgt-vocab", type=path_arg, metavar="FILE", help="the target vocabulary as JSON")
    parser.add_argument("--src-text", type=path_arg, metavar="FILE",
                        help="the source training text, to rebuild the vocabulary (instead of --src-vocab)")
    parser.add_argument("--tgt-text", type=path_arg, metavar="FILE", help="the target training text")
    parser.add_argument("--max-samples", type=positive_int, default=0, metavar="N",
                        help="with --src-text: the first N lines, their max_samples (default: every line)")
    parser.add_argument("--max-len", type=positive_int, default=THEIR_MAX_LEN, metavar="N",
                        help=f"their max_len: a source is cut to N ids, <sos> and <eos> included "
                             f"(default {THEIR_MAX_LEN}, as in their script)")


def run_import_annotated(args: argparse.Namespace) -> None:
    files, texts = (args.src_vocab, args.tgt_vocab), (args.src_text, args.tgt_text)
    if any(files) == any(texts) or None in (files if any(files) else texts):
        raise UserError("import annotated: give either --src-vocab and --tgt-vocab (JSON word -> id) or "
                        "--src-text and --tgt-text (the training text), both of one kind")
    if args.max_samples and not any(texts):
        raise UserError("--max-samples goes with --src-text and --tgt-text (it rebuilds their vocabularies)")
    if any(files):
        vocabs = [read_vocabulary(path) for path in files]
        origin = {"src_vocab": str(files[0]), "tgt_vocab": str(files[1])}
    else:
        vocabs = [vocabulary_of_text(path, args.max_samples) for path in texts]
        origin = {"src_text": str(texts[0]), "tgt_text": str(texts[1]), "max_samples": args.max_samples}
    import_annotated(args.checkpoint, args.run, args.heads, vocabs[0], vocabs[1], args.max_len, origin)


HUB_DOWNLOAD = "A name such as {} is downloaded with huggingface_hub (pip install 'transformer-mt[interop]') on a " \
               "machine that is online."

# Every import format, in the order `import --help` lists them: a new format is its module in
# interop/, its tokenizer in data/tokenizers/ and one row here.
IMPORTS = (
    ImportFormat(
        "marian", help="a Hugging Face MarianMTModel (OPUS-MT), from a folder or by name",
        description="Write RUN from a Hugging Face Marian model: config.yaml, best.safetensors, its "
                    "vocab.json, source.spm and target.spm, and imported.json (where it came from). "
                    "Translate, evaluate, plot, serve and fine-tune it like a trained run.",
        epilog=HUB_DOWNLOAD.format("Helsinki-NLP/opus-mt-en-de"),
        source=("source", "a folder in the Hugging Face layout (config.json, model.safetensors or "
                          "pytorch_model.bin, source.spm, target.spm, vocab.json) or a model name"),
        run=lambda args: import_marian(args.source, args.run)),
    ImportFormat(
        "gpt2", help="a Hugging Face GPT2LMHeadModel (a decoder-only language model), from a folder or by name",
        description="Write RUN from a Hugging Face GPT-2 model: config.yaml (model.arch: decoder_only), "
                    "best.safetensors, its byte-level BPE vocabulary as gpt2_tokenizer.json (GPT-2's own ids), "
                    "and imported.json (where it came from).",
        epilog=HUB_DOWNLOAD.format("openai-community/gpt2"),
        source=("source", "a folder in the Hugging Face layout (config.json, model.safetensors or "
                          "pytorch_model.bin, vocab.json and merges.txt or tokenizer.json) or a model name"),
        run=lambda args: import_gpt2(args.source, args.run)),
    ImportFormat(
        "annotated", help="a checkpoint of the Annotated Transformer (the study notes' transformer_wmt16.pth)",
        description="Write RUN from a torch.save file of the Annotated Transformer's make_model: a state dict "
                    "(src_embed.0.lut.weight, encoder.layers.0.self_attn.linears.0.weight, ...) or a dict holding "
                    "one under model_state_dict, state_dict or model. Writes config.yaml, best.safetensors, "
                    "word_vocab.json and imported.json; translate (by default exactly as their translate() does: "
                    "greedy, at most 50 words), evaluate, serve, plot and fine-tune it like a trained run.",
        epilog="The vocabularies are the word -> id objects their dataset built: save them with "
               "json.dump(dataset.src_vocab, open('src_vocab.json', 'w')) (and tgt_vocab), or give the training "
               "text and --max-samples to rebuild them as build_vocab does.",
        source=("checkpoint", "the .pth file (read with weights_only=True)"),
        run=run_import_annotated, arguments=add_annotated_arguments),
)


def register_import(subparsers: argparse._SubParsersAction) -> None:
    imports = subparsers.add_parser(
        "import", help="make a run of a model trained elsewhere (OPUS-MT's Marian models, GPT-2, the Annotated "
                       "Transformer's checkpoints)",
        description="Turn a model trained elsewhere into an ordinary run directory.",
    )
    formats = imports.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for row in IMPORTS:
        parser = formats.add_parser(row.name, help=row.help, description=row.description, epilog=row.epilog)
        parser.add_argument(row.source[0], type=path_arg, help=row.source[1])
        parser.add_argument("--run", required=True, type=path_arg, help="run directory to create (must not exist)")
        row.arguments(parser)
        parser.set_defaults(func=row.command)
