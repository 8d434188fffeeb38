"""sort_ints (gpart.runtime.sampling.int_sort) gives exactly torch.sort(stable=True): values and indices, for every
size around its padding thresholds, int32 and int64, values that narrow to int32 and values that do not, negatives,
and ties with the padding value."""

import pytest
import torch

from gpart.runtime.sampling import int_sort
from gpart.runtime.sampling.int_sort import PAD_FROM, RADIX_FROM, sort_ints

SIZES = [0, 1, 100, PAD_FROM[torch.int32] - 1, PAD_FROM[torch.int32], PAD_FROM[torch.int64], 20000, RADIX_FROM - 1,
         RADIX_FROM, 40000]


def _keys(n: int, dtype: torch.dtype, low: int, high: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randint(low, high, (n,), generator=gen, dtype=torch.int64)
    if n > 10:  # repeated values, so stability shows in the indices
        keys[: n // 4] = keys[n // 2: n // 2 + n // 4]
    return keys.to(dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype,low,high", [
    (torch.int64, 0, 1 << 20),            # narrows to int32
    (torch.int64, -(1 << 40), 1 << 40),   # does not
    (torch.int32, -(1 << 30), 1 << 30),
])
def test_sort_ints_is_torch_stable_sort(n, dtype, low, high):
    keys = _keys(n, dtype, low, high, n)
    want = torch.sort(keys, stable=True)
    values, order = sort_ints(keys)
    assert values.dtype == keys.dtype and order.dtype == torch.int64
    assert torch.equal(values, want.values) and torch.equal(order, want.indices)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_values_equal_to_the_padding_keep_their_order_before_the_pads(dtype):
    """The pad is the dtype's largest value (or int32's, once narrowed): real keys equal to it still come first,
    in input order, and no pad index leaks out."""
    for top in {torch.iinfo(dtype).max, torch.iinfo(torch.int32).max}:
        keys = _keys(20000, dtype, 0, 1000, 3)
        keys[::7] = top
        values, order = sort_ints(keys)
        want = torch.sort(keys, stable=True)
        assert torch.equal(values, want.values) and torch.equal(order, want.indices)
        assert int(order.max()) < keys.numel()


def test_without_the_radix_it_is_torch_sort(monkeypatch):
    """A build whose CPU sort has no radix path: nothing padded or narrowed (the same result)."""
    monkeypatch.setattr(int_sort, "radix_available", lambda: False)
    calls = []
    real = torch.sort
    monkeypatch.setattr(torch, "sort", lambda x, **kw: calls.append(x.numel()) or real(x, **kw))
    keys = _keys(20000, torch.int64, 0, 1 << 20, 5)
    values, order = sort_ints(keys)
    assert calls == [20000]
    want = real(keys, stable=True)
    assert torch.equal(values, want.values) and torch.equal(order, want.indices)


def test_a_mid_size_sort_goes_through_the_padded_radix(monkeypatch):
    """Where the radix is available, a 20k-key sort reaches torch.sort as 32,768 int32 keys and a 40k one as 40k
    int32 keys (what makes them fast)."""
    if not int_sort.radix_available():
        pytest.skip("this torch build has no CPU radix sort")
    seen = []
    real = torch.sort
    monkeypatch.setattr(torch, "sort", lambda x, **kw: seen.append((x.numel(), x.dtype)) or real(x, **kw))
    sort_ints(_keys(20000, torch.int64, 0, 1 << 20, 6))
    sort_ints(_keys(40000, torch.int64, 0, 1 << 20, 6))  # past the threshold: narrowed, not padded
    assert seen == [(RADIX_FROM, torch.int32), (40000, torch.int32)]


@pytest.mark.parametrize("vector", [True, False], ids=["numpy", "torch"])
@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (300, 20), (7, 129)])
def test_sort_rows_sorts_each_row(shape, vector, monkeypatch):
    """sort_rows gives each row ascending, through numpy's vectorised sort or torch's, with negative values and
    values past int32 (the weighted draws pack keys and offsets into int64)."""
    monkeypatch.setattr(int_sort, "vector_sort_available", lambda: vector)
    values = torch.randint(-(1 << 62), 1 << 62, shape, generator=torch.Generator().manual_seed(shape[1]))
    assert torch.equal(int_sort.sort_rows(values.clone()), torch.sort(values, dim=1).values)
