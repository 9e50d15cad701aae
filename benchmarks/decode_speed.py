"""Decoding speed, side by side, each system at its best thread count: ours (fp32, bf16,
int8), Hugging Face Marian, CTranslate2.

Every system gets the same random-weight model size (a preset of configs/), the same
random source sentences of 10-30 tokens, and must emit exactly `--length` target tokens
per sentence (eos is banned until then and decoding stops there), so all do the same
work. Two settings: beam 4 with batches of 32 sentences, and greedy one sentence at a
time. Each (system, thread count) runs in a fresh process of its own, at 1, 2, 4, ...
threads up to the host's cores: a CTranslate2 process loads neither torch nor this
toolkit (its models are converted beforehand), so no second OpenMP runtime shares it,
and each system is shown at its best thread count, named (on two vCPUs two threads can
be several times slower than one). A row whose system emitted another number of tokens
is flagged. Prints target tokens/s and sentences/s; with --json the last stdout line is

    {"peak_gflops": {"fp32", "bf16"},
     "rows": [{"system", "preset", "setting", "threads", "tokens_per_s", "sentences_per_s",
               "flag", "torch_loaded", "best", "products_ms_per_token" (--profile)}, ...]}

Hugging Face and CTranslate2 rows need `pip install transformers ctranslate2` (they are
skipped with a message otherwise). `ct2-*`: the Hugging Face model converted with
CTranslate2's TransformersConverter; `export-*`: our own model exported with
`transformer-mt export ctranslate2`'s spec builder (what a user of this toolkit deploys).

    python benchmarks/decode_speed.py --quick          # small preset, < 6 minutes
    python benchmarks/decode_speed.py                  # small and base, 500 sentences

--profile decodes the workload of our fp32 and bf16 rows again under the CPU profiler and prints,
for the best of them, the milliseconds a target token took and how many of them went to the
matrix products (the profiler's self time of mm, addmm, bmm), beside CTranslate2 float32's
whole token: what our products leave for everything else if we are to match it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from transformer_mt.common.config import ModelConfig

VOCAB = 8000
SETTINGS = {"beam4-batch32": (4, 32), "greedy-batch1": (1, 1)}
SYSTEMS = ("ours-fp32", "ours-bf16", "ours-int8", "hf", "ct2-float32", "ct2-int8", "export-float32", "export-int8")
PROFILED = ("ours-fp32", "ours-bf16")  # --profile: whose products the profiler names (int8's are quantized ops)
CONVERTED = ("ct2-float32", "ct2-int8", "export-float32", "export-int8")  # CTranslate2 models, made beforehand
# Our special ids (data/specials.py); the Marian model uses eos = 0 and pad = last id.
PAD, BOS, EOS = 0, 2, 3


@dataclass
class Workload:
    sentences: list[list[int]]  # source ids in 4 .. VOCAB - 2 (no special id of either convention)
    length: int                 # target tokens every system must emit


# A system turns (batch of sentences, beam, forced length) into decoded outputs; it
# returns how many target tokens it produced, which the harness checks.
Decode = Callable[[list[list[int]], int, int], int]


def make_workload(count: int, length: int, seed: int = 1) -> Workload:
    rng = random.Random(seed)
    sentences = [[rng.randrange(4, VOCAB - 1) for _ in range(rng.randint(10, 30))] for _ in range(count)]
    return Workload(sentences, length)


def model_config(preset: str) -> ModelConfig:
    from transformer_mt.common.config import load_config, replace

    cfg = load_config(preset, ["--data.task=copy"]).model
    return replace(cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0)


def ours(cfg: ModelConfig, dtype: str) -> Decode:
    """beam_search on our model with its weights as `translate --dtype` prepares them:
    bfloat16 casts the weights (no autocast re-casting per step), int8 quantizes every
    Linear layer (float32 activations)."""
    import torch

    from transformer_mt.decoding.beam import beam_search
    from transformer_mt.decoding.greedy import greedy_decode
    from transformer_mt.model.transformer import build_model
    from transformer_mt.runs.quantize import prepare_model

    torch.manual_seed(1)
    model = prepare_model(build_model(cfg), dtype)

    def decode(batch: list[list[int]], beam: int, length: int) -> int:
        width = max(len(s) for s in batch) + 1
        src = torch.full((len(batch), width), PAD, dtype=torch.long)
        for row, sentence in enumerate(batch):
            src[row, : len(sentence) + 1] = torch.tensor(sentence + [EOS])
        # max_len + 1 tokens at most, eos banned for all of them: exactly `length` tokens
        if beam == 1:  # what Translator runs for beam 1
            tokens, _ = greedy_decode(model, src, length - 1, BOS, EOS, PAD, min_len=length)
            return int(tokens.ne(PAD).sum())
        tokens, _ = beam_search(model, src, beam, length - 1, BOS, EOS, PAD, min_len=length)
        return int(tokens[:, 0].ne(PAD).sum())

    return decode


def hf_marian(cfg: ModelConfig):
    """A random Hugging Face MarianMTModel of the same sizes (None if not installed)."""
    import torch

    try:
        from transformers import MarianConfig, MarianMTModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    config = MarianConfig(
        vocab_size=VOCAB, d_model=cfg.d_model, encoder_layers=cfg.n_layers, decoder_layers=cfg.n_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, max_position_embeddings=512,
        activation_function="relu", dropout=0.0, scale_embedding=True,
        pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1, eos_token_id=0, forced_eos_token_id=None,
    )
    torch.manual_seed(1)
    return MarianMTModel(config).eval()


def hf(model) -> Decode:
    import torch

    def decode(batch: list[list[int]], beam: int, length: int) -> int:
        width = max(len(s) for s in batch) + 1
        ids = torch.full((len(batch), width), VOCAB - 1, dtype=torch.long)
        for row, sentence in enumerate(batch):
            ids[row, : len(sentence) + 1] = torch.tensor(sentence + [0])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=ids.ne(VOCAB - 1), num_beams=beam, do_sample=False,
                min_new_tokens=length, max_new_tokens=length, early_stopping=True,
            )
        return int(out[:, 1:].ne(VOCAB - 1).sum())  # generated tokens after decoder start

    return decode


class _Vocabulary:
    """What CTranslate2's Marian loader asks of a tokenizer: token strings for the ids."""

    eos_token, unk_token = "</s>", "<unk>"

    def get_vocab(self) -> dict[str, int]:
        names = {0: "</s>", 1: "<unk>", VOCAB - 1: "<pad>"}
        return {names.get(i, f"t{i}"): i for i in range(VOCAB)}


