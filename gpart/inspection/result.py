"""`gpart info` and `gpart verify`: describe a result and prove it intact.

Both dispatch on the manifest's `format`: partition results are handled here,
checkpoints by gpart.ckpt, the outputs of `gpart convert` and `gpart export-ckpt`
by gpart.inspection.foreign (through the files their manifests list).

verify() of a partition result is gpart.inspection.verify's PartitionVerifier.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from gpart.base.errors import GpartError, InputError, InputMismatchError, IntegrityError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory
from gpart.base.progress import Progress, or_null
from gpart.ckpt import checkpoint_info, verify_checkpoint
from gpart.formats.checkpoint.entries import FORMAT as CHECKPOINT_FORMAT
from gpart.formats.filelist.commit_record import interrupted_exports
from gpart.formats.filelist.layout import FORMAT as FILELIST_FORMAT
from gpart.formats.filelist.reader import find_exports, open_filelist
from gpart.formats.files.manifest import MANIFEST_NAME, manifest_path, read_json
from gpart.formats.files.names import parse_work_name
from gpart.formats.input.typed import HeteroGraph, read_hetero_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.reverse import REVERSE_KEY
from gpart.formats.partition.writer import FORMAT as PARTITION_FORMAT
from gpart.inspection.foreign import FOREIGN_FORMATS, foreign_info, verify_foreign
from gpart.inspection.typed import hetero_info, typed_input, verify_typed
from gpart.inspection.verify import PartitionVerifier, check_input_counts
from gpart.pipeline.reverse_edges import hetero_with_reverse_edges, reverse_scratch_dir

PathLike = Union[str, "os.PathLike[str]"]



def _export_files(directory: PathLike) -> tuple[list[Path], list[Path]]:
    """(`<name>.json` files of gpart.filelist exports, in `directory` and its export-set folders;
    commit records of interrupted ones) in `directory`; two empty lists when it holds neither (then
    it is not an export directory)."""
    jsons = find_exports(directory)
    records = interrupted_exports(directory)
    return (jsons, records) if jsons or records else ([], [])


def _interrupted_lines(records: list[Path]) -> tuple[list[str], list[str]]:
    """(problems, notes) for commit records of killed exports. Until its parts start moving, a
    record sits beside the old `<name>.json`, which is still intact (a note); once they move,
    the JSON is gone and only the record describes the export (a problem until completed)."""
    problems, notes = [], []
    for record in records:
        target = parse_work_name(record).target
        line = f"{record}: an export-feat commit of {target.name} was interrupted; the next export-feat writing to {record.parent} completes it"
        (notes if target.exists() else problems).append(line)
    return problems, notes


def _format_of(directory: PathLike, missing_is_damage: bool) -> str:
    """The manifest's `format`, read before anything else to pick the handler."""
    if Path(directory).is_dir() and not (Path(directory) / MANIFEST_NAME).exists() and any(_export_files(directory)):
        return FILELIST_FORMAT
    path = manifest_path(directory, IntegrityError if missing_is_damage else InputError)
    try:
        obj = read_json(path)
    except InputError as exc:
        if missing_is_damage:
            raise IntegrityError(exc.path, exc.problem) from None
        raise
    fmt = obj.get("format") if isinstance(obj, dict) else None
    if not isinstance(fmt, str):
        raise (IntegrityError if missing_is_damage else InputError)(path, "manifest has no 'format' string")
    return fmt


def _unknown_format(directory: PathLike, fmt: str) -> InputError:
    known = ", ".join([PARTITION_FORMAT, CHECKPOINT_FORMAT, FILELIST_FORMAT, *FOREIGN_FORMATS])
    return InputError(Path(directory) / MANIFEST_NAME, f"format {fmt!r} is none that gpart info and verify read ({known})")


# --------------------------------------------------------------------------- info


def info(directory: PathLike) -> dict[str, Any]:
    """Sizes, edge cut, balance, halo ratio and dtypes of a result; or the summary of a checkpoint, an
    export-feat directory, a convert or an export-ckpt output."""
    fmt = _format_of(directory, missing_is_damage=False)
    if fmt == FILELIST_FORMAT:
        return _exports_info(directory)
    if fmt == CHECKPOINT_FORMAT:
        return checkpoint_info(directory)
    if fmt in FOREIGN_FORMATS:
        return foreign_info(directory)
    if fmt != PARTITION_FORMAT:
        raise _unknown_format(directory, fmt)
    with PartitionReader(directory) as reader:
        out = _partition_info(reader)
        if reader.hetero is not None:  # typed results, SPEC.md 8.5

            out["hetero"] = hetero_info(reader)
        return out


