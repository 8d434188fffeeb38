"""Input reader speed and memory beside plain-numpy baselines, each case in a fresh process.

    python benchmarks/bench_readers.py [--powerlaw /tmp/gpart-bench-inputs/powerlaw_1m_10m.npz]

Cases:
- email-Enron (.txt.gz, 367,662 lines) and road-ny (.gr.xz, 365,050 edges) from
  tests/data/public: `read_graph` against the simplest vectorised numpy parse
  (decompress, drop comment lines, `np.array(text.split(), int64)`, the baseline)
  and numpy 2's C `np.loadtxt`, with one comment character and with gpart's two
  (`#` and `%`, which sends loadtxt down a slower path).
- a 10M-line SNAP text file (the power-law graph's edges, written under
  /tmp/gpart-bench-A/ and deleted afterwards): `read_graph` against the split baseline.
- the uncompressed power-law .npz (1M nodes, 10M edges, 128-d float32 features):
  `read_graph` (memory-mapped, fully validated) against `np.load` of every array.
- `--tables N` (default 5M): the same N random edges as a SNAP .txt, a CSV with a header (plain and
  gzip), a TSV and a Parquet file (written under /tmp/gpart-bench-A/ and deleted afterwards), each read
  by `read_graph`; the baseline is the .txt reader on the same edges, and pyarrow's own CSV reader
  (`pyarrow.csv.read_csv` + to_numpy, multi-threaded) is shown for reference. Rows/s and peak RSS.

Each case runs in its own Python process so its peak RSS (VmHWM, not ru_maxrss: that survives exec) is its own.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np
from harness import child_result, fastest, peak_rss_mib, timed

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "public"  # the public graphs shipped with the repository
TMP = Path("/tmp/gpart-bench-A")
DEFAULT_POWERLAW = Path("/tmp/gpart-bench-inputs/powerlaw_1m_10m.npz")


def _split_baseline(path: Path) -> int:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "rb") as fh:
        text = fh.read()
    lines = [line for line in text.splitlines() if line and line[:1] not in b"#%cp"]
    values = np.array(b" ".join(lines).split(), dtype=np.int64)
    return values.shape[0] // 2


def _loadtxt_baseline(path: Path) -> int:
    """numpy 2's C loadtxt with one comment character ('#'; 'c' and 'p' lines for .gr)."""
    comments = ["c", "p"] if ".gr" in path.name else "#"
    return np.loadtxt(path, dtype=np.int64, comments=comments, usecols=(0, 1)).shape[0]


def _loadtxt_both_baseline(path: Path) -> int:
    """loadtxt with gpart's SNAP comment rule ('#' and '%'): two comment strings take its slower path."""
    return np.loadtxt(path, dtype=np.int64, comments=["#", "%"], usecols=(0, 1)).shape[0]


def _npz_load_baseline(path: Path) -> int:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return int(arrays["src"].shape[0])


def _gpart(path: Path) -> int:
    from gpart.formats.input.readers import read_graph

    return read_graph(path).num_edges


def _pyarrow_csv(path: Path) -> int:
    """pyarrow's multi-threaded C++ CSV reader, the two columns turned into numpy (a reference, not gpart)."""
    import pyarrow.csv as pcsv

    table = pcsv.read_csv(path)
    src, dst = table.column("src").to_numpy(), table.column("dst").to_numpy()
    return int(src.shape[0] + 0 * dst.shape[0])


def run_case(method: str, path: Path) -> dict:
    fn = {
        "gpart": _gpart,
        "pyarrow.csv": _pyarrow_csv,
        "split": _split_baseline,
        "loadtxt": _loadtxt_baseline,
        "loadtxt#%": _loadtxt_both_baseline,
        "np.load": _npz_load_baseline,
    }[method]
    import gpart.formats.input.readers  # noqa: F401  (module import is not part of the measured read)

    edges, seconds, cpu_seconds = timed(lambda: fn(path))
    # this process image's own peak: the parent's survives exec in ru_maxrss
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "edges": edges, "peak_rss_mib": peak_rss_mib(since_exec=True)}


def _in_subprocess(method: str, path: Path, repeats: int) -> dict:
    """Best of `repeats` fresh processes (the machine is shared: the minimum is the least disturbed run)."""
    runs = [child_result([sys.executable, __file__, "--case", method, str(path)], cwd=REPO) for _ in range(repeats)]
    best = fastest(runs, "seconds")
    best["cpu_seconds"] = min(r["cpu_seconds"] for r in runs)
    return best


def _write_text_edges(npz: Path, out: Path) -> None:
    from gpart.formats.input.npz import read_npz_arrays

    arrays = read_npz_arrays(npz, only=["src", "dst"])
    src, dst = arrays["src"], arrays["dst"]
    with open(out, "w") as fh:
        fh.write("# synthetic power-law edges\n")
        step = 1 << 20
        for start in range(0, src.shape[0], step):
            pairs = np.stack([src[start : start + step], dst[start : start + step]], axis=1)
            fh.write("\n".join(f"{a}\t{b}" for a, b in pairs.tolist()))
            fh.write("\n")


