"""Sub-commands that use a trained run: translate, evaluate.

    transformer-mt translate RUN [-i FILE] [-o FILE] [--beam K] [--nbest N] ...
    transformer-mt evaluate RUN --src FILE --ref FILE [--json] [--lowercase-tokenized] ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import sys
import time
from pathlib import Path
from typing import Iterator, TextIO

from transformer_mt.cli import (
    add_checkpoint_flag, add_device_flag, add_dtype_flag, add_option_flag, add_tokenize_flag, path_arg, positive_int,
)
from transformer_mt.data.corpus import decode_line, read_lines
from transformer_mt.common.device import resolve_precision, reuse_freed_memory
from transformer_mt.common.errors import UserError
from transformer_mt.common.files import atomic_open, check_writable_file
from transformer_mt.runs.directory import RunDir, list_checkpoints

log = logging.getLogger("transformer_mt")

STREAM_LINES = 64  # most stdin lines translated together, when they are already waiting


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The options translate and evaluate share: which weights, where, how to search."""
    parser.add_argument("run", type=path_arg, help="run directory written by `train` or `demo`")
    add_option_flag(parser, "decode.beam", "--beam")
    add_option_flag(parser, "decode.length_penalty", "--length-penalty")
    add_option_flag(parser, "decode.batch_tokens", "--batch-tokens")
    add_checkpoint_flag(parser)
    add_device_flag(parser)
    add_dtype_flag(parser)
    add_option_flag(parser, "decode.precision", "--precision")
    add_option_flag(parser, "decode.engine", "--engine")


def register(subparsers: argparse._SubParsersAction) -> None:
    translate = subparsers.add_parser(
        "translate", help="translate a file, stdin, or sentences typed at a prompt",
        description="Translate one sentence per line: FILE to FILE with -i/-o, or stdin to stdout "
                    "line by line as lines arrive; at a terminal, an interactive prompt.",
        epilog="With --nbest N every input line gives up to N lines 'INDEX ||| TRANSLATION ||| SCORE' "
               "(INDEX counts input lines from 0; SCORE is the log-probability divided by the length penalty), "
               "each a different translation: of two subword segmentations of one text the better scored "
               "(--raw-nbest: every hypothesis, N lines). N may not exceed --beam; without --beam the run's beam is "
               "widened to N.",
    )
    add_decoding_arguments(translate)
    translate.add_argument("-i", "--input", type=path_arg, help="input file (UTF-8, .gz allowed; default: stdin)")
    translate.add_argument("-o", "--output", type=path_arg,
                           help="output file, written whole at the end (default: stdout)")
    translate.add_argument("--nbest", type=positive_int, default=1, help="translations per line (default 1)")
    translate.add_argument("--raw-nbest", action="store_true",
                           help="with --nbest: every hypothesis of the beam, the same text in two segmentations "
                                "included (default: distinct translations)")
    translate.set_defaults(func=run_translate)

    evaluate = subparsers.add_parser(
        "evaluate", help="translate a test set and score it with sacreBLEU (BLEU, chrF); "
                         "a language model: perplexity of --text",
        description="Translate --src and score the output against --ref: BLEU and chrF with their "
                    "sacreBLEU signatures, computed exactly as during training validation. On a "
                    "language-model run: perplexity and bits per character of --text.",
    )
    add_decoding_arguments(evaluate)
    evaluate.add_argument("--src", type=path_arg, help="source sentences, one per line")
    evaluate.add_argument("--ref", type=path_arg, help="reference translations, line N for line N of --src")
    evaluate.add_argument("--text", type=path_arg,
                          help="a language-model run: the text to score (one line per sentence)")
    evaluate.add_argument("--lowercase-tokenized", action="store_true",
                          help="also report BLEU on lowercased, 13a-tokenized text")
    add_tokenize_flag(evaluate, "BLEU")
    evaluate.add_argument("--hyp", type=path_arg, help="also write the translations to this file")
    evaluate.add_argument("--json", action="store_true", help="last stdout line: the scores as JSON")
    evaluate.set_defaults(func=run_evaluate)