def _exports_info(directory: PathLike) -> dict[str, Any]:
    jsons, records = _export_files(directory)
    problems, _ = _interrupted_lines(records)
    if problems:
        raise IntegrityError(None, problems[0])
    exports = []
    for path in jsons:
        fl = open_filelist(path)
        exports.append({"name": fl.name, "dtype": fl.dtype, "shape": list(fl.shape), "files": len(fl.entries),
                        "bytes": sum(e.nbytes for e in fl.entries), "json": os.fspath(path)})
    return {"format": FILELIST_FORMAT, "directory": os.fspath(directory), "exports": exports}


def verify_exports(directory: PathLike) -> dict[str, Any]:
    """Every export JSON in `directory` validated and every part file's size and CRC-32 checked."""
    jsons, records = _export_files(directory)
    problems, notes = _interrupted_lines(records)
    files = 0
    for path in jsons:
        try:
            fl = open_filelist(path)
        except GpartError as exc:
            problems.append(exc.one_line())
            continue
        files += len(fl.entries)
        problems += fl.verify()
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": FILELIST_FORMAT,
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "checked": {"checksums": True, "invariants": False, "arrays": files},
    }


def _numbers(obj: Any) -> dict[str, Optional[float]]:
    # None is kept: a figure the result does not have (train_balance without a training mask)
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def _is_count(value: Any) -> bool:
    # descriptive: a training-node count of the wrong type is dropped, as the stats are (verify reports it)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _partition_info(reader: PartitionReader) -> dict[str, Any]:
    m = reader.manifest
    parts = []
    for p in range(reader.num_parts):
        pi = reader.part_info(p)
        nbytes = sum(reader.entry(p, k).nbytes for k in reader.keys(p))
        parts.append(
            {
                "part": p,
                "num_owned": pi["num_owned"],
                "num_halo": pi["num_halo"],
                "num_edges": pi["num_edges"],
                "bytes": nbytes,
                "halo_ratio": pi["num_halo"] / pi["num_owned"] if pi["num_owned"] else 0.0,
            }
            | ({"num_train": pi["num_train"]} if _is_count(pi.get("num_train")) else {})
        )
    outside_parts = sum(e.nbytes for label, e in reader.all_entries() if not label.startswith("part_"))  # book, reverse edges
    total_halo = sum(p["num_halo"] for p in parts)
    # descriptive fields are not needed to read the data: keep what has the right type, drop the rest
    stats = _numbers(m.get("stats"))
    if stats.get("halo_ratio") is None:  # absent, or null in a hand-edited manifest: the figure is derivable
        stats["halo_ratio"] = total_halo / reader.num_nodes if reader.num_nodes else 0.0
    params = m.get("params") if isinstance(m.get("params"), dict) else {}
    return {
        "format": PARTITION_FORMAT,
        "version": m["version"],
        "directory": str(reader.directory),
        "storage": reader.storage,
        "source": _text_or_none(m["graph"].get("source")),
        "num_nodes": reader.num_nodes,
        "num_edges": reader.num_edges,
        "num_parts": reader.num_parts,
        "method": _text_or_none(m.get("method")),
        "params": params,
        "halo": reader.halo,
        "book": m["book"]["kind"],
        "node_data": m["node_data"],
        "edge_data": m["edge_data"],
        "topology_dtype": "int64",
        "partitions": parts,
        "bytes": outside_parts + sum(p["bytes"] for p in parts),
        "stats": stats,
    } | ({} if reader.reverse is None else {"reverse": {k: v for k, v in m[REVERSE_KEY].items() if k != "input_edge"}})


# --------------------------------------------------------------------------- verify


