"""Write a reproducible synthetic power-law graph as an uncompressed .npz (memory-mappable).

    python benchmarks/make_powerlaw.py OUT.npz --nodes 1000000 --edges 10000000 --feat-dim 128 --seed 0

Keys: src, dst (int64), num_nodes, feat (float32 [N, feat_dim]), label (int64),
train_mask (bool, about 10%). The arrays are streamed in chunks, so the process
holds about one chunk plus two N-entry arrays, not the graph. Same arguments,
same bytes (see tests/support/synthetic.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness import peak_rss_mib  # first: puts the repository root on sys.path

from tests.support.synthetic import DEFAULT_EXPONENT, write_powerlaw_npz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output .npz path")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="number of nodes (default 1000000)")
    parser.add_argument("--edges", type=int, default=10_000_000, help="number of directed edges (default 10000000)")
    parser.add_argument("--feat-dim", type=int, default=128, help="feature columns (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--exponent", type=float, default=DEFAULT_EXPONENT, help=f"degree power-law exponent (default {DEFAULT_EXPONENT})")
    parser.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    args = parser.parse_args()
    if not args.out.name.endswith(".npz"):
        parser.error("OUT must end with .npz")
    if args.out.exists() and not args.force:
        parser.error(f"{args.out} exists (use --force to overwrite)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    write_powerlaw_npz(args.out, args.nodes, args.edges, args.feat_dim, args.seed, exponent=args.exponent)
    seconds = time.perf_counter() - start
    size = args.out.stat().st_size
    print(
        f"wrote {args.out}: {args.nodes} nodes, {args.edges} edges, feat_dim {args.feat_dim}, seed {args.seed}\n"
        f"  size {size / 1e9:.3f} GB ({size} bytes), time {seconds:.2f} s "
        f"({size / 1e6 / seconds:.0f} MB/s), peak RSS {peak_rss_mib():.0f} MiB"
    )


if __name__ == "__main__":
    main()