def ct2_models(model, directory: str) -> dict[str, str] | None:
    """Convert the Marian model with TransformersConverter, float32 and int8."""
    try:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return None

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocabulary()

    hf_dir = os.path.join(directory, "hf")
    model.save_pretrained(hf_dir)
    out = {}
    for quantization in ("float32", "int8"):
        path = os.path.join(directory, f"ct2-{quantization}")
        Converter(hf_dir).convert(path, quantization=quantization, force=True)
        out[quantization] = path
    del ctranslate2
    return out


class _Pieces:
    """The vocabulary of the random-weight model as `export ctranslate2` reads it: our four
    specials at their ids, then t4 ... t{V-1} (the names the Marian vocabulary uses too)."""

    def __len__(self) -> int:
        return VOCAB

    def id_to_piece(self, ids: list[int]) -> list[str]:
        names = {0: "<pad>", 1: "<unk>", 2: "<s>", 3: "</s>"}
        return [names.get(i, f"t{i}") for i in ids]


def export_models(cfg: ModelConfig, directory: str) -> dict[str, str] | None:
    """Our model (the weights `ours` decodes with) through `transformer-mt export ctranslate2`'s
    spec builder, float32 and int8: what a user deploys."""
    try:
        from transformer_mt.interop.ctranslate2 import build_spec
    except ImportError:
        return None
    import torch

    from transformer_mt.model.transformer import build_model

    torch.manual_seed(1)
    model = build_model(cfg).eval()
    out = {}
    for quantization in ("float32", "int8"):
        spec = build_spec(model, _Pieces())
        spec.validate()
        spec.optimize(quantization=quantization)
        out[quantization] = os.path.join(directory, f"export-{quantization}")
        os.makedirs(out[quantization], exist_ok=True)
        spec.save(out[quantization])
    return out


