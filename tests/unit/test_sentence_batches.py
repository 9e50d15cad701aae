"""data.batch_sentences: batches of exactly S sentences in a random order (the study notes'
DataLoader(batch_size=32, shuffle=True)), resumable, deterministic and split across ranks
like token batches; the last n % S sentences of an epoch are dropped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import tiny_config
from transformer_mt.common.config import ConfigError
from transformer_mt.data.batching import BatchStream
from transformer_mt.training import fit

S = 8


def corpus(n: int, seed: int = 0) -> list[list[int]]:
    """n sentences of 1 to 30 ids; sentence i starts with id i + 10, so a batch shows which it holds."""
    rng = random.Random(seed)
    return [[i + 10] + [5] * rng.randint(0, 29) for i in range(n)]


def epoch(stream: BatchStream) -> list[list[int]]:
    return [stream.next_indices() for _ in range(len(stream))]


def test_every_batch_holds_s_sentences_and_the_remainder_is_dropped() -> None:
    src = corpus(101)  # 12 batches of 8, 5 sentences left out each epoch
    stream = BatchStream(src, src, max_tokens=10**6, seed=1, batch_sentences=S)
    assert len(stream) == 101 // S
    for _ in range(3):
        batches = epoch(stream)
        assert all(len(batch) == S for batch in batches)
        seen = [i for batch in batches for i in batch]
        assert len(set(seen)) == len(seen) == 101 - 101 % S  # no sentence twice in an epoch
    batch = BatchStream(src, src, max_tokens=1, seed=1, batch_sentences=S).__next__()
    assert batch.src.size(0) == S and batch.tgt_in.size(0) == S  # max_tokens plays no part


def test_sentences_are_mixed_not_sorted_by_length_and_epochs_differ() -> None:
    src = corpus(400)
    stream = BatchStream(src, src, max_tokens=10**6, seed=1, batch_sentences=S)
    first, second = epoch(stream), epoch(stream)
    assert first != second
    assert set(map(tuple, first)) != set(map(tuple, second))  # new groups, not only a new batch order
    lengths = [[len(src[i]) for i in batch] for batch in first]
    assert sum(max(b) - min(b) for b in lengths) / len(lengths) > 10  # a token batch's spread would be ~0


def test_same_seed_same_batches_other_seed_other_batches() -> None:
    src = corpus(200)
    one, two = (BatchStream(src, src, max_tokens=10**6, seed=4, batch_sentences=S) for _ in range(2))
    assert [next(one).src.tolist() for _ in range(40)] == [next(two).src.tolist() for _ in range(40)]
    other = BatchStream(src, src, max_tokens=10**6, seed=5, batch_sentences=S)
    fresh = BatchStream(src, src, max_tokens=10**6, seed=4, batch_sentences=S)
    assert epoch(other) != epoch(fresh)


def test_stream_resumes_at_the_same_batch() -> None:
    src = corpus(150)
    stream = BatchStream(src, src, max_tokens=10**6, seed=3, batch_sentences=S)
    for _ in range(len(stream) + 5):  # into the second epoch
        next(stream)
    state = stream.state_dict()
    expected = [next(stream).src.tolist() for _ in range(len(stream))]  # past the next epoch boundary
    resumed = BatchStream(src, src, max_tokens=10**6, seed=3, batch_sentences=S)
    resumed.load_state_dict(state)
    assert [next(resumed).src.tolist() for _ in range(len(stream))] == expected


def test_ranks_take_disjoint_batches_of_s_sentences() -> None:
    src = corpus(330)
    ranks = [BatchStream(src, src, max_tokens=10**6, seed=1, rank=r, world_size=2, accumulate=2,
                         batch_sentences=S) for r in range(2)]
    single = BatchStream(src, src, max_tokens=10**6, seed=1, accumulate=4, batch_sentences=S)
    assert len(ranks[0]) == len(ranks[1]) == len(single) // 2
    per_rank = [epoch(stream) for stream in ranks]
    assert all(len(batch) == S for batches in per_rank for batch in batches)
    assert not {i for b in per_rank[0] for i in b} & {i for b in per_rank[1] for i in b}
    # two processes with accumulate 2 see the batches of one with accumulate 4, step by step
    together = [b for step in range(len(per_rank[0]) // 2)
                for b in per_rank[0][2 * step: 2 * step + 2] + per_rank[1][2 * step: 2 * step + 2]]
    assert together == epoch(single)


def test_a_corpus_smaller_than_s_is_one_batch() -> None:
    src = corpus(5)
    stream = BatchStream(src, src, max_tokens=10**6, seed=1, batch_sentences=S)
    assert len(stream) == 1 and sorted(stream.next_indices()) == [0, 1, 2, 3, 4]


def test_training_takes_sentence_batches(tmp_path: Path) -> None:
    trainer = fit(
        tiny_config(data__batch_sentences=S, data__task_size=200, train__max_steps=3, train__valid_every=3,
                    train__warmup_steps=2), tmp_path / "run", progress=False)
    assert trainer.batches.batch_sentences == S
    assert all(next(trainer.batches).src.size(0) == S for _ in range(len(trainer.batches) + 1))


def test_a_negative_count_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^--data.batch_sentences=-1: must be >= 0 \(0 = batches of data.max_tokens\)"):
        tiny_config(data__batch_sentences=-1)