def load_translator(args: argparse.Namespace, nbest: int = 1):
    """The run's Translator and the decoding settings of this command (one rule for
    beam and n-best, the server's: see `translator.decode_settings`)."""
    from transformer_mt.inference.translator import Translator

    overrides = {key: value for key, value in (
        ("length_penalty", args.length_penalty), ("batch_tokens", args.batch_tokens), ("precision", args.precision),
        ("engine", args.engine),
    ) if value is not None}
    translator = Translator.from_run(args.run, device=args.device, checkpoint=args.checkpoint, dtype=args.dtype,
                                     **overrides)
    return translator, translator.settings(args.beam, nbest)


def check_output(path: str, option: str, run: str, inputs: dict[str, str | None]) -> Path:
    """Fail before any work when the output `path` (given as `option`) cannot be written
    or is a file this command reads: one of `inputs` (option -> path) or a file of the
    run, which writing the translations would overwrite."""
    out = check_writable_file(path, option)
    run_dir = RunDir(Path(run))
    run_files = [run_dir.config, *run_dir.tokenizer_files(), run_dir.best, run_dir.average,
                 *list_checkpoints(run_dir.checkpoints)]
    named = [(f"the {name} file", Path(given)) for name, given in inputs.items() if given is not None]
    for what, source in named + [(f"a file of the run {run}", file) for file in run_files]:
        if same_file(out, source):
            raise UserError(f"{option} {path}: is {what}, which this command reads; writing the output there "
                            "would overwrite it: choose another file")
    return out


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (links and relative paths resolved)."""
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def write_lines_atomic(path: str | Path, lines: list[str]) -> None:
    """Write lines through the atomic-write helper: all of them or none."""
    try:
        with atomic_open(path, "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in lines)
    except OSError as err:
        raise UserError(f"{path}: cannot be written ({err.strerror})") from None


def output_lines(translator, settings, lines: list[str], nbest: int, first_index: int = 0,
                 raw_nbest: bool = False) -> list[str]:
    """Translations of `lines`; with nbest > 1, 'INDEX ||| TEXT ||| SCORE' lines (distinct
    texts unless `raw_nbest`)."""
    found = translator.search(lines, settings, nbest, raw_nbest)
    if nbest == 1:
        return [row[0].text for row in found]
    return [
        f"{first_index + index} ||| {hypothesis.text} ||| {hypothesis.score:.4f}"
        for index, row in enumerate(found)
        for hypothesis in row
    ]


def stdin_batches(fd: int, max_lines: int = STREAM_LINES) -> Iterator[list[bytes]]:
    """Lines of `fd` in groups: every line that is already waiting (up to max_lines), so
    a pipe of many lines is batched while a line typed or sent alone is answered at once."""
    pending, lines = b"", []
    while True:
        while len(lines) >= max_lines:
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if lines and not select.select([fd], [], [], 0)[0]:
            yield lines
            lines = []
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *complete, pending = (pending + chunk).split(b"\n")
        lines.extend(complete)
    lines += [pending] if pending else []
    for start in range(0, len(lines), max_lines):
        yield lines[start : start + max_lines]


def stream(translator, settings, nbest: int, out: TextIO, raw_nbest: bool = False) -> None:
    """stdin to `out`, answering each group of waiting lines before reading on."""
    number = 0
    for raw_lines in stdin_batches(sys.stdin.fileno()):
        lines = [decode_line(raw, number + i + 1) for i, raw in enumerate(raw_lines)]
        for line in output_lines(translator, settings, lines, nbest, number, raw_nbest):
            out.write(line + "\n")
        out.flush()
        number += len(lines)


def interactive(translator, settings, nbest: int, out: TextIO, raw_nbest: bool = False) -> None:
    """A prompt at a terminal: type a sentence, get its translation; Ctrl-D ends."""
    print("Type a sentence and press Enter; Ctrl-D to quit.", file=sys.stderr)
    number = 0
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            print(file=sys.stderr)
            return
        for translation in output_lines(translator, settings, [line.rstrip("\r\n")], nbest, number, raw_nbest):
            print(translation, file=out, flush=True)
        number += 1


def run_translate(args: argparse.Namespace) -> int:
    """Translations alone on stdout: whatever the model's code prints (a learner's file: its
    imports, its forward) goes to stderr."""
    translations = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return translate_to(args, translations)


def translate_to(args: argparse.Namespace, out: TextIO) -> int:
    if args.output is not None:
        check_output(args.output, "-o", args.run, {"-i": args.input})
    reuse_freed_memory()
    translator, settings = load_translator(args, args.nbest)
    if args.input is None and args.output is None:
        if sys.stdin.isatty():
            interactive(translator, settings, args.nbest, out, args.raw_nbest)
        else:
            stream(translator, settings, args.nbest, out, args.raw_nbest)
        return 0
    if args.input is not None:
        lines = read_lines(args.input)
    else:
        lines = [decode_line(raw, n) for n, raw in enumerate(sys.stdin.buffer.read().split(b"\n"), start=1)]
        lines = lines[:-1] if lines and lines[-1] == "" else lines
    start = time.perf_counter()
    outputs = output_lines(translator, settings, lines, args.nbest, raw_nbest=args.raw_nbest)
    seconds = time.perf_counter() - start
    log.info("translated %d lines in %.1f s (%.1f lines/s)", len(lines), seconds, len(lines) / max(seconds, 1e-9))
    if args.output is None:
        out.writelines(line + "\n" for line in outputs)
        out.flush()
    else:
        write_lines_atomic(args.output, outputs)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from transformer_mt.cli.generate import run_evaluate_text
    from transformer_mt.common.evaluation import score

    cfg = RunDir(Path(args.run)).require().read_config()
    if cfg.model.arch == "decoder_only":
        if not args.text:
            raise UserError(f"{args.run}: is a language model; give --text FILE to score (its perplexity)")
        return run_evaluate_text(args)
    if not args.src or not args.ref:
        raise UserError(f"{args.run}: is a translation model; give --src FILE and --ref FILE")
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}: "
                        "line N of --ref must translate line N of --src")
    if not sources:
        raise UserError(f"{args.src}: the file is empty")
    if args.hyp:
        check_output(args.hyp, "--hyp", args.run, {"--src": args.src, "--ref": args.ref})
    reuse_freed_memory()
    translator, settings = load_translator(args)
    start = time.perf_counter()
    hypotheses = [row[0].text for row in translator.search(sources, settings)]
    seconds = time.perf_counter() - start
    if args.hyp:
        write_lines_atomic(args.hyp, hypotheses)
    scores = score(hypotheses, references, lowercase_tokenized=args.lowercase_tokenized,
                   tokenize=args.tokenize or cfg.data.bleu_tokenize)
    print(f"BLEU = {scores.bleu:.2f}  {scores.bleu_signature}")
    print(f"chrF = {scores.chrf:.2f}  {scores.chrf_signature}")
    if scores.bleu_lc_tok is not None:
        print(f"BLEU (lowercased, 13a-tokenized) = {scores.bleu_lc_tok:.2f}")
    precision = resolve_precision(settings.precision, translator.device)
    log.info("%d sentences, beam %d, %s weights, %s precision, %s checkpoint, %.1f s", len(sources), settings.beam,
             args.dtype, precision, args.checkpoint, seconds)
    if args.json:
        print(json.dumps({**scores.to_dict(), "sentences": len(sources), "beam": settings.beam, "dtype": args.dtype,
                          "precision": precision, "checkpoint": args.checkpoint, "seconds": round(seconds, 2)}))
    return 0
