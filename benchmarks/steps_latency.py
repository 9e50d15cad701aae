"""How long the learner's page waits: POST /api/steps (and /api/translate with attention,
for comparison) for a 20-word sentence, through the FastAPI app in this process.

Without --run: the `small` preset with random weights and a vocabulary trained on 20,000
Multi30k sentences. An untrained model never emits </s>, so every search runs to its
length limit (source + 50 subwords): the slowest case a trained model can meet. With
--run: that trained run (its config, weights and vocabulary).

    python benchmarks/steps_latency.py [--run runs/multi30k_en_de] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from fastapi.testclient import TestClient

from transformer_mt.common.config import load_config, replace
from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer
from transformer_mt.model.transformer import build_model
from transformer_mt.server import TranslateLimits, TranslationService, create_app
from transformer_mt.inference.translator import Translator

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
SENTENCE = "A man in a blue shirt is standing next to a red car while two children play with a dog"  # 20 words


def random_small(folder: Path) -> Translator:
    with gzip.open(MULTI30K / "train.en.gz", "rt", encoding="utf-8") as handle:
        lines = [next(handle).strip() for _ in range(20000)]
    tokenizer = SentencePieceTokenizer.train(lines, folder / "sp.model", vocab_size=8000)
    cfg = load_config("small")
    cfg = replace(cfg, model=replace(cfg.model, src_vocab_size=len(tokenizer), tgt_vocab_size=len(tokenizer)))
    torch.manual_seed(0)
    return Translator(build_model(cfg.model).eval(), tokenizer, cfg.decode, torch.device("cpu"))


def timed(client: TestClient, path: str, body: dict, repeats: int) -> tuple[float, dict]:
    times, answer = [], {}
    for _ in range(repeats):
        start = time.perf_counter()
        answer = client.post(path, json=body).json()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times), answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a trained run (default: the small preset, random weights)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="last line: a JSON summary")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        translator = Translator.from_run(args.run, device="cpu") if args.run else random_small(Path(tmp))
    client = TestClient(create_app(TranslationService(translator, "bench", TranslateLimits())))
    rows = []
    print(f"{'request':34} {'beam':>4} {'steps':>5} {'median ms':>10}")
    for beam in (1, 4):
        steps_ms, steps = timed(client, "/api/steps", {"text": SENTENCE, "beam": beam, "top_k": 5}, args.repeats)
        body = {"text": SENTENCE, "beam": beam, "attention": True}
        translate_ms, _ = timed(client, "/api/translate", body, args.repeats)
        for name, ms in (("/api/steps (top_k 5)", steps_ms), ("/api/translate (attention)", translate_ms)):
            print(f"{name:34} {beam:>4} {len(steps['steps']):>5} {ms:>10.0f}")
            rows.append({"request": name, "beam": beam, "steps": len(steps["steps"]), "median_ms": round(ms, 1)})
    print(f"source: {len(SENTENCE.split())} words, {len(translator.tokenizer.pieces(SENTENCE))} subwords; "
          f"torch threads {torch.get_num_threads()}")
    if args.json:
        print(json.dumps({"run": args.run or "small preset, random weights", "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