def _write_tables(num_edges: int, folder: Path) -> list[tuple[str, Path, str]]:
    """The same random edges as .txt, .csv, .csv.gz, .tsv and .parquet: (label, path, method)."""
    rng = np.random.default_rng(0)
    src = rng.integers(0, max(1, num_edges // 5), num_edges)
    dst = rng.integers(0, max(1, num_edges // 5), num_edges)
    texts = {".txt": ("", "\t"), ".csv": ("src,dst\n", ","), ".tsv": ("src\tdst\n", "\t")}
    for suffix, (header, sep) in texts.items():
        with open(folder / f"edges{suffix}", "w") as fh:
            fh.write(header)
            for start in range(0, num_edges, 1 << 20):
                pairs = np.stack([src[start : start + (1 << 20)], dst[start : start + (1 << 20)]], axis=1)
                fh.write("\n".join(f"{a}{sep}{b}" for a, b in pairs.tolist()) + "\n")
    with open(folder / "edges.csv", "rb") as fh, gzip.open(folder / "edges.csv.gz", "wb", compresslevel=1) as out:
        shutil.copyfileobj(fh, out)
    cases = [("SNAP .txt (baseline)", folder / "edges.txt", "gpart"), ("CSV with header", folder / "edges.csv", "gpart"),
             ("CSV .gz", folder / "edges.csv.gz", "gpart"), ("TSV with header", folder / "edges.tsv", "gpart")]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"src": src, "dst": dst}), folder / "edges.parquet")
        cases += [("Parquet", folder / "edges.parquet", "gpart"), ("CSV by pyarrow.csv (reference)", folder / "edges.csv", "pyarrow.csv")]
    except ImportError:
        print("(pyarrow not installed: no Parquet case)")
    return cases


def table_cases(num_edges: int, repeats: int) -> None:
    """Edge tables beside the SNAP .txt reader on the same edges: rows/s and peak RSS, each in a fresh process."""
    folder = TMP / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    cases = _write_tables(num_edges, folder)
    print(f"\n{num_edges:,} edges as tables; best of {repeats} fresh processes; baseline: the .txt reader")
    print(f"{'input':<32} {'MB':>7} {'wall s':>8} {'Mrows/s':>8} {'peak RSS MiB':>13} {'vs baseline':>12}")
    base = None
    for label, path, method in cases:
        r = _in_subprocess(method, path, repeats)
        assert r["edges"] == num_edges, (label, r["edges"])
        base = base or r
        print(f"{label:<32} {path.stat().st_size / 1e6:>7.0f} {r['seconds']:>8.3f} {num_edges / r['seconds'] / 1e6:>8.2f}"
              f" {r['peak_rss_mib']:>13.0f} {base['seconds'] / r['seconds']:>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description="input reader benchmark")
    parser.add_argument("--case", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per case; the best is reported (default 3)")
    parser.add_argument("--tables", type=int, default=5_000_000, metavar="N",
                        help="edges of the CSV/TSV/Parquet cases (0: skip them)")
    parser.add_argument("--only-tables", action="store_true", help="run only the edge-table cases")
    parser.add_argument("--powerlaw", type=Path, default=DEFAULT_POWERLAW, help="uncompressed power-law .npz (benchmarks/make_powerlaw.py)")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case[0], Path(args.case[1]))))
        return

    if args.only_tables:
        try:
            table_cases(args.tables, args.repeats)
        finally:
            shutil.rmtree(TMP, ignore_errors=True)
        return
    cases: list[tuple[str, Path, list[str]]] = [
        ("email-Enron .txt.gz", DATA / "email-enron" / "email-Enron.txt.gz", ["gpart", "split", "loadtxt", "loadtxt#%"]),
        ("road-ny .gr.xz", DATA / "road-ny" / "NY.gr.xz", ["gpart", "split", "loadtxt"]),
    ]
    TMP.mkdir(parents=True, exist_ok=True)
    try:
        if args.powerlaw.exists():
            text = TMP / "powerlaw_10m.txt"
            _write_text_edges(args.powerlaw, text)
            cases.append((f"power-law 10M-line .txt ({text.stat().st_size / 1e6:.0f} MB)", text, ["gpart", "split", "loadtxt#%"]))
            size = args.powerlaw.stat().st_size / 1e9
            cases.append((f"power-law .npz 1M/10M/128 ({size:.2f} GB, stored)", args.powerlaw, ["gpart", "np.load"]))
        else:
            print(f"(skipping power-law cases: {args.powerlaw} not found; run benchmarks/make_powerlaw.py)")
        print(f"best of {args.repeats} runs; wall and CPU seconds; speed-up = baseline wall / gpart wall")
        print(f"{'input':<44} {'method':<9} {'edges':>10} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'vs baseline':>12}")
        for label, path, methods in cases:
            if not path.exists():
                print(f"{label:<44} (missing {path})")
                continue
            results = {m: _in_subprocess(m, path, args.repeats) for m in methods}
            base = results[methods[1]]["seconds"]
            for m in methods:
                r = results[m]
                if m == methods[1]:
                    mark = "baseline"
                elif m == "gpart":
                    mark = f"{base / r['seconds']:.1f}x faster"
                else:
                    mark = f"{r['seconds'] / base:.2f}x time"
                print(
                    f"{label:<44} {m:<9} {r['edges']:>10} {r['seconds']:>8.3f} {r['cpu_seconds']:>7.3f}"
                    f" {r['peak_rss_mib']:>13.0f} {mark:>12}"
                )
        if args.tables:
            table_cases(args.tables, args.repeats)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
