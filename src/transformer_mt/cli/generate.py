"""Sub-commands of a language-model run (model.arch: decoder_only):

    transformer-mt generate RUN --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
    transformer-mt evaluate RUN --text FILE      (perplexity; cli/translate.py sends it here)

Without --prompt, prompts are read from stdin, one per line; at a terminal, typed at a prompt."""

from __future__ import annotations

import argparse
import json
import sys

from transformer_mt.cli import positive_int
from transformer_mt.data.corpus import decode_line, read_lines
from transformer_mt.runs import CHECKPOINT_CHOICES


def register(subparsers: argparse._SubParsersAction) -> None:
    generate = subparsers.add_parser(
        "generate", help="continue prompts with a language-model run (greedy, or sampled)",
        description="Continue each prompt to the end of its line (or --max-new-tokens) and print the whole "
                    "line. Greedy by default; --temperature, --top-k or --top-p sample instead.",
    )
    generate.add_argument("run", help="a language-model run (model.arch: decoder_only) or an imported GPT-2")
    generate.add_argument("--prompt", action="append", help="text to continue (repeat for several); "
                          "default: one prompt per stdin line")
    generate.add_argument("--max-new-tokens", type=positive_int, default=50, help="most tokens added (default 50)")
    generate.add_argument("--temperature", type=float, help="sample from softmax(logits / T), T > 0")
    generate.add_argument("--top-k", type=int, help="sample among the K most likely tokens (K >= 1)")
    generate.add_argument("--top-p", type=float, help="sample from the nucleus of probability P, 0 < P <= 1")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling (the same seed, the same text)")
    generate.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="best",
                          help="best (default), last step checkpoint, or average.safetensors")
    generate.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1 ...")
    generate.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from transformer_mt.generation import LanguageModel, sampling_of

    sampling_of(args.temperature, args.top_k, args.top_p)  # refuse bad settings before loading the model
    lm = LanguageModel.from_run(args.run, device=args.device, checkpoint=args.checkpoint)

    def answer(prompts: list[str]) -> None:
        texts = lm.generate(prompts, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed)
        sys.stdout.writelines(text + "\n" for text in texts)
        sys.stdout.flush()

    if args.prompt:
        answer(args.prompt)
    elif sys.stdin.isatty():
        print("Type a prompt and press Enter; Ctrl-D to quit.", file=sys.stderr)
        while line := (print("> ", end="", file=sys.stderr, flush=True), sys.stdin.readline())[1]:
            answer([line.rstrip("\r\n")])
    else:
        for number, raw in enumerate(sys.stdin.buffer, start=1):
            answer([decode_line(raw.rstrip(b"\r\n"), number)])
    return 0


def run_evaluate_text(args: argparse.Namespace) -> int:
    """Perplexity of --text under a language-model run (`evaluate RUN --text FILE`)."""
    from transformer_mt.generation import LanguageModel

    lines = read_lines(args.text)
    lm = LanguageModel.from_run(args.run, device=args.device, checkpoint=args.checkpoint)
    result = lm.perplexity(lines)
    print(f"perplexity = {result['perplexity']:.3f}  loss = {result['loss']:.4f} nats/token  "
          f"bits per character = {result['bits_per_character']:.4f}  ({result['tokens']} tokens, {len(lines)} lines)")
    if args.json:
        print(json.dumps(result))
    return 0
