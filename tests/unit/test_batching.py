"""Length-bucketed batches: complete, bounded, low padding, deterministic, resumable."""

from __future__ import annotations

import random

import pytest

from transformer_mt.data.batching import BatchStream, batch_indices, collate, padding_fraction
from transformer_mt.common.specials import BOS_ID, EOS_ID, PAD_ID


def lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    src = [rng.randint(1, 60) for _ in range(n)]
    return src, [max(1, s + rng.randint(-5, 5)) for s in src]


def test_every_example_once_and_no_batch_over_max_tokens() -> None:
    src, tgt = lengths(5000)
    batches = batch_indices(src, tgt, max_tokens=1000, seed=1, epoch=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(5000))
    for batch in batches:
        assert max(max(src[i], tgt[i]) + 1 for i in batch) * len(batch) <= 1000
    assert padding_fraction(batches, src, tgt) < 0.10


def test_order_depends_on_seed_and_epoch_only() -> None:
    src, tgt = lengths(500)
    first = batch_indices(src, tgt, 300, seed=1, epoch=0)
    assert first == batch_indices(src, tgt, 300, seed=1, epoch=0)
    assert first != batch_indices(src, tgt, 300, seed=1, epoch=1)
    assert first != batch_indices(src, tgt, 300, seed=2, epoch=0)


def test_collate_adds_bos_and_eos() -> None:
    batch = collate([[5, 6], [7]], [[8], [9, 10]])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID], [BOS_ID, 9, 10]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID], [9, 10, EOS_ID]]
    assert batch.n_tokens == 5


def test_stream_resumes_at_the_same_batch() -> None:
    src = [[1] * n for n in lengths(300)[0]]
    stream = BatchStream(src, src, max_tokens=200, seed=3)
    for _ in range(len(stream) + 5):  # into the second epoch
        next(stream)
    state = stream.state_dict()
    expected = [next(stream).src.tolist() for _ in range(3)]
    resumed = BatchStream(src, src, max_tokens=200, seed=3)
    resumed.load_state_dict(state)
    assert [next(resumed).src.tolist() for _ in range(3)] == expected


def test_ranks_share_an_epoch_without_overlap() -> None:
    src = [[1] * n for n in lengths(400)[0]]
    ranks = [BatchStream(src, src, max_tokens=300, seed=1, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    seen = [set(i for _ in range(len(s)) for i in s.next_indices()) for s in ranks]
    assert not seen[0] & seen[1]


def test_multi30k_padding_under_ten_percent(multi30k, tmp_path) -> None:
    from transformer_mt.data.corpus import read_parallel
    from transformer_mt.data.tokenizers.sentencepiece import SentencePieceTokenizer

    corpus = read_parallel(multi30k / "train.en.gz", multi30k / "train.de.gz")
    tokenizer = SentencePieceTokenizer.train(corpus.src + corpus.tgt, tmp_path / "sp.model", vocab_size=8000)
    src = [len(s) for s in tokenizer.encode(corpus.src)]
    tgt = [len(t) for t in tokenizer.encode(corpus.tgt)]
    fraction = padding_fraction(batch_indices(src, tgt, 4096, seed=1), src, tgt)
    assert fraction < 0.10, f"padding {fraction:.3f}"


@pytest.mark.parametrize("max_tokens", [1, 7])
def test_an_example_longer_than_max_tokens_gets_its_own_batch(max_tokens: int) -> None:
    batches = batch_indices([10, 2], [12, 2], max_tokens=max_tokens)
    assert sorted(map(sorted, batches)) == [[0], [1]]