def ct2(path: str, compute_type: str, threads: int, append_eos: bool = True) -> Decode:
    """CTranslate2 on a converted model; `append_eos` False for our export, which adds
    the source eos itself (config add_source_eos)."""
    import ctranslate2

    translator = ctranslate2.Translator(path, device="cpu", compute_type=compute_type,
                                        intra_threads=threads, inter_threads=1)

    def decode(batch: list[list[int]], beam: int, length: int) -> int:
        tokens = [[f"t{i}" for i in sentence] + (["</s>"] if append_eos else []) for sentence in batch]
        results = translator.translate_batch(
            tokens, beam_size=beam, max_batch_size=len(batch), min_decoding_length=length,
            max_decoding_length=length, num_hypotheses=1,
        )
        return sum(len(r.hypotheses[0]) for r in results)

    return decode


def batches_of(work: Workload, batch_size: int) -> list[list[list[int]]]:
    """The workload's sentences, shortest first, in batches of `batch_size`."""
    ordered = sorted(work.sentences, key=len)
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def measure(decode: Decode, work: Workload, beam: int, batch_size: int) -> tuple[float, float, str]:
    """(target tokens/s, sentences/s, flag) over the workload, after one warm-up batch; the
    flag says how many tokens a system emitted when it is not the number asked for."""
    batches = batches_of(work, batch_size)
    decode(batches[0], beam, work.length)
    start = time.perf_counter()
    produced = sum(decode(batch, beam, work.length) for batch in batches)
    seconds = time.perf_counter() - start
    expected = len(work.sentences) * work.length
    flag = "" if produced == expected else f"emitted {produced} target tokens, not {expected}"
    return produced / seconds, len(work.sentences) / seconds, flag


def convert(preset: str, only: set[str], directory: str) -> dict[str, str]:
    """The CTranslate2 models of `only` for `preset`, written under `directory` before any
    measuring process starts: {system: model folder}."""
    wanted = only & set(CONVERTED)
    if not wanted:
        return {}
    cfg, found = model_config(preset), {}
    if wanted & {"export-float32", "export-int8"}:
        exported = export_models(cfg, os.path.join(directory, preset))
        if exported is None:
            print("export: skipped (pip install ctranslate2)", file=sys.stderr)
        found.update({f"export-{q}": path for q, path in (exported or {}).items()})
    if wanted & {"ct2-float32", "ct2-int8"}:
        marian = hf_marian(cfg)
        converted = ct2_models(marian, os.path.join(directory, preset)) if marian is not None else None
        if converted is None:
            print("ct2: skipped (pip install transformers ctranslate2)", file=sys.stderr)
        found.update({f"ct2-{q}": path for q, path in (converted or {}).items()})
    return {system: path for system, path in found.items() if system in wanted}


def build_system(system: str, preset: str, threads: int, models: dict[str, str]) -> Decode | None:
    """One system, in the process that measures it; None where it cannot run here."""
    if system in CONVERTED:
        if system not in models:
            return None
        quantization = system.split("-")[1]
        return ct2(models[system], quantization, threads, append_eos=not system.startswith("export"))
    import torch

    from transformer_mt.common.device import reuse_freed_memory

    torch.set_num_threads(threads)
    reuse_freed_memory()  # as `transformer-mt translate` does
    if system == "hf":
        marian = hf_marian(model_config(preset))
        if marian is None:
            print("hf: skipped (pip install transformers)", file=sys.stderr)
        return hf(marian) if marian is not None else None
    return ours(model_config(preset), {"ours-fp32": "float32", "ours-bf16": "bfloat16", "ours-int8": "int8"}[system])


