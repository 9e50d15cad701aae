"""What the fast decoding paths cost in quality: one trained run, one test set, BLEU in one table.

Systems (each decodes every sentence with the same beam, length penalty and length limit):

    ours-fp32       Translator.from_run(RUN)                      the reference row
    ours-bf16       Translator.from_run(RUN, dtype="bfloat16")    `translate --dtype bfloat16`
    ours-int8       Translator.from_run(RUN, dtype="int8")        `translate --dtype int8`
    ct2-float32     `export ctranslate2 RUN` decoded by ctranslate2.Translator
    ct2-int8        `export ctranslate2 RUN --quantization int8`

Prints cased sacreBLEU and chrF, the BLEU difference to ours-fp32, the share of outputs
identical to ours-fp32's and the decoding seconds (indicative only: benchmarks/
decode_speed.py measures speed properly, each engine in its own process). With --json the
last stdout line is {"rows": [{"system", "bleu", "chrf", "delta_bleu", "same_as_fp32",
"seconds"}, ...], "beam", "length_penalty", "sentences"}.

The length penalty defaults to 0: CTranslate2 normalises by |Y| ** alpha, we by the GNMT
((5 + |Y|) / 6) ** alpha (interop/ctranslate2.py), so only alpha = 0 compares the engines
on the same search; with it ct2-float32 gives ours-fp32's outputs but where float rounding
tips a close choice (one length limit per call is used for CTranslate2: the longest
source's, where we limit each sentence by its own length; no output here comes near it).

    python benchmarks/fast_path_quality.py runs/multi30k_en_de \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz --ref ../shared/data/multi30k/test_2016_flickr.de.gz
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from transformer_mt.data.corpus import read_lines
from transformer_mt.common.evaluation import Scores, score
from transformer_mt.inference.translator import Translator

SYSTEMS = ("ours-fp32", "ours-bf16", "ours-int8", "ct2-float32", "ct2-int8")
OURS_DTYPES = {"ours-fp32": "float32", "ours-bf16": "bfloat16", "ours-int8": "int8"}

# A system turns source lines into detokenized translations.
Translate = Callable[[list[str]], list[str]]


def ct2(run: str, quantization: str, reference: Translator, beam: int, alpha: float, threads: int,
        tmp: str) -> Translate:
    """The run exported as `transformer-mt export ctranslate2` writes it, decoded with the
    options `interop/ctranslate2.py` documents: the reference translator's subwords in,
    its output length limit (the longest source's; CTranslate2 counts </s> apart), no minimum
    length."""
    import ctranslate2

    from transformer_mt.interop.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(run, Path(tmp) / quantization, quantization=quantization)
    engine = ctranslate2.Translator(str(out), device="cpu", intra_threads=threads, inter_threads=1)
    tokenizer = reference.tokenizer

    def translate(lines: list[str]) -> list[str]:
        ids = reference._encode(lines)  # checked and truncated as `translate` does
        lengths = torch.tensor([len(seq) + 1 for seq in ids])  # + </s>
        limit = int(reference._output_limits(lengths, reference.defaults).max())
        results = engine.translate_batch(
            [tokenizer.id_to_piece(seq) for seq in ids], beam_size=beam, length_penalty=alpha,
            min_decoding_length=0, max_decoding_length=limit + 1, max_input_length=reference.max_source + 1,
            max_batch_size=64, batch_type="examples",
        )
        return tokenizer.decode([[tokenizer.piece_to_id(p) for p in r.hypotheses[0]] for r in results])

    return translate


def build(system: str, args: argparse.Namespace, reference: Translator, tmp: str) -> Translate | None:
    """`system`'s translate function; ours-fp32 is `reference`, whose tokenizer and length
    limits the CTranslate2 systems use too."""
    if system in OURS_DTYPES:
        if system == "ours-fp32":
            return reference.translate
        translator = Translator.from_run(args.run, device="cpu", dtype=OURS_DTYPES[system],
                                         beam=args.beam, length_penalty=args.length_penalty)
        return translator.translate
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print(f"{system}: skipped (pip install 'transformer-mt[interop]')", file=sys.stderr)
        return None
    return ct2(args.run, system.split("-")[1], reference, args.beam, args.length_penalty, args.threads, tmp)


def print_table(rows: list[dict]) -> None:
    print(f"{'system':12} {'BLEU':>6} {'chrF':>6} {'dBLEU':>6} {'same as fp32':>12} {'seconds':>8}")
    for row in rows:
        print(f"{row['system']:12} {row['bleu']:6.2f} {row['chrf']:6.2f} {row['delta_bleu']:+6.2f} "
              f"{row['same_as_fp32']:12.1%} {row['seconds']:8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a trained run directory")
    parser.add_argument("--src", required=True, help="source lines (.gz read too)")
    parser.add_argument("--ref", required=True, help="one reference per source line")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    parser.add_argument("--length-penalty", type=float, default=0.0, help="alpha (default 0: see above)")
    parser.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer (char for the demo's one-word outputs)")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true", help="last stdout line: the rows as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        parser.error(f"{args.src} has {len(sources)} lines, {args.ref} {len(references)}")
    systems = ["ours-fp32"] + [s for s in args.systems if s != "ours-fp32"]  # the reference first
    outputs: dict[str, list[str]] = {}
    rows: list[dict] = []
    fp32: Scores | None = None
    reference = Translator.from_run(args.run, device="cpu", beam=args.beam, length_penalty=args.length_penalty)
    with tempfile.TemporaryDirectory() as tmp:
        for system in systems:
            translate = build(system, args, reference, tmp)
            if translate is None:
                continue
            start = time.perf_counter()
            outputs[system] = translate(sources)
            seconds = time.perf_counter() - start
            scores = score(outputs[system], references, tokenize=args.tokenize)
            fp32 = fp32 or scores  # ours-fp32 comes first
            same = sum(a == b for a, b in zip(outputs[system], outputs["ours-fp32"])) / len(sources)
            rows.append({"system": system, "bleu": round(scores.bleu, 2), "chrf": round(scores.chrf, 2),
                         "delta_bleu": round(scores.bleu - fp32.bleu, 2),
                         "same_as_fp32": round(same, 4), "seconds": round(seconds, 1)})
            print(f"  {system}: BLEU {scores.bleu:.2f} in {seconds:.0f} s", file=sys.stderr)
    print(f"{len(sources)} sentences, beam {args.beam}, length penalty {args.length_penalty}, "
          f"{args.threads} threads; {fp32.bleu_signature if fp32 else ''}")
    print_table(rows)
    if args.json:
        print(json.dumps({"rows": rows, "beam": args.beam, "length_penalty": args.length_penalty,
                          "sentences": len(sources)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
