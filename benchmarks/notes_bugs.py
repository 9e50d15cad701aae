"""What two choices of the study notes' script cost, measured (issue 27): unknown words
mapped to the padding id, and every sentence padded to 500 tokens.

1. Unknown words. The notes build whitespace-word vocabularies from the first N training
   pairs and look every other word up with a default of 0, the padding id: such a word
   vanishes from the loss (ignore_index=pad) and is masked out of attention. Here: which
   share of the test set's words (source and target) a vocabulary of the first N pairs
   cannot represent, and how many test sentences lose at least one word. Multi30k de->en
   stands in for the notes' WMT16 de->en (the notes' data is not on this machine).
2. Padding to 500. Batches of 32 sentences padded to 500 tokens, against the same
   batches padded to their longest sentence (+ eos/bos): the share of padding and the
   time of one training step (forward, backward, Adam) of the notes' model (N=2,
   d_model=128, d_ff=256, h=4), both timed side by side in this process.

    python benchmarks/notes_bugs.py                  # ../shared/data/multi30k, 5,000 and 10,000 pairs
    python benchmarks/notes_bugs.py --json           # last line: a JSON summary
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from transformer_mt.common.config import ModelConfig
from transformer_mt.model.masks import padding_mask
from transformer_mt.model.transformer import build_model

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
NOTES_LENGTH, NOTES_BATCH = 500, 32


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def unknown_share(train: list[str], test: list[str]) -> tuple[float, float, int]:
    """(share of test words outside the training words, share of test sentences with at
    least one, vocabulary size): what a whitespace vocabulary of `train` cannot represent."""
    vocab = Counter(word for line in train for word in line.split())
    words = [line.split() for line in test]
    unknown = sum(1 for line in words for word in line if word not in vocab)
    total = sum(len(line) for line in words)
    touched = sum(1 for line in words if any(word not in vocab for word in line))
    return unknown / total, touched / len(words), len(vocab)


def step_seconds(model: torch.nn.Module, optimizer: torch.optim.Optimizer, width: int, vocab: int,
                 repeats: int) -> float:
    """Median seconds of one training step on a (32, width) batch of random ids."""
    src = torch.randint(4, vocab, (NOTES_BATCH, width))
    tgt = torch.randint(4, vocab, (NOTES_BATCH, width))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        states = model(src, tgt, padding_mask(src, 0))
        loss = model.generator.logits(states).float().logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def padding_cost(src: list[str], tgt: list[str], repeats: int) -> dict[str, float]:
    """Padding share and step time of 32-sentence batches padded to 500 vs to their longest."""
    lengths = [max(len(s.split()), len(t.split())) + 1 for s, t in zip(src, tgt)]  # words + eos/bos
    batches = [lengths[i:i + NOTES_BATCH] for i in range(0, len(lengths) - NOTES_BATCH + 1, NOTES_BATCH)]
    real = sum(sum(batch) for batch in batches)
    longest = max(max(batch) for batch in batches)
    typical = round(statistics.median(max(batch) for batch in batches))
    model = build_model(ModelConfig(n_layers=2, d_model=128, d_ff=256, n_heads=4, dropout=0.1, norm_first=False,
                                    tie_embeddings=False, share_vocab=False, max_positions=NOTES_LENGTH + 1,
                                    src_vocab_size=8000, tgt_vocab_size=8000))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    step_seconds(model, optimizer, typical, 8000, 2)  # allocate once
    fixed = step_seconds(model, optimizer, NOTES_LENGTH, 8000, repeats)
    bucketed = step_seconds(model, optimizer, typical, 8000, repeats)
    return {"padding_share_at_500": 1 - real / (len(batches) * NOTES_BATCH * NOTES_LENGTH),
            "padding_share_at_longest": 1 - real / sum(len(batch) * max(batch) for batch in batches),
            "longest_sentence": longest, "median_batch_width": typical,
            "step_seconds_at_500": fixed, "step_seconds_at_median_width": bucketed,
            "slowdown": fixed / bucketed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a Multi30k folder (train/test_2016_flickr .de/.en .gz)")
    parser.add_argument("--pairs", default="5000,10000", help="training pairs the vocabularies are built from")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per width (median)")
    parser.add_argument("--json", action="store_true", help="last line: a JSON summary")
    args = parser.parse_args()
    torch.manual_seed(0)
    train_de, train_en = read(args.data / "train.de.gz"), read(args.data / "train.en.gz")
    test_de, test_en = read(args.data / "test_2016_flickr.de.gz"), read(args.data / "test_2016_flickr.en.gz")
    rows = []
    print(f"{'pairs':>6} {'side':>6} {'vocab':>6} {'unknown words':>14} {'sentences hit':>14}")
    for pairs in (int(n) for n in args.pairs.split(",")):
        for side, train, test in (("source", train_de, test_de), ("target", train_en, test_en)):
            words, sentences, size = unknown_share(train[:pairs], test)
            rows.append({"pairs": pairs, "side": side, "vocab": size, "unknown_words": words,
                         "sentences_hit": sentences})
            print(f"{pairs:>6} {side:>6} {size:>6} {100 * words:>13.1f}% {100 * sentences:>13.1f}%")
    cost = padding_cost(train_de[:5000], train_en[:5000], args.repeats)
    print(f"\npadded to {NOTES_LENGTH}: {100 * cost['padding_share_at_500']:.1f}% of every batch is padding "
          f"(padded to each batch's longest: {100 * cost['padding_share_at_longest']:.1f}%; the longest "
          f"sentence has {cost['longest_sentence']} words)")
    print(f"one step at width {NOTES_LENGTH}: {cost['step_seconds_at_500']:.3f} s; at the median batch width "
          f"{cost['median_batch_width']}: {cost['step_seconds_at_median_width']:.3f} s ({cost['slowdown']:.1f}x slower)")
    if args.json:
        print(json.dumps({"unknown": rows, "padding": cost}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
