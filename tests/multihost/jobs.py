"""What the multihost tests run on the hosts of a netns_hosts.Cluster: torchrun with the c10d
rendezvous served by hostA, the ranks it starts, and the inputs (Cora with reverse edges, in chunks).

    argv = torchrun(cluster, host, "-m", "gpart.distributed", "partition", "chunks", ...)

is exactly what a user types on each machine (README, docs/distributed.md):
`--nnodes`, `--node-rank`, `--rdzv-backend c10d --rdzv-endpoint hostA:29500`,
`--local-addr` (the name the other hosts reach this one by) and, on the host
serving the rendezvous, `--rdzv-conf is_host=1`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np
from netns_hosts import Cluster, Host

RDZV_PORT = 29500
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORA = REPO / "sample_data" / "cora.npz"
# one intra-op thread per rank: the hosts share this machine's cores
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def torchrun(cluster: Cluster, host: Host, *command: str, nproc: int = 1) -> list[str]:
    """The torchrun line of `host` for a job over every host of `cluster` (hostA serves the rendezvous)."""
    serving = host.index == 0
    return ["torchrun", "--nnodes", str(len(cluster.hosts)), "--node-rank", str(host.index), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{cluster.hosts[0].name}:{RDZV_PORT}",
            "--local-addr", host.name, "--rdzv-conf", f"is_host={int(serving)}", *command]


def rank_env(cluster: Cluster, host: Host) -> dict[str, str]:
    """The environment torchrun would give the one rank of `host` (rank = host index, the store on hostA):
    for launching `python -m ...` directly, a torchrun start-up (an interpreter and torch) cheaper."""
    return {**ENV, "MASTER_ADDR": cluster.hosts[0].name, "MASTER_PORT": str(RDZV_PORT), "RANK": str(host.index),
            "LOCAL_RANK": "0", "WORLD_SIZE": str(len(cluster.hosts))}


def rank_pids(cluster: Cluster, host: Host) -> list[int]:
    """The ranks torchrun started on `host`: processes of its namespace whose parent is a torchrun."""
    pids = cluster.pids(host)
    return [pid for pid in pids if "torchrun" not in _cmdline(pid) and "torchrun" in _cmdline(_parent(pid))]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return 0


def undirected_cora(path: Path) -> Path:
    """Cora (sample_data) with every edge in both directions, once: the sampler follows in-edges, and
    GraphSAGE's Cora is undirected (examples/train_sage.py --prepare does the same with --add-reverse)."""
    data = dict(np.load(CORA))
    pairs = np.unique(np.concatenate([np.stack([data["src"], data["dst"]], 1), np.stack([data["dst"], data["src"]], 1)]), axis=0)
    data["src"], data["dst"] = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    np.savez(path, **data)
    return path


def one_machine_partition(chunks: Path, workdir: Path, *args: str) -> Path:
    """`gpart partition chunks ARGS -o single` in `workdir` on a copy of `chunks`: the same command line as on
    the hosts, so the manifest (which records the input as given) can be compared byte for byte."""
    shutil.copytree(chunks, workdir / "chunks")
    subprocess.run(["gpart", "partition", "chunks", *args, "-o", "single", "-q"], cwd=workdir, check=True)
    return workdir / "single"


def same_tree(a: Path, b: Sequence[Path]) -> list[str]:
    """Asserts that the files under `a` are exactly the union of the files under `b` (byte for byte; a
    file present under several of `b`, as manifest.json and the book, must be identical in each)."""
    mine = {str(p.relative_to(a)): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    union: dict[str, bytes] = {}
    for root in b:
        for p in root.rglob("*"):
            if p.is_file():
                name, data = str(p.relative_to(root)), p.read_bytes()
                assert union.setdefault(name, data) == data, f"{name} differs between hosts"
    assert sorted(mine) == sorted(union), (sorted(set(mine) ^ set(union)))
    assert all(mine[name] == union[name] for name in mine), [n for n in mine if mine[n] != union[n]]
    return sorted(mine)
