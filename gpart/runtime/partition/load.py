"""Loading one partition of a gpart partition result: the manifest checked, every array mapped and placed
on its device; a LoadedPartition, or a HeteroPartition over it for a typed result (SPEC.md 8).

    part = load_partition("parts/")          # this job's partition (rank // L), on CUDA when available

Every file read is checked against the manifest's CRC-32 before it is used
(verify=True, the default): a damaged partition is refused with one line
naming the file, before the first batch. The checksum runs through a
read-only map in pieces on several threads (memory stays bounded); its cost
per GB is in docs/runtime.md (benchmarks/bench_load_verify.py).
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import torch

from gpart.base.errors import InputError, IntegrityError
from gpart.bytes.torch_bridge import numpy_to_tensor
from gpart.collectives.process_group import world
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.writer import data_key
from gpart.runtime.partition.book import load_book
from gpart.runtime.partition.device import DeviceLike, Stager, check_topology, place, place_topology, resolve_device
from gpart.runtime.partition.loaded import LoadedPartition
from gpart.runtime.partition.row_cache import CacheSize, build_cache
from gpart.runtime.partition.trainers import partition_of_rank
from gpart.runtime.partition.typed import HeteroPartition, load_hetero_partition
from gpart.runtime.partition.typed_row_cache import build_typed_cache

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class LoadOptions:
    """load_partition's settings (see there), packed once."""

    device: DeviceLike = None
    feature_device: DeviceLike = None
    verify: bool = True
    node_data: Optional[Sequence[str]] = None
    edge_data: Optional[Sequence[str]] = None
    timeout_s: float = 60.0
    cache: CacheSize = None
    topology: str = "device"


def load_partition(
    path: PathLike,
    rank: Optional[int] = None,
    device: DeviceLike = None,
    feature_device: DeviceLike = None,
    verify: bool = True,
    *,
    node_data: Optional[Sequence[str]] = None,
    edge_data: Optional[Sequence[str]] = None,
    timeout_s: float = 60.0,
    hetero: bool = True,
    cache: CacheSize = None,
    topology: str = "device",
) -> Union[LoadedPartition, HeteroPartition]:
    """Load partition `rank` of the partition result in `path` onto `device`.

    rank: None -> this job's partition: rank // L when P partitions run on
    P x L ranks (L trainers per partition; 0 when not initialised).
    device: None -> CUDA when available, else CPU. feature_device: where node
    data lives (None: `device`; "cpu" keeps it in pinned host memory when
    CUDA is used). verify: check the CRC-32 of every file read against the
    manifest first (default; IntegrityError naming the damaged file; False
    skips the checksums, sizes are still checked).
    node_data / edge_data: names to load (None: all). timeout_s bounds the
    cross-rank agreement check of distributed gathers. A typed result (SPEC.md 8)
    gives a gpart.runtime.partition.typed.HeteroPartition (node_data then names typed
    arrays, `(ntype, name)`); hetero=False loads its type-erased partition.
    cache: keep the most-read node data rows on `device` in front of node data
    in host memory (feature_device="cpu"): a byte budget ("8GB", an int) or a
    fraction of the rows (0.2); the loaders read through it and
    `part.cache_stats()` counts hits and misses (gpart.runtime.partition.
    row_cache; a typed partition's per node type: typed_row_cache). None: no cache.
    topology: "device" copies the topology (CSC, edge ids, edge data) to `device`;
    "pinned" keeps it in pinned host memory that the GPU reads in place (UVA:
    gpart.runtime.partition.host_mapped), for graphs whose topology does not
    fit the GPU; the batches are the same. CUDA only.
    """
    options = LoadOptions(device, feature_device, verify, node_data, edge_data, timeout_s, cache, topology)
    directory = Path(path)
    reader, rank = _open_reader(directory, rank)
    try:
        typed = hetero and reader.hetero is not None
        # a typed result: its erased partition without data, then the typed data over it
        with _damage_named(directory):
            base = _load_erased(reader, directory, rank, replace(options, node_data=[], edge_data=[]) if typed else options)
    finally:
        reader.close()
    if typed:
        with _damage_named(directory):
            part = load_hetero_partition(base, feature_device, verify, node_data=node_data, edge_data=edge_data)
        part.row_cache = build_typed_cache(cache, part, directory)
        return part
    base.row_cache = build_cache(cache, base.node_data, base.indices, base.device, directory)
    return base


