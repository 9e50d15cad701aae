"""DecoderCache: the one owner of the decoder's incremental state. Reordering moves only
self-attention, selecting moves everything, and a cache without cross-attention works."""

from __future__ import annotations

import torch

from transformer_mt.model.cache import DecoderCache, KeyValueCache


def filled(n_layers: int, rows: int, cross: bool = True) -> DecoderCache:
    """A cache whose tensors (rows, H=1, T, d_k=1) hold row r's number r (self-attention
    keys), 10 + r (values), 100 + r and 200 + r (cross-attention), at 2 positions."""
    cache = DecoderCache(n_layers, cross_attention=cross)
    ids = torch.arange(rows, dtype=torch.float).view(rows, 1, 1, 1)
    for layer in cache.layers:
        for _ in range(2):
            layer.self_attn.extend(ids.clone(), ids + 10)
        if cross:
            layer.cross_attn.store((ids + 100).expand(rows, 1, 3, 1), (ids + 200).expand(rows, 1, 3, 1))
    return cache


def test_extend_appends_positions_and_store_keeps_once() -> None:
    part = KeyValueCache()
    assert not part.filled and part.length == 0
    first, second = torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8)
    keys, values = part.extend(first, first + 1)
    assert keys is first and part.length == 1
    keys, values = part.extend(second, second + 1)
    torch.testing.assert_close(keys, torch.cat([first, second], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([first, second], dim=2) + 1, rtol=0, atol=0)
    assert part.filled and part.length == 2


def test_length_counts_self_attention_positions() -> None:
    assert DecoderCache(3).length() == 0
    assert DecoderCache(0).length() == 0
    assert filled(3, rows=2).length() == 2  # cross-attention's 3 source positions do not count


def test_reorder_moves_self_attention_only() -> None:
    cache = filled(2, rows=4)
    cache.reorder(torch.tensor([1, 1, 3, 0]))
    for layer in cache.layers:
        assert layer.self_attn.keys[:, 0, :, 0].tolist() == [[1, 1], [1, 1], [3, 3], [0, 0]]
        assert layer.self_attn.values[:, 0, 0, 0].tolist() == [11, 11, 13, 10]
        assert layer.cross_attn.keys[:, 0, 0, 0].tolist() == [100, 101, 102, 103]
        assert layer.cross_attn.values[:, 0, 0, 0].tolist() == [200, 201, 202, 203]


def test_select_expands_and_drops_rows_of_every_tensor() -> None:
    cache = filled(2, rows=2)
    cache.select(torch.tensor([0, 0, 0, 1, 1, 1]))  # expand 2 sentences to 3 hypotheses each
    cache.select(torch.tensor([3, 4, 5]))  # sentence 0 done: drop its rows
    for layer in cache.layers:
        assert layer.self_attn.keys[:, 0, :, 0].tolist() == [[1, 1]] * 3
        assert layer.self_attn.values[:, 0, 0, 0].tolist() == [11] * 3
        assert layer.cross_attn.keys[:, 0, :, 0].tolist() == [[101] * 3] * 3
        assert layer.cross_attn.values[:, 0, 0, 0].tolist() == [201] * 3
    assert cache.length() == 2


def test_a_cache_without_cross_attention() -> None:
    """A decoder-only model's cache: no cross-attention entries, the rest works the same."""
    cache = filled(2, rows=3, cross=False)
    assert all(layer.cross_attn is None for layer in cache.layers)
    cache.select(torch.tensor([2, 0]))
    cache.reorder(torch.tensor([1, 1]))
    assert cache[1].self_attn.keys[:, 0, 0, 0].tolist() == [0, 0]
    assert cache.length() == 2