def verify(
    directory: PathLike,
    graph: Union[PathLike, Graph, None] = None,
    *,
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Check every checksum and invariant; with `graph`, prove the result reconstructs it.

    Returns a report: `ok`, `problems` (one line each), `notes`, `checked`.
    Raises InputError when the directory does not exist, IntegrityError when
    it has no readable manifest.
    """
    fmt = _format_of(directory, missing_is_damage=True)
    if fmt == FILELIST_FORMAT:
        if graph is not None or node_data or edge_data:
            raise InputError(directory, "holds export-feat exports: --graph, --node-data and --edge-data apply to partition results")
        return verify_exports(directory)
    if fmt == CHECKPOINT_FORMAT or fmt in FOREIGN_FORMATS:
        if graph is not None or node_data or edge_data:
            what = "a checkpoint" if fmt == CHECKPOINT_FORMAT else f"a `gpart {FOREIGN_FORMATS[fmt]}` output"
            raise InputError(directory, f"is {what}: --graph, --node-data and --edge-data apply to partition results")
        return verify_checkpoint(directory) if fmt == CHECKPOINT_FORMAT else verify_foreign(directory)
    if fmt != PARTITION_FORMAT:
        raise _unknown_format(directory, fmt)
    try:
        reader = PartitionReader(directory, check_files=False)
    except GpartError as exc:
        raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
    with reader:
        if reader.hetero is None:
            report = PartitionVerifier(reader, or_null(progress)).run(graph, node_data, edge_data)
        elif node_data or edge_data:
            raise InputError(directory, "is a typed result: --node-data/--edge-data do not apply (typed arrays come from the typed .npz)")
        else:  # typed: the erased result is checked as any other, then the typed arrays (SPEC.md 8.4)
            report = _verify_typed_result(reader, graph, progress)
        source = reader.manifest["graph"].get("source")
        return report | {"made_from": source if isinstance(source, str) else None}


def _verify_typed_result(reader: PartitionReader, graph: Union[PathLike, HeteroGraph, None], progress: Optional[Progress]) -> dict[str, Any]:
    """The erased result as any other, then the typed arrays by themselves, then (intact, and the erased
    input matching) the typed arrays against the typed input: what they find is `mismatch`, not damage."""
    hg = None if graph is None else graph if isinstance(graph, HeteroGraph) else read_hetero_graph(graph)
    if hg is not None:  # the counts first, before any content is read (and before reverse relations are added)
        check_input_counts(reader, sum(hg.num_nodes.values()), sum(hg.num_edges(e) for e in hg.edge_types), hg.source)
    with reverse_scratch_dir(hg is not None and reader.reverse is not None) as scratch:
        if scratch is None:
            (hg, erased), reverse = typed_input(hg), None
        else:  # the typed input with its reverse relations (SPEC.md 4.7)
            hg, reverse = hetero_with_reverse_edges(hg, scratch, default_max_memory())
            erased = hg.erased(scratch)
        report = verify_typed(reader, PartitionVerifier(reader, or_null(progress)).run(erased, None, None, reverse), None)
        if hg is not None and not report["problems"] and not report["mismatch"]:
            against = verify_typed(reader, {**report, "problems": [], "notes": []}, hg)
            report["mismatch"] = against["problems"]
            report["notes"] += against["notes"]
            report["checked"]["graph"] = hg.source
    report["ok"] = not report["problems"] and not report["mismatch"]
    return report


def report_failure(directory: PathLike, graph: Union[PathLike, Graph, HeteroGraph, None], report: dict[str, Any]) -> Optional[GpartError]:
    """The one-line error a failed verify report ends with (None when it passed): IntegrityError (exit 1)
    when the result is damaged; InputMismatchError (exit 3) when the result is intact and only its
    comparison with `graph` failed, i.e. `graph` is not the input it was made from."""
    problems, mismatch = report.get("problems", []), report.get("mismatch", [])
    if problems:
        return IntegrityError(directory, f"damaged: {len(problems)} problem{'s' if len(problems) != 1 else ''} found")
    if mismatch:
        given = graph if isinstance(graph, (str, os.PathLike)) else getattr(graph, "source", None)
        recorded = report.get("made_from")
        return InputMismatchError(
            given, f"differs from the input {directory} was made from{f' ({recorded})' if recorded else ''} "
                   f"({len(mismatch)} difference{'s' if len(mismatch) != 1 else ''}); the result's checksums and invariants hold, so the graph "
                   "given is not its input (unless the result was rewritten along with its checksums)")
    return None if report.get("ok") else IntegrityError(directory, "damaged")
