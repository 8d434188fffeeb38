"""`--method stream` with its spilled edges read from scratch files (every pass, page cache dropped) against kept in
memory (where they fit in a quarter of the budget past FIXED_BYTES, gpart.engines.stream.RESIDENT_SHARE).

    python benchmarks/bench_stream_memory.py cora facebook enron road-ny --parts 8
    python benchmarks/bench_stream_memory.py /tmp/g.npz --parts 8 --repeats 1     # make_powerlaw.py graph

One process; `stream_book` on each graph, the two taking turns: the best CPU and wall seconds of each, and the
cut (the books are the same: tests/test_stream.py checks it). Wall includes METIS's forked child on the graph of
clusters, which CPU (this process's) does not.
"""

from __future__ import annotations

import argparse
import time

from harness import REPO  # first: puts the repository root on sys.path

from tests.support.public_data import PUBLIC_DATA

NAMED = {"cora": REPO / "sample_data" / "cora.npz",
         "facebook": PUBLIC_DATA / "facebook-combined" / "facebook_combined.txt.gz",
         "enron": PUBLIC_DATA / "email-enron" / "email-Enron.txt.gz",
         "road-ny": PUBLIC_DATA / "road-ny" / "NY.gr.xz"}


def main() -> None:
    from gpart.base.memory import FIXED_BYTES
    from gpart.engines.stream import stream_book
    from gpart.formats.input.readers import read_graph

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+", help="cora, facebook, enron, road-ny or a graph file")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for name in args.graphs:
        graph = read_graph(NAMED.get(name, name))
        # on disk: a budget whose quarter past the floor is below the 16 bytes an edge the spilled rows take
        runs = {"on disk": FIXED_BYTES + 16 * graph.num_edges, "in memory": None}
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeats):
            for label, budget in runs.items():
                cpu, wall = time.process_time(), time.perf_counter()
                _, params = stream_book(graph, args.parts, max_memory=budget)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                best[label] = min(best.get(label, (cpu, wall)), (cpu, wall))
        cut = params["refine_cuts"][params["start"]][-1]
        print(f"{name}: {graph.num_nodes} nodes, {graph.num_edges} edges, {args.parts} parts, cut {cut:.4f}; "
              + "; ".join(f"{label} {cpu:.2f} CPU s, {wall:.2f} s wall" for label, (cpu, wall) in best.items()))


if __name__ == "__main__":
    main()
