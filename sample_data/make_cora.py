"""Convert the gnn-benchmark Cora file into gpart's input convention (SPEC.md 3.1).

    python sample_data/make_cora.py [SOURCE_NPZ] [OUT_NPZ]

SOURCE_NPZ defaults to tests/data/public/cora/cora.npz in the repository
(github.com/shchur/gnn-benchmark `data/npz/cora.npz`); OUT_NPZ to
sample_data/cora.npz. The source holds scipy-style CSR pieces; they are read
with numpy alone (never unpickled). The output is deterministic: same input,
same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parent / "tests" / "data" / "public" / "cora" / "cora.npz"
DEFAULT_OUT = HERE / "cora.npz"

# Planetoid's split sizes (Yang et al. 2016): 20 training nodes per class, 500 validation, 1000 test.
TRAIN_PER_CLASS, NUM_VAL, NUM_TEST = 20, 500, 1000
SPLIT_SEED = 0


def csr_to_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape) -> np.ndarray:
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    dense = np.zeros(shape, dtype=np.float32)
    dense[rows, indices] = data
    return dense


def planetoid_style_split(label: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """20 random nodes per class for training, then 500 validation and 1000 test nodes from the rest."""
    rng = np.random.default_rng(seed)
    n = label.shape[0]
    order = rng.permutation(n)
    train = np.zeros(n, dtype=bool)
    for c in np.unique(label):  # 7 classes: a loop over classes, not nodes
        members = order[label[order] == c]
        train[members[:TRAIN_PER_CLASS]] = True
    rest = order[~train[order]]
    val = np.zeros(n, dtype=bool)
    test = np.zeros(n, dtype=bool)
    val[rest[:NUM_VAL]] = True
    test[rest[NUM_VAL : NUM_VAL + NUM_TEST]] = True
    return train, val, test


def convert(source: Path, out: Path) -> None:
    with np.load(source, allow_pickle=False) as z:
        n = int(z["adj_shape"][0])
        indptr, indices = z["adj_indptr"].astype(np.int64), z["adj_indices"].astype(np.int64)
        feat = csr_to_dense(z["attr_indptr"], z["attr_indices"], z["attr_data"], tuple(z["attr_shape"]))
        label = z["labels"].astype(np.int64)
    # The adjacency is the directed citation graph (paper -> cited paper): keep its edges as given.
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = indices
    train, val, test = planetoid_style_split(label, SPLIT_SEED)
    np.savez_compressed(
        out, src=src, dst=dst, num_nodes=np.int64(n), feat=feat, label=label,
        train_mask=train, val_mask=val, test_mask=test,
    )


def main(argv: list[str], convert=convert, default_out: Path = DEFAULT_OUT) -> None:
    """`[SOURCE [OUT]]`: run `convert` (this file's, or make_cora_hetero's) and say what it wrote."""
    source = Path(argv[0]) if argv else DEFAULT_SOURCE
    out = Path(argv[1]) if len(argv) > 1 else default_out
    convert(source, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