def products_ms_per_token(decode: Decode, work: Workload, beam: int, batch_size: int) -> float:
    """--profile: milliseconds per target token that decoding the workload spends in matrix
    products (PROFILED systems only: the profiler is torch's)."""
    from _timing import seconds_in_products  # benchmarks/_timing.py

    batches = batches_of(work, batch_size)
    return 1e3 * seconds_in_products(lambda: [decode(batch, beam, work.length) for batch in batches]) / (
        len(work.sentences) * work.length)


def run_system(system: str, preset: str, threads: int, counts: dict[str, int], length: int,
               models: dict[str, str], profile: bool = False) -> list[dict]:
    """The rows of one system at one thread count: what a child process measures."""
    decode = build_system(system, preset, threads, models)
    rows = []
    for setting, (beam, batch_size) in SETTINGS.items() if decode else ():
        work = make_workload(counts[setting], length)
        tokens_per_s, sentences_per_s, flag = measure(decode, work, beam, batch_size)
        rows.append({"system": system, "preset": preset, "setting": setting, "threads": threads,
                     "tokens_per_s": round(tokens_per_s, 1), "sentences_per_s": round(sentences_per_s, 2),
                     "flag": flag, "torch_loaded": "torch" in sys.modules})
        if profile and system in PROFILED:
            rows[-1]["products_ms_per_token"] = round(products_ms_per_token(decode, work, beam, batch_size), 4)
        print(f"  {preset:5} {setting:14} {system:14} {threads} threads {tokens_per_s:8.0f} tok/s {flag}",
              file=sys.stderr)
    return rows


def run_isolated(system: str, preset: str, threads: int, counts: dict[str, int], length: int,
                 models: dict[str, str], profile: bool = False) -> list[dict]:
    """One system at one thread count in a fresh process: thread pools of different engines
    (PyTorch's OpenMP, CTranslate2's) in one process would slow each other down."""
    command = [sys.executable, __file__, "--child", json.dumps({
        "system": system, "preset": preset, "threads": threads, "counts": counts, "length": length, "models": models,
        "profile": profile})]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        print(f"{system}, {threads} threads: failed (exit code {result.returncode})", file=sys.stderr)
        return []
    return json.loads(result.stdout.strip().splitlines()[-1])


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the host's cores, and the cores themselves."""
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return sorted(set(counts) | {max(cores, 1)})


def mark_best(rows: list[dict]) -> list[dict]:
    """Each row with "best": whether it is its system's fastest thread count for its preset
    and setting (flagged rows are never best: they did other work)."""
    best: dict[tuple, dict] = {}
    for row in rows:
        key = (row["preset"], row["setting"], row["system"])
        if not row["flag"] and (key not in best or row["tokens_per_s"] > best[key]["tokens_per_s"]):
            best[key] = row
    return [{**row, "best": best.get((row["preset"], row["setting"], row["system"])) is row} for row in rows]


def ct2_float32_best(rows: list[dict]) -> dict[tuple, dict]:
    """(preset, setting) -> CTranslate2 float32's fastest best row there (either conversion):
    what our rows are set beside."""
    fastest: dict[tuple, dict] = {}
    for row in rows:
        key = (row["preset"], row["setting"])
        if row["best"] and row["system"] in ("ct2-float32", "export-float32") and (
                key not in fastest or row["tokens_per_s"] > fastest[key]["tokens_per_s"]):
            fastest[key] = row
    return fastest


def product_lines(rows: list[dict]) -> list[str]:
    """--profile: for each of our best rows, ms per target token and its matrix products' share,
    beside CTranslate2 float32's whole token at its best (either conversion)."""
    reference = ct2_float32_best(rows)
    lines = []
    for row in rows:
        if not (row["best"] and "products_ms_per_token" in row):
            continue
        line = (f"{row['preset']} {row['setting']} {row['system']} ({row['threads']} threads): "
                f"{1e3 / row['tokens_per_s']:.3f} ms a target token, matrix products {row['products_ms_per_token']:.3f}")
        ct2 = reference.get((row["preset"], row["setting"]))
        if ct2:
            line += f"; CTranslate2 float32's whole token {1e3 / ct2['tokens_per_s']:.3f} ({ct2['threads']} threads)"
        lines.append(line)
    return lines


