"""Build a heterogeneous graph from Cora's own files in gpart's typed input convention (SPEC.md 8.1).

    python sample_data/make_cora_hetero.py [SOURCE_NPZ] [OUT_NPZ]

SOURCE_NPZ defaults to tests/data/public/cora/cora.npz in the repository
(the gnn-benchmark file make_cora.py converts); OUT_NPZ to
sample_data/cora_hetero.npz. Node types `paper` (2,708) and `word` (the
1,433 bag-of-words dimensions); edge types:

    paper:cites:paper     the directed citations, as make_cora.py keeps them
    paper:cited_by:paper  their reverses
    paper:has:word        one edge per 1 in the binary bag-of-words
    word:in:paper         their reverses

Papers carry `feat` (the bag-of-words rows), `label` and the same
Planetoid-style masks as sample_data/cora.npz (make_cora's split, seed 0),
so a typed model and the homogeneous one train and test on the same nodes.
Numpy only, nothing unpickled; the output is deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_cora  # noqa: E402
from make_cora import SPLIT_SEED, csr_to_dense, planetoid_style_split  # noqa: E402

DEFAULT_OUT = HERE / "cora_hetero.npz"


def build(source: Path) -> dict[str, np.ndarray]:
    """The typed arrays, key -> array."""
    with np.load(source, allow_pickle=False) as z:
        n = int(z["adj_shape"][0])
        indptr, indices = z["adj_indptr"].astype(np.int64), z["adj_indices"].astype(np.int64)
        attr_indptr, attr_indices = z["attr_indptr"].astype(np.int64), z["attr_indices"].astype(np.int64)
        attr_data, attr_shape = z["attr_data"], tuple(int(s) for s in z["attr_shape"])
        label = z["labels"].astype(np.int64)
    assert bool(np.all(attr_data == 1)), "Cora's bag-of-words is binary: every stored entry is a 1"
    cite_src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    cite_dst = indices
    word_paper = np.repeat(np.arange(attr_shape[0], dtype=np.int64), np.diff(attr_indptr))
    word_id = attr_indices
    train, val, test = planetoid_style_split(label, SPLIT_SEED)
    return {
        "paper/num_nodes": np.int64(n),
        "paper/feat": csr_to_dense(attr_indptr, attr_indices, attr_data, attr_shape),
        "paper/label": label,
        "paper/train_mask": train,
        "paper/val_mask": val,
        "paper/test_mask": test,
        "word/num_nodes": np.int64(attr_shape[1]),
        "paper:cites:paper/src": cite_src,
        "paper:cites:paper/dst": cite_dst,
        "paper:cited_by:paper/src": cite_dst.copy(),
        "paper:cited_by:paper/dst": cite_src.copy(),
        "paper:has:word/src": word_paper,
        "paper:has:word/dst": word_id,
        "word:in:paper/src": word_id.copy(),
        "word:in:paper/dst": word_paper.copy(),
    }


def convert(source: Path, out: Path) -> None:
    np.savez_compressed(out, **build(source))


def main(argv: list[str]) -> None:
    make_cora.main(argv, convert, DEFAULT_OUT)


if __name__ == "__main__":
    main(sys.argv[1:])
