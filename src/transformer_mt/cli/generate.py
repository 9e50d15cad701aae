"""Sub-commands of a language-model run (model.arch: decoder_only):

    transformer-mt generate RUN --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
    transformer-mt evaluate RUN --text FILE      (perplexity; cli/translate.py sends it here)

Without --prompt, prompts are read from stdin, one per line; at a terminal, typed at a prompt."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from transformer_mt.cli import add_checkpoint_flag, add_device_flag, path_arg, positive_int
from transformer_mt.data.corpus import decode_line, read_lines

log = logging.getLogger("transformer_mt")


def register(subparsers: argparse._SubParsersAction) -> None:
    generate = subparsers.add_parser(
        "generate", help="continue prompts with a language-model run (greedy, or sampled)",
        description="Continue each prompt to the end of its line (or --max-new-tokens) and print the whole "
                    "line. Greedy by default; --temperature, --top-k or --top-p sample instead. A run trained "
                    "here reads each prompt after end-of-text (where the lines of its training text start); an "
                    "imported GPT-2 reads the prompt alone, as transformers' generate does.",
    )
    generate.add_argument("run", type=path_arg,
                          help="a language-model run (model.arch: decoder_only) or an imported GPT-2")
    generate.add_argument("--prompt", action="append", help="text to continue (repeat for several); "
                          "default: one prompt per stdin line")
    generate.add_argument("--max-new-tokens", type=positive_int, default=50, help="most tokens added (default 50)")
    generate.add_argument("--temperature", type=float, help="sample from softmax(logits / T), T > 0")
    generate.add_argument("--top-k", type=int, help="sample among the K most likely tokens (K >= 1)")
    generate.add_argument("--top-p", type=float, help="sample from the nucleus of probability P, 0 < P <= 1")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling, 0 to 2^64 - 1 (the same seed, "
                          "the same text)")
    add_checkpoint_flag(generate)
    add_device_flag(generate)
    generate.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from transformer_mt.inference.language_model import LanguageModel, check_seed, check_text, sampling_of

    sampling_of(args.temperature, args.top_k, args.top_p)  # refuse bad settings before loading the model
    check_seed(args.seed, "--seed")
    for number, prompt in enumerate(args.prompt or [], start=1):
        check_text(prompt, f"--prompt {number}")
    lm = LanguageModel.from_run(args.run, device=args.device, checkpoint=args.checkpoint)
    for prompt in args.prompt or []:
        lm.prompt_ids(prompt)  # an empty or too long prompt: its one line comes first
    log.info("%s: %s", args.run, "prompts continue after end-of-text, where each line of its training text starts"
             if lm.after_end_of_text else "prompts continue from their own tokens alone, as an imported GPT-2 does "
             "in transformers")
    capped = False

    def answer(prompts: list[str]) -> None:
        nonlocal capped
        room = min(lm.room(prompt) for prompt in prompts)
        if args.max_new_tokens > room and not capped:
            capped = True
            log.warning("--max-new-tokens %d is more than this model can add: it sees %d positions "
                        "(model.max_positions), the prompt included, so a continuation stops after at most %d "
                        "new tokens here", args.max_new_tokens, lm.model.positional.max_positions, room)
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
    from transformer_mt.inference.language_model import LanguageModel

    lines = read_lines(args.text)
    lm = LanguageModel.from_run(args.run, device=args.device, checkpoint=args.checkpoint)
    result = lm.perplexity(lines)
    print(f"perplexity = {result['perplexity']:.3f}  loss = {result['loss']:.4f} nats/token  "
          f"bits per character = {result['bits_per_character']:.4f}  ({result['tokens']} tokens, {len(lines)} lines)")
    if args.json:
        print(json.dumps(result))
    return 0
