"""`gpart info --plot FILE.png`: a partition result as a picture, one bar per partition in four panels:
owned nodes, in-edges (stored edges), halo nodes and cut edges (stored edges whose source another partition
owns), each with its mean and its balance (max / mean), the figures the training pace depends on.

matplotlib is optional: imported here only, when a picture is asked for; without it the request is one
InputError line. The cut per partition is counted from the stored topology (the manifest holds only the
total), in chunks of a memory map: memory stays bounded however large the result.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Union

import numpy as np

from gpart.base.errors import InputError, OutputError
from gpart.bytes.crc import CHUNK_BYTES
from gpart.formats.files.manifest import write_bytes_atomic
from gpart.formats.partition.reader import PartitionReader
from gpart.inspection.partition_kind import PartitionResultKind
from gpart.inspection.result import info_kind

PathLike = Union[str, "os.PathLike[str]"]

# the picture formats matplotlib writes without extra libraries, by file suffix
PICTURE_FORMATS = ("png", "svg", "pdf")
PANELS = (("owned", "owned nodes"), ("in_edges", "in-edges (stored edges)"), ("halo", "halo nodes"),
          ("cut_edges", "cut edges (in-edges from other partitions)"))


def cut_edges(reader: PartitionReader, part: int) -> int:
    """Stored edges of `part` whose source is a halo node (local id >= num_owned): its share of the edge cut."""
    owned = int(reader.part_info(part)["num_owned"])
    indices = reader.array(part, "indices")
    step = max(1, CHUNK_BYTES // max(1, indices.dtype.itemsize))
    return sum(int(np.count_nonzero(indices[i:i + step] >= owned)) for i in range(0, indices.shape[0], step))


def part_figures(directory: PathLike) -> dict[str, Any]:
    """Per partition (lists `owned`, `in_edges`, `halo`, `cut_edges`): owned nodes, in-edges, halo nodes and cut
    edges of the result in `directory`, with its totals (`num_nodes`, `num_edges`, `num_parts`) and `method`."""
    with PartitionReader(directory) as reader:
        parts = [reader.part_info(p) for p in range(reader.num_parts)]
        figures = {key: [int(p[field]) for p in parts] for key, field in (("owned", "num_owned"), ("in_edges", "num_edges"),
                                                                              ("halo", "num_halo"))}
        figures["cut_edges"] = [cut_edges(reader, p) for p in range(reader.num_parts)]
        method = reader.manifest.get("method")
        return {"directory": os.fspath(directory), "num_nodes": reader.num_nodes, "num_edges": reader.num_edges,
                "num_parts": reader.num_parts, "method": method if isinstance(method, str) else None, **figures}


def plot_partition(directory: PathLike, out: PathLike) -> dict[str, Any]:
    """Draw the result in `directory` into the picture `out` (.png, .svg or .pdf; written whole or not at all);
    returns the figures drawn (part_figures) with `plot`: the file written."""
    out = Path(out)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in PICTURE_FORMATS:
        raise OutputError(out, f"cannot tell the picture format from the name: use .{', .'.join(PICTURE_FORMATS)}")
    if not out.parent.is_dir():
        raise OutputError(out, f"folder {out.parent} does not exist")
    if not isinstance(info_kind(directory), PartitionResultKind):
        raise InputError(directory, "is not a partition result: a picture is drawn of partition results only")
    try:
        from matplotlib.figure import Figure  # optional: only a picture needs it
    except ImportError:
        raise InputError(None, "a picture needs matplotlib, which is not installed (pip install matplotlib)") from None
    figures = part_figures(directory)
    buf = io.BytesIO()
    _draw(Figure(figsize=(11, 7.5), layout="constrained"), figures).savefig(buf, format=fmt, dpi=110)
    write_bytes_atomic(out, buf.getvalue())
    return figures | {"plot": os.fspath(out)}


def _draw(fig: Any, figures: dict[str, Any]) -> Any:
    parts = np.arange(figures["num_parts"])
    cut = sum(figures["cut_edges"])
    share = cut / figures["num_edges"] if figures["num_edges"] else 0.0
    fig.suptitle(f"{figures['directory']}: {figures['num_nodes']:,} nodes, {figures['num_edges']:,} edges, "
                 f"{figures['num_parts']} parts by {figures['method'] or '?'}; edge cut {cut:,} ({share:.2%})")
    for ax, (key, label) in zip(fig.subplots(2, 2).flat, PANELS):
        values = np.asarray(figures[key], dtype=np.float64)
        mean = values.mean() if values.size else 0.0
        balance = values.max() / mean if mean else 1.0
        ax.bar(parts, values, color="tab:blue" if key != "cut_edges" else "tab:red", width=0.8)
        ax.axhline(mean, color="black", linestyle="--", linewidth=1)  # the mean: balance is the tallest bar over it
        ax.set_title(f"{label}\ntotal {int(values.sum()):,}, mean {mean:,.0f} (dashed), max/mean {balance:.3f}", fontsize=10)
        ax.set_xlabel("partition")
        if parts.size <= 32:
            ax.set_xticks(parts)
    return fig
