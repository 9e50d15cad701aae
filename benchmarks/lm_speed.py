"""Language-model speed: our decoder-only model (model.arch: decoder_only) against Hugging
Face's GPT2LMHeadModel of the same shape, training and generating on the same token ids.

    python benchmarks/lm_speed.py [--quick] [--json] [--threads N]

What is measured (random weights, random token ids drawn from a fixed seed; both systems get
identical batches and prompts):

  training    target tokens/s of full optimizer steps: forward + loss + backward + Adam step,
              in fp32 and under bf16 autocast (torch.autocast("cpu", dtype=torch.bfloat16)).
              Ours runs the pieces `transformer-mt train` runs: LanguageModelTask.loss_view
              (NextTokenPrediction) and .criterion (the fused LabelSmoothingLoss, smoothing 0
              as the lm presets train), the loss divided by the batch's tokens, Adam from
              make_optimizer (betas 0.9/0.98, eps 1e-9) at a fixed rate, transformer_mt's
              autocast. Hugging Face runs what its users write: model(ids, labels=ids).loss,
              backward, torch.optim.Adam with the same betas, eps and rate.
              Both see sequences of `--block` tokens and predict the same block - 1 next
              tokens of each: ours takes BlockBatch.of(sequences) (inputs = tokens 0..T-2,
              targets = 1..T-1, what BlockStream yields); HF takes the whole sequence as
              input_ids and labels and shifts the labels itself, so its standard path also
              computes logits for the last position, whose label it ignores (1/T more work:
              0.4% at T = 256).
  generation  new tokens/s of greedy decoding with the KV cache, fp32, at batch 1 and 16 with
              equal-length random prompts: ours transformer_mt.decoding.sampling.generate
              (eos_id None: never stops early); HF model.generate(do_sample=False,
              max_new_tokens=N, min_new_tokens=N, use_cache=True). Each call is checked to
              produce exactly N new tokens per row; the timed calls include the prompt's
              forward (prefill), as a user's call does.

How: warm-up steps (or one warm-up call) first, then the timed ones; tokens / seconds of the
timed part. Every (system, training|generation) runs in its own process (this script again,
with hidden --only/--what flags; --quick: one per system), so the two never share allocator
state or thread pools; both get the toolkit's memory settings (device.reuse_freed_memory, as
`train` sets them) and torch's default thread count unless --threads N. The parent measures
the host's fp32 and bf16 matrix-product peaks first (GFLOP/s, the best of several 2048 x 2048
products) and prints them, so a table can be read against what the hardware did that day.

The Hugging Face side is set up as fast as it goes for the same function: attention
implementation "sdpa" chosen explicitly (transformers 5.x picks it by default on CPU too;
the alternative, "eager", is slower), activation "gelu_pytorch_tanh" (torch's fused
tanh-GELU, the function GPT-2's default "gelu_new" computes in several Python-level ops;
ours is gelu_tanh, the same F.gelu(approximate="tanh")). Shapes: GPT2Config(n_layer, n_embd,
n_head, n_inner = 4 n_embd, n_positions = block, vocab_size), dropout 0, tied embeddings;
ours ModelConfig(arch=decoder_only, activation=gelu_tanh, positional=learned,
scale_embeddings=False, norm_first=True, tie_embeddings=True, max_positions=block), dropout
0. (Ours has an output bias, V numbers; GPT-2 has none.)

Default shape: 4 layers of width 256, 4 heads, d_ff 1024, blocks of 256, batches of 8 blocks,
an 8,000-token vocabulary: the lm_small preset's model, what this toolkit trains on a CPU.
GPT-2 small itself (12 x 768, 1024 positions, a 50,257 vocabulary) takes seconds per step
on a 2-core CPU and is dominated by its vocabulary projection; this shape keeps a run to a
few minutes with every part (attention, feed-forward, output layer, loss, optimizer) still
a visible share of the step. --quick: a tiny shape and a few steps, training and generation
in one process per system (under 20 s, for the tests).

How to read it: the tables give tokens/s of each system and ours/HF (higher is better for
ours); the goals printed in the headers (training >= 1.2x, generation >= 1x) are this
toolkit's targets, not guarantees. Compare numbers within one run (same host, same peaks).
With --json the last stdout line is

    {"peak_gflops": {"fp32", "bf16"}, "shape": {...}, "threads": {"ours", "hf"},
     "hf_attn_implementation": "sdpa",
     "rows": [{"what": "train"|"generate", "setting": "fp32"|"bf16"|"batch1"|"batch16",
               "ours_tokens_per_s", "hf_tokens_per_s", "ratio", "goal"}, ...]}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch

from transformer_mt.common.config import Config, ModelConfig, TrainConfig
from transformer_mt.data.blocks import BlockBatch
from transformer_mt.decoding.sampling import generate
from transformer_mt.common.device import autocast, has_fast_bf16, reuse_freed_memory
from transformer_mt.model.language_model import build_language_model
from transformer_mt.training.language_model import LanguageModelTask
from transformer_mt.training.trainer import make_optimizer, set_lr

from _timing import matmul_peaks, now  # benchmarks/_timing.py

CPU = torch.device("cpu")
PAD, EOS = 0, 1  # Hugging Face's pad and eos (min_new_tokens bans eos); tokens are drawn from 2 .. V - 1
LR = 1e-4
GOALS = {"train": 1.2, "generate": 1.0}
SYSTEMS = ("ours", "hf")


@dataclass(frozen=True)
class Shape:
    layers: int
    width: int
    heads: int
    block: int
    batch: int
    vocab: int


DEFAULT = Shape(layers=4, width=256, heads=4, block=256, batch=8, vocab=8000)
QUICK = Shape(layers=2, width=64, heads=2, block=64, batch=4, vocab=512)


# ---- the two systems -------------------------------------------------------------------
def our_config(shape: Shape) -> ModelConfig:
    return ModelConfig(
        n_layers=shape.layers, d_model=shape.width, d_ff=4 * shape.width, n_heads=shape.heads, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, norm_first=True, tie_embeddings=True,
        max_positions=shape.block, src_vocab_size=shape.vocab, tgt_vocab_size=shape.vocab, activation="gelu_tanh",
        positional="learned", arch="decoder_only", scale_embeddings=False,
    )


class _Vocabulary:
    """All LanguageModelTask.criterion asks of a tokenizer: its size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def hf_model(shape: Shape):
    """GPT2LMHeadModel of `shape`: sdpa attention, torch's tanh-GELU, dropout 0, tied embeddings."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    config = GPT2Config(
        vocab_size=shape.vocab, n_positions=shape.block, n_embd=shape.width, n_layer=shape.layers,
        n_head=shape.heads, n_inner=4 * shape.width, activation_function="gelu_pytorch_tanh",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD, attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if model.config._attn_implementation != "sdpa":
        raise RuntimeError(f"Hugging Face attention is {model.config._attn_implementation!r}, not 'sdpa'")
    return model


def our_train_step(shape: Shape):
    """One optimizer step as the trainer takes it (Trainer.train_step, accumulate 1, no clipping)."""
    torch.manual_seed(0)
    train = TrainConfig(label_smoothing=0.0)
    task = LanguageModelTask(Config(model=our_config(shape), train=train), _Vocabulary(shape.vocab), None)
    model = task.build_model()
    view, criterion = task.loss_view(model), task.criterion(model)
    optimizer = make_optimizer(model.parameters(), train)
    set_lr(optimizer, LR)
    view.train()

    def step(sequences: torch.Tensor, precision: str) -> tuple[float, int]:
        batch = BlockBatch.of(sequences.numpy())
        with autocast(CPU, precision):
            logits, target = view(batch)
        loss = criterion(logits, target, 1.0 / batch.n_tokens)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), batch.n_tokens

    return step


def hf_train_step(shape: Shape):
    """One optimizer step the standard Hugging Face way: model(ids, labels=ids).loss."""
    model = hf_model(shape).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-9)

    def step(sequences: torch.Tensor, precision: str) -> tuple[float, int]:
        context = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
        with context:
            loss = model(input_ids=sequences, labels=sequences).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item(), sequences.size(0) * (sequences.size(1) - 1)  # labels shifted inside

    return step


def our_generate(shape: Shape):
    torch.manual_seed(0)
    model = build_language_model(our_config(shape)).eval()

    def run(prompt: torch.Tensor, new: int) -> torch.Tensor:
        return generate(model, prompt, new, eos_id=None)

    return run


def hf_generate(shape: Shape):
    model = hf_model(shape).eval()

    def run(prompt: torch.Tensor, new: int) -> torch.Tensor:
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=new, min_new_tokens=new, use_cache=True, pad_token_id=PAD)
        return out[:, prompt.size(1):]

    return run


# ---- measurements (in a child process) ------------------------------------------------
def sequences(shape: Shape, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` batches (batch, block) of random ids in 2 .. V - 1, the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(2, shape.vocab, (shape.batch, shape.block), generator=generator) for _ in range(count)]


def measure_train(system: str, shape: Shape, dtypes: list[str], warmup: int, steps: int) -> list[dict]:
    rows = []
    batches = sequences(shape, warmup + steps)
    for dtype in dtypes:
        step = (our_train_step if system == "ours" else hf_train_step)(shape)  # a fresh model per dtype
        losses = [step(batch, dtype)[0] for batch in batches[:warmup]]
        start, tokens = now(CPU), 0
        for batch in batches[warmup:]:
            loss, n = step(batch, dtype)
            losses.append(loss)
            tokens += n
        seconds = now(CPU) - start
        rows.append({"system": system, "what": "train", "setting": dtype, "tokens_per_s": tokens / seconds,
                     "seconds": seconds, "tokens": tokens, "first_loss": losses[0]})  # ~ln V for both: same task
        print(f"  {system:4} train    {dtype:8} {tokens / seconds:9.0f} tok/s", file=sys.stderr, flush=True)
    return rows


def measure_generate(system: str, shape: Shape, batches: list[int], prompt_len: int, new: int,
                     repeats: int) -> list[dict]:
    run = (our_generate if system == "ours" else hf_generate)(shape)
    rows = []
    for size in batches:
        generator = torch.Generator().manual_seed(1)
        prompt = torch.randint(2, shape.vocab, (size, prompt_len), generator=generator)
        run(prompt, new)  # warm-up
        start, tokens = now(CPU), 0
        for _ in range(repeats):
            out = run(prompt, new)
            if tuple(out.shape) != (size, new):
                raise RuntimeError(f"{system} produced new tokens of shape {tuple(out.shape)}, expected {(size, new)}")
            tokens += out.numel()
        seconds = now(CPU) - start
        rows.append({"system": system, "what": "generate", "setting": f"batch{size}", "tokens_per_s": tokens / seconds,
                     "seconds": seconds, "tokens": tokens})
        print(f"  {system:4} generate batch{size:<3} {tokens / seconds:9.0f} tok/s", file=sys.stderr, flush=True)
    return rows


def child(args: argparse.Namespace, shape: Shape) -> dict:
    rows = []
    if args.what in ("train", "both"):
        rows += measure_train(args.only, shape, args.dtypes.split(","), args.warmup, args.steps)
    if args.what in ("generate", "both"):
        rows += measure_generate(args.only, shape, args.gen_batches, args.prompt, args.new_tokens, args.repeats)
    out = {"rows": rows, "threads": torch.get_num_threads()}
    if args.only == "hf":
        import transformers

        out["transformers"] = transformers.__version__
        out["attn_implementation"] = "sdpa"  # hf_model checks the model got it
    return out


# ---- the parent: one process per (system, measurement), then the table --------------------
def run_child(system: str, what: str, args: argparse.Namespace, shape: Shape, dtypes: list[str]) -> dict | None:
    command = [sys.executable, __file__, "--only", system, "--what", what, "--json",
               "--layers", str(shape.layers), "--width", str(shape.width), "--heads", str(shape.heads),
               "--block", str(shape.block), "--batch", str(shape.batch), "--vocab", str(shape.vocab),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--dtypes", ",".join(dtypes),
               "--prompt", str(args.prompt), "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats),
               "--gen-batches", *(str(b) for b in args.gen_batches)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        print(f"{system} {what}: failed (exit code {result.returncode})", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def paired_rows(results: list[dict]) -> list[dict]:
    """Rows of both systems, paired by (what, setting), in the order measured."""
    by_key: dict[tuple[str, str], dict] = {}
    for result in results:
        for row in result["rows"]:
            pair = by_key.setdefault((row["what"], row["setting"]), {"what": row["what"], "setting": row["setting"]})
            pair[f"{row['system']}_tokens_per_s"] = round(row["tokens_per_s"], 1)
    rows = []
    for (what, _), pair in by_key.items():
        ours, hf = pair.get("ours_tokens_per_s"), pair.get("hf_tokens_per_s")
        pair["ratio"] = round(ours / hf, 3) if ours and hf else None
        pair["goal"] = GOALS[what]
        rows.append(pair)
    return rows


def print_table(rows: list[dict], shape: Shape, args: argparse.Namespace) -> None:
    sections = {
        "train": f"Training, target tokens/s (forward + loss + backward + Adam; {args.steps} timed steps after "
                 f"{args.warmup}; goal: ours/HF >= {GOALS['train']:g}x)",
        "generate": f"Generation, new tokens/s (greedy, KV cache, fp32; prompt {args.prompt}, {args.new_tokens} new "
                    f"tokens, {args.repeats} timed calls after 1; goal: ours/HF >= {GOALS['generate']:g}x)",
    }
    for what, title in sections.items():
        chosen = [row for row in rows if row["what"] == what]
        if not chosen:
            continue
        print(title)
        print(f"  {'setting':10}{'ours':>10}{'HF':>10}{'ours/HF':>9}")
        for row in chosen:
            ours, hf, ratio = row.get("ours_tokens_per_s"), row.get("hf_tokens_per_s"), row["ratio"]
            cells = [f"{v:10.0f}" if v else f"{'failed':>10}" for v in (ours, hf)]
            print(f"  {row['setting']:10}{''.join(cells)}{f'{ratio:8.2f}x' if ratio else '':>9}")


def resolve(args: argparse.Namespace) -> Shape:
    """The shape (defaults, --quick's, or the flags') and the run lengths, filled in on args."""
    base = QUICK if args.quick else DEFAULT
    shape = Shape(**{key: getattr(args, key) or value for key, value in asdict(base).items()})
    quick = args.quick
    args.steps = args.steps or (3 if quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (2 if quick else 3)
    args.prompt = args.prompt or (8 if quick else 32)
    args.new_tokens = args.new_tokens or (8 if quick else 128)
    args.repeats = args.repeats or (1 if quick else 3)
    args.gen_batches = args.gen_batches or [1, 16]
    if shape.width % shape.heads:
        raise SystemExit(f"--width {shape.width} must be divisible by --heads {shape.heads}")
    if args.prompt + args.new_tokens > shape.block:
        raise SystemExit(f"--prompt {args.prompt} + --new-tokens {args.new_tokens} exceed the {shape.block} positions")
    return shape


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the docstring at the top of the script for what is measured.")
    parser.add_argument("--quick", action="store_true", help="a tiny shape and a few steps (< 20 s)")
    parser.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    parser.add_argument("--threads", type=int, default=0, help="torch threads of each process (default: torch's)")
    parser.add_argument("--dtypes", default="auto",
                        help="training precisions, fp32,bf16 or one (default auto: bf16 only where the CPU has it natively)")
    parser.add_argument("--steps", type=int, default=0, help="timed training steps (default 10, quick 3)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed training steps first (default 3, quick 2)")
    parser.add_argument("--prompt", type=int, default=0, help="prompt tokens for generation (default 32, quick 8)")
    parser.add_argument("--new-tokens", type=int, default=0, help="tokens generated per row (default 128, quick 8)")
    parser.add_argument("--repeats", type=int, default=0, help="timed generate calls per batch size (default 3, quick 1)")
    parser.add_argument("--gen-batches", type=int, nargs="+", default=None, help="generation batch sizes (default 1 16)")
    for key, value in asdict(DEFAULT).items():
        parser.add_argument(f"--{key}", type=int, default=0, help=f"model/batch shape (default {value})")
    parser.add_argument("--only", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--what", choices=("train", "generate", "both"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = resolve(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    reuse_freed_memory()  # as `transformer-mt train` does; every process gets it

    if args.only:  # a child: one system, one measurement, a JSON line for the parent
        result = child(args, shape)
        if args.json:
            print(json.dumps(result))
        return 0

    dtypes = args.dtypes.split(",") if args.dtypes != "auto" else ["fp32", "bf16"]
    if args.dtypes == "auto" and not has_fast_bf16(CPU):
        dtypes = ["fp32"]
        print("bf16 rows skipped: this CPU has no native bf16, a step would take minutes "
              "(--dtypes fp32,bf16 runs them anyway)", file=sys.stderr)
    peaks = matmul_peaks(CPU)
    print(f"host: matmul peak fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; torch {torch.__version__}")
    print(f"shape: {shape.layers} layers, width {shape.width}, {shape.heads} heads, d_ff {4 * shape.width}, "
          f"block {shape.block}, batch {shape.batch}, vocabulary {shape.vocab}; each system in its own process",
          flush=True)
    results, failed = [], False
    for what in ("both",) if args.quick else ("train", "generate"):
        for system in SYSTEMS:
            result = run_child(system, what, args, shape, dtypes)
            failed |= result is None
            if result is not None:
                results.append(result)
    threads = {system: next((r["threads"] for r in results if r["rows"] and r["rows"][0]["system"] == system), None)
               for system in SYSTEMS}
    hf_info = next((r for r in results if "transformers" in r), {})
    print(f"threads: ours {threads['ours']}, HF {threads['hf']}; transformers {hf_info.get('transformers')}, "
          f"HF attention {hf_info.get('attn_implementation')}")
    rows = paired_rows(results)
    print_table(rows, shape, args)
    if args.json:
        print(json.dumps({"peak_gflops": {k: round(v, 1) for k, v in peaks.items()}, "shape": asdict(shape),
                          "threads": threads, "hf_attn_implementation": hf_info.get("attn_implementation"),
                          "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