@contextmanager
def _damage_named(directory: Path) -> Iterator[None]:
    """A damaged file (IntegrityError: size, checksum) as one line that also says what to do about it."""
    try:
        yield
    except IntegrityError as exc:
        hint = f"the partition result is damaged and is not loaded (`gpart verify {directory}` lists every damaged file)"
        raise IntegrityError(exc.path, f"{exc.problem}; {hint}") from None


def _load_erased(reader: PartitionReader, directory: Path, rank: Any, options: LoadOptions) -> LoadedPartition:
    """Partition `rank` of the result `reader` opened, over erased ids, with the node and edge data named."""
    rank = _check_rank(rank, reader.num_parts, directory)
    dev = resolve_device(options.device)
    check_topology(options.topology, dev, directory)
    fdev = resolve_device(options.feature_device) if options.feature_device is not None else dev
    names = _select(reader.node_data_names(), options.node_data, "node data", directory)
    edge_names = _select(reader.edge_data_names(), options.edge_data, "edge data", directory)
    verify, timeout_s = options.verify, options.timeout_s
    info = reader.part_info(rank)
    return LoadedPartition(
        directory=directory,
        manifest=reader.manifest,
        digest=_manifest_digest(reader.manifest_file),
        rank=rank,
        num_parts=reader.num_parts,
        num_nodes=reader.num_nodes,
        num_edges=reader.num_edges,
        num_owned=int(info["num_owned"]),
        num_halo=int(info["num_halo"]),
        halo=bool(reader.halo),
        device=dev,
        feature_device=fdev,
        timeout_s=timeout_s,
        topology=options.topology,
        **_load_arrays(reader, rank, verify, dev, fdev, names, edge_names, options.topology),
    )


def _open_reader(directory: Path, rank: Optional[int]) -> tuple[PartitionReader, Any]:
    """(the result's reader, checking only partition `rank`'s files and the book: a per-machine output holds its
    own partitions only, SPEC.md 10.4; the partition). rank None: this job's, r // L with L trainers per partition."""
    if rank is None and world()[1] > 1:
        probe = PartitionReader(directory, parts=[])  # the manifest alone: how many partitions share the ranks
        try:
            rank = partition_of_rank(probe.num_parts, path=directory)
        finally:
            probe.close()
    mine = world()[0] if rank is None else rank
    return PartitionReader(directory, parts=[mine] if isinstance(mine, int) else None), mine


def _check_rank(rank: Any, num_parts: int, directory: Path) -> int:
    if not isinstance(rank, (int, np.integer)) or not 0 <= int(rank) < num_parts:
        raise InputError(directory, f"has {num_parts} partitions; rank {rank!r} is not one of 0..{num_parts - 1}")
    return int(rank)


def _load_arrays(reader: Any, rank: int, verify: bool, dev: torch.device, fdev: torch.device,
                 names: list[str], edge_names: list[str], topology: str) -> dict[str, Any]:
    """The book, topology and data tensors of partition `rank`, each mapped and placed on its device (the
    per-edge ones as `topology` says)."""
    stager = Stager(dev) if dev.type == "cuda" else None

    def host(key: str) -> torch.Tensor:
        entry = reader.entry(rank, key)
        return numpy_to_tensor(reader.read_entry(entry, verify, mode="c"), entry.dtype)

    def load(key: str, to: torch.device) -> torch.Tensor:
        pin = to.type == "cpu" and dev.type == "cuda"
        return place(host(key), to, pin=pin, stager=stager if to.type == "cuda" else None)

    def load_edges(key: str) -> torch.Tensor:
        return place_topology(host(key), dev, topology, stager)

    arrays: dict[str, Any] = {"book": load_book(reader, verify, dev, stager), "node_ids": load("node_ids", dev)}
    arrays.update({key: load_edges(key) for key in ("indptr", "indices", "edge_ids")})
    arrays["node_data"] = {name: load(data_key("node", name), fdev) for name in names}
    arrays["edge_data"] = {name: load_edges(data_key("edge", name)) for name in edge_names}
    return arrays


def _select(available: list[str], wanted: Optional[Sequence[str]], what: str, directory: Path) -> list[str]:
    if wanted is None:
        return list(available)
    if isinstance(wanted, str):
        wanted = [wanted]
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise InputError(directory, f"no {what} named {', '.join(map(repr, unknown))} (has: {', '.join(available) or 'none'})")
    return list(wanted)


def _manifest_digest(manifest_file: Path) -> str:
    try:
        return hashlib.sha256(manifest_file.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise InputError(manifest_file, f"cannot read: {exc.strerror or exc}") from None
