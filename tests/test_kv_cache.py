"""course_lib.kv_cache: chapter 8's KV cache (its own module since issue 45's split of attention.py;
the cache's use inside attention and generation is tested in test_attention.py and
test_generate.py)."""
import pytest
import torch

import course_lib.attention as attention
from course_lib.kv_cache import KVCache, LayerKVCache


def test_attention_names_the_same_classes():
    assert attention.KVCache is KVCache and attention.LayerKVCache is LayerKVCache


def test_a_cache_returns_every_position_seen_and_refuses_more_than_its_capacity():
    cache = LayerKVCache(5)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    keys, values = cache.append(k, v)
    assert keys.shape == (1, 2, 3, 4) and torch.equal(keys, k) and torch.equal(values, v)
    keys, _ = cache.append(k[:, :, :2], v[:, :, :2])
    assert cache.length == 5 and torch.equal(keys[:, :, 3:], k[:, :, :2])
    with pytest.raises(ValueError, match=r"KV cache is full \(5 \+ 1 > capacity 5\)"):
        cache.append(k[:, :, :1], v[:, :, :1])


def test_a_window_cache_keeps_only_the_newest_positions():
    cache = LayerKVCache(100)
    k = torch.arange(10.0).view(1, 1, 10, 1)
    keys, _ = cache.append(k, k, keep=3)
    assert keys.shape[2] == 10  # the new queries read every new key
    assert cache.length == 10 and cache.k.flatten().tolist() == [7.0, 8.0, 9.0]
    held = cache.nbytes
    cache.append(k[:, :, :1], k[:, :, :1], keep=3)
    assert cache.length == 11 and cache.nbytes == held  # the memory stops growing at the window


def test_a_model_cache_holds_one_layer_cache_per_layer():
    cache = KVCache(3, 8)
    assert len(cache.layers) == 3 and cache.length == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match="KVCache n_layer must be an integer >= 1"):
        KVCache(0, 8)