def print_table(rows: list[dict]) -> None:
    """Each system at its best thread count, with its speed over CTranslate2 float32's best
    (either conversion) where that ran; then the rows that emitted other work."""
    reference = ct2_float32_best(rows)
    print(f"{'preset':6} {'setting':14} {'system':14} {'threads':>7} {'target tok/s':>12} {'sent/s':>8} "
          f"{'x CT2 fp32':>10}")
    for row in rows:
        if row["best"] or row["flag"]:
            ct2 = reference.get((row["preset"], row["setting"]))
            ratio = f"{row['tokens_per_s'] / ct2['tokens_per_s']:10.2f}" if ct2 else f"{'':10}"
            print(f"{row['preset']:6} {row['setting']:14} {row['system']:14} {row['threads']:7} "
                  f"{row['tokens_per_s']:12.0f} {row['sentences_per_s']:8.1f} {ratio} {row['flag']}")


def default_systems(device: torch.device) -> list[str]:
    """Every system, less ours-bf16 where `device` has no native bf16: there its products are
    emulated, hundreds of times slower than fp32, and the row would take most of the run."""
    from transformer_mt.common.device import has_fast_bf16

    if has_fast_bf16(device):
        return list(SYSTEMS)
    print("ours-bf16 left out: this CPU has no native bf16 (--systems ours-bf16 runs it)", file=sys.stderr)
    return [system for system in SYSTEMS if system != "ours-bf16"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small preset, fewer sentences (< 6 minutes)")
    parser.add_argument("--json", action="store_true", help="last stdout line: the rows as JSON")
    parser.add_argument("--presets", nargs="+", default=None, help="default: small base (--quick: small)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="sentences per setting (default 500; --quick: 256 beam, 48 greedy)")
    parser.add_argument("--length", type=int, default=20, help="target tokens per sentence (default 20)")
    parser.add_argument("--systems", nargs="+", default=None, choices=SYSTEMS,
                        help="which systems to run (default: all; ours-bf16 only where the CPU has native bf16)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts to try for every system (default: 1, 2, 4, ... up to the cores)")
    parser.add_argument("--profile", action="store_true",
                        help="also the ms per target token our fp32 and bf16 rows spend in matrix products")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one system's measurement, as JSON
    args = parser.parse_args()
    if args.child:
        job = json.loads(args.child)
        print(json.dumps(run_system(job["system"], job["preset"], job["threads"], job["counts"], job["length"],
                                    job["models"], job["profile"])))
        return 0
    presets = args.presets or (["small"] if args.quick else ["small", "base"])
    if args.sentences:
        counts = dict.fromkeys(SETTINGS, args.sentences)
    else:
        counts = {"beam4-batch32": 256, "greedy-batch1": 48} if args.quick else dict.fromkeys(SETTINGS, 500)
    threads = args.threads or thread_counts(os.cpu_count() or 1)
    import torch

    systems = args.systems or default_systems(torch.device("cpu"))

    from _timing import matmul_peaks  # benchmarks/_timing.py; before any measuring process starts

    peaks = {name: round(value, 1) for name, value in matmul_peaks(torch.device("cpu")).items()}
    print(f"host: matmul peak fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; torch "
          f"{torch.__version__}; threads {threads}, {args.length} target tokens per sentence, {counts['beam4-batch32']} sentences "
          f"beam 4, {counts['greedy-batch1']} greedy; each system and thread count in its own process",
          file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in presets:
            models = convert(preset, set(systems), tmp)
            rows += [row for system in systems for n in threads
                     for row in run_isolated(system, preset, n, counts, args.length, models, args.profile)]
    rows.sort(key=lambda r: (presets.index(r["preset"]), list(SETTINGS).index(r["setting"]),
                             SYSTEMS.index(r["system"]), r["threads"]))
    rows = mark_best(rows)
    print_table(rows)
    for line in product_lines(rows):
        print(line)
    if args.json:
        print(json.dumps({"peak_gflops": peaks, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
