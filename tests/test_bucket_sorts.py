"""The sorts behind the on-disk bucketing: a coarse bucket's pairs summed (packed or not), spill.bucket_rows keeps each bucket's rows in input order with few
buckets (16-bit bucket ids, a radix sort) and with many, and a block's CSC order (csc_order._position_order) is
the stable order of its positions, with or without the packed sort."""

import numpy as np
import pytest

from gpart.engines.coarse_file import _pairs_summed
from gpart.engines.spill import bucket_rows
from gpart.formats.files.scratch import ScratchDir
from gpart.pipeline.csc_order import _position_order


@pytest.mark.parametrize("num_buckets", [3, 70_000])  # 16-bit bucket ids, and past them
@pytest.mark.parametrize("known_counts", [False, True])
@pytest.mark.parametrize("resident", [False, True])  # on disk, and in memory (within resident_bytes)
def test_buckets_hold_their_rows_in_input_order(tmp_path, num_buckets, known_counts, resident):
    rng = np.random.default_rng(1)
    bucket = rng.integers(0, num_buckets, 50_000)
    values = rng.integers(0, 2**40, 50_000)
    counts = np.bincount(bucket, minlength=num_buckets) if known_counts else None
    with ScratchDir(tmp_path) as scratch:
        grouped = bucket_rows(scratch, 50_000, num_buckets, lambda a, b: (bucket[a:b], {"v": values[a:b]}),
                              {"v": np.dtype(np.int64)}, chunk=7_000, counts=counts,
                              resident_bytes=50_000 * 8 if resident else 50_000 * 8 - 1)
        assert (grouped.resident is not None) == resident
        assert (not any(scratch.path.iterdir())) == resident  # in memory: no scratch file
        for b in rng.choice(num_buckets, 20):
            assert np.array_equal(grouped.rows(int(b), "v"), values[bucket == b])
        first = int(rng.integers(0, num_buckets - 2))  # a span of buckets: theirs in bucket order
        assert np.array_equal(grouped.span(first, first + 3, "v"),
                              np.concatenate([values[bucket == b] for b in range(first, first + 3)]))
        replaced = values[bucket == first][::-1].copy()
        grouped.rewrite(first, "v", replaced)
        assert np.array_equal(grouped.rows(first, "v"), replaced)
        if resident:  # a view of the buckets: a caller cannot change them by accident
            with pytest.raises(ValueError):
                grouped.rows(first, "v")[:1] = 0


def test_a_bucket_read_once_gives_its_disk_back(tmp_path):
    """Buckets.release frees a read bucket's blocks (the scratch shrinks as a pass goes) and leaves the others'."""
    import os

    rng = np.random.default_rng(4)
    bucket = np.repeat(np.arange(4), 1 << 18)  # 2 MiB of int64 rows per bucket
    values = rng.integers(0, 2**40, bucket.shape[0])
    with ScratchDir(tmp_path) as scratch:
        grouped = bucket_rows(scratch, bucket.shape[0], 4, lambda a, b: (bucket[a:b], {"v": values[a:b]}),
                              {"v": np.dtype(np.int64)})
        fd = grouped.columns["v"][0]
        held = os.fstat(fd).st_blocks * 512
        for b in (0, 2):
            assert np.array_equal(grouped.rows(b, "v"), values[bucket == b])
            grouped.release(b)
        assert os.fstat(fd).st_blocks * 512 <= held - 4 * (1 << 20) + (1 << 16)
        for b in (1, 3):
            assert np.array_equal(grouped.rows(b, "v"), values[bucket == b])


@pytest.mark.parametrize("first, top", [(1_000, 5_000), (0, 2**62)])  # packed, and past 63 bits: an argsort
def test_a_blocks_order_is_the_stable_order_of_its_positions(first, top):
    position = np.random.default_rng(2).integers(first, top, 40_000)
    position[::7] = first  # repeats keep their edge-id (input) order
    assert np.array_equal(_position_order(position.copy(), first), np.argsort(position, kind="stable"))


@pytest.mark.parametrize("count", [5_000, 2**31])  # pairs and index packed into 64 bits, and an argsort
@pytest.mark.parametrize("weighted", [True, False])
def test_a_coarse_buckets_pairs_are_summed(count, weighted):
    rng = np.random.default_rng(3)
    u, v = rng.integers(0, 60, 30_000) * (count // 60), rng.integers(count - 50, count, 30_000)
    keys = (u.astype(np.uint64) << np.uint64(32)) | v.astype(np.uint64)
    weights = rng.integers(1, 9, 30_000) if weighted else None
    pairs, summed = _pairs_summed(keys, weights, count)
    expected, inverse = np.unique(keys, return_inverse=True)
    assert np.array_equal(pairs, expected)
    assert np.array_equal(summed, np.bincount(inverse, weights=weights).astype(np.int64))


def test_buckets_are_cut_small_only_where_a_weighted_levels_pairs_then_pack():
    from gpart.engines.coarse_file import PACKED_BUCKET_ENTRIES, _bucket_entries

    budget = 1 << 34  # a share worth 100M entries a bucket
    assert _bucket_entries(budget, 11_000_000, weighted=False) > PACKED_BUCKET_ENTRIES  # no pairs packed: no cut
    assert _bucket_entries(budget, 11_000_000, weighted=True) > PACKED_BUCKET_ENTRIES  # 16 bits left: too few to cut
    assert _bucket_entries(budget, 2_000_000, weighted=True) == 1 << 22  # 21-bit ids: 22 bits of index
