"""Text input graphs (SPEC.md 3.3-3.5): SNAP edge lists, METIS .graph, DIMACS / PACE .gr.

Text is decompressed and tokenised in large blocks with numpy
(gpart.formats.input.text_tokens), never parsed line by line in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.scratch import AppendedArray, ScratchDir
from gpart.formats.input.text_tokens import GrowingArray, Tokens, fail_negative, growing_ids, parse_ints, parse_or_fail, text_blocks, tokenize

# ---------------------------------------------------------------------------
# SNAP edge lists (SPEC 3.3)
# ---------------------------------------------------------------------------


def read_snap(path: Path, spill: Optional[ScratchDir] = None) -> Graph:
    """A SNAP edge list; its ids parsed into memory, or with `spill` into scratch files there (mapped)."""
    srcs, dsts = growing_ids(spill, "src"), growing_ids(spill, "dst")
    highest = -1
    line0 = 0
    for block in text_blocks(path):
        tok = tokenize(block)
        comment = np.isin(tok.group_first_byte(), (ord("#"), ord("%")))
        short = ~comment & (tok.count < 2)
        if short.any():
            g = int(np.argmax(short))
            t = int(tok.first[g])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: expected 'src dst', found a single token {tok.text(t)!r}")
        keep = ~comment[tok.group]
        rank = tok.rank
        col0 = np.flatnonzero(keep & (rank == 0))
        col1 = np.flatnonzero(keep & (rank == 1))
        if not srcs.size:  # no edge yet: this may be a header line
            _refuse_header(path, tok, col0, col1, line0)
        src = parse_or_fail(path, tok, col0, line0, "source id")
        dst = parse_or_fail(path, tok, col1, line0, "target id")
        fail_negative(path, tok, col0, src, line0)
        fail_negative(path, tok, col1, dst, line0)
        if src.size:
            highest = max(highest, int(src.max()), int(dst.max()))
        srcs.append(src)
        dsts.append(dst)
        line0 += tok.num_lines
    return Graph(highest + 1, srcs.finish(), dsts.finish())


def _refuse_header(path: Path, tok: Tokens, col0: np.ndarray, col1: np.ndarray, line0: int) -> None:
    """The file's first edge line holding no integer ids is a header: say how to read such a file."""
    if not col0.size:
        return
    first = np.array([col0[0], col1[0]])
    if parse_ints(tok, first)[1].all():
        t = int(first[0])
        raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: '{tok.text(t)} {tok.text(t + 1)}' looks like a header, not an "
                               "edge: name the file .csv or .tsv, or pass --header (SPEC.md 3.8)")


# ---------------------------------------------------------------------------
# METIS .graph (SPEC 3.4)
# ---------------------------------------------------------------------------


@dataclass
class MetisHeader:
    n: int
    m: int
    has_size: bool
    has_vwgt: bool
    has_ewgt: bool
    ncon: int
    line: int  # global 0-based line index of the header

    @property
    def prefix(self) -> int:
        """Tokens before the neighbour list on each vertex line."""
        return int(self.has_size) + (self.ncon if self.has_vwgt else 0)


def metis_header(path: Path, tok: Tokens, g: int, line0: int) -> MetisHeader:
    t0, cnt = int(tok.first[g]), int(tok.count[g])
    lineno = line0 + int(tok.line[t0])
    if cnt < 2 or cnt > 4:
        raise InputError(path, f"line {lineno + 1}: METIS header must be 'n m [fmt [ncon]]', found {cnt} fields")
    fmt = tok.text(t0 + 2) if cnt >= 3 else "0"
    if len(fmt) > 3 or any(c not in "01" for c in fmt):
        raise InputError(path, f"line {lineno + 1}: METIS fmt {fmt!r} must be up to three 0/1 digits")
    fmt = fmt.rjust(3, "0")
    which = np.array([t0, t0 + 1] + ([t0 + 3] if cnt == 4 else []))
    vals = parse_or_fail(path, tok, which, line0, "header field")
    n, m = int(vals[0]), int(vals[1])
    if n < 0 or m < 0:
        raise InputError(path, f"line {lineno + 1}: negative vertex or edge count in header")
    has_vwgt = fmt[1] == "1"
    ncon = int(vals[2]) if cnt == 4 else 1
    if cnt == 4 and (ncon < 1 or not has_vwgt):
        raise InputError(path, f"line {lineno + 1}: ncon {ncon} needs vertex weights (fmt x1x) and ncon >= 1")
    return MetisHeader(n, m, fmt[0] == "1", has_vwgt, fmt[2] == "1", ncon, lineno)


def read_metis(path: Path, spill: Optional[ScratchDir] = None) -> Graph:
    """A METIS .graph: its adjacency parsed into memory, or with `spill` appended to scratch files there (mapped), as
    read_snap; vertex sizes and weights (per node) stay in memory."""
    reader = MetisReader(path, spill)
    for block in text_blocks(path):
        reader.block(tokenize(block))
    return reader.finish()


class MetisReader:
    """The state of one METIS read, block by block: the header once seen, the vertex lines counted so far, and where
    the directed edges (and edge weights) are appended."""

    def __init__(self, path: Path, spill: Optional[ScratchDir]):
        self.path, self.spill = path, spill
        self.header: Optional[MetisHeader] = None
        self.srcs, self.dsts = growing_ids(spill, "src"), growing_ids(spill, "dst")
        self.ewgts: Optional[Union[GrowingArray, AppendedArray]] = None
        self.prefixes: list = []
        self.line0 = 0  # global index of the block's first line
        self.vertices_seen = 0  # vertex lines in earlier blocks

    def block(self, tok: Tokens) -> None:
        path, line0 = self.path, self.line0
        comment_group = tok.group_first_byte() == ord("%")
        if self.header is None:
            data_groups = np.flatnonzero(~comment_group)
            if not data_groups.size:
                self.line0 += tok.num_lines
                return
            self.header = metis_header(path, tok, int(data_groups[0]), line0)
            if self.header.has_ewgt:
                self.ewgts = growing_ids(self.spill, "edge_weight")
        header = self.header
        # Vertex lines are all non-comment lines after the header, blank ones included
        # (a blank line is a vertex without neighbours).
        first = max(header.line - line0 + 1, 0)
        comment_lines = tok.line[tok.first[comment_group]]
        comment_lines = comment_lines[comment_lines >= first]
        idx = np.flatnonzero((tok.line >= first) & ~comment_group[tok.group])
        lines = tok.line[idx]
        vertex = self.vertices_seen + (lines - first) - np.searchsorted(comment_lines, lines)
        if vertex.size and int(vertex[-1]) >= header.n:
            t = int(idx[int(np.argmax(vertex >= header.n))])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: more vertex lines than n = {header.n} in the header")
        values = parse_or_fail(path, tok, idx, line0, "entry")
        rank = tok.rank[idx] - header.prefix  # position in the neighbour list, negative for size/weights
        if header.prefix:
            pre = rank < 0
            self.prefixes.append((vertex[pre], rank[pre] + header.prefix, values[pre]))
        nbr = rank >= 0
        if self.ewgts is not None:
            metis_check_pairs(path, tok, idx, rank, line0)
            nbr = nbr & (rank % 2 == 0)
            self.ewgts.append(values[(rank >= 0) & (rank % 2 == 1)])
        neighbours = values[nbr]
        bad = (neighbours < 1) | (neighbours > header.n)
        if bad.any():
            t = int(idx[np.flatnonzero(nbr)[int(np.argmax(bad))]])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: neighbour {tok.text(t)} outside 1..{header.n}")
        self.srcs.append(vertex[nbr])
        self.dsts.append(neighbours - 1)
        self.vertices_seen += max(0, tok.num_lines - first) - int(comment_lines.shape[0])
        self.line0 += tok.num_lines

    def finish(self) -> Graph:
        """The graph, once the counts agree with the header: a short file is refused before anything is mapped (the
        scratch files of a refused read are removed with their ScratchDir)."""
        path, header = self.path, self.header
        if header is None:
            raise InputError(path, "no METIS header line 'n m [fmt [ncon]]' (empty file?)")
        if self.vertices_seen < header.n:
            raise InputError(path, f"header says n = {header.n} vertices but the file has {self.vertices_seen} vertex lines (truncated?)")
        vertex_fields = metis_vertex_fields(path, header, self.prefixes) if header.prefix else {}
        if self.srcs.size != 2 * header.m:
            raise InputError(path, f"header says m = {header.m} edges (2m = {2 * header.m} adjacency entries) but the file lists {self.srcs.size}")
        graph = Graph(header.n, self.srcs.finish(), self.dsts.finish(), node_data=vertex_fields)
        if self.ewgts is not None:
            graph.edge_data["edge_weight"] = self.ewgts.finish()
        return graph


def metis_check_pairs(path: Path, tok: Tokens, idx: np.ndarray, rank: np.ndarray, line0: int) -> None:
    """With edge weights (fmt xx1) every neighbour is followed by its weight."""
    adj = rank >= 0
    counts = np.bincount(tok.group[idx[adj]], minlength=tok.first.shape[0])
    odd = np.flatnonzero(counts % 2 == 1)
    if odd.size:
        t = int(tok.first[int(odd[0])])
        raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: with edge weights (fmt xx1) each neighbour needs a weight")


def metis_vertex_fields(path: Path, header: MetisHeader, prefixes: list) -> dict[str, np.ndarray]:
    """Vertex sizes (node array `vsize`) and weights (`vwgt`, shape [N, ncon]) from line prefixes."""
    table = np.zeros((header.n, header.prefix), dtype=np.int64)
    counts = np.zeros(header.n, dtype=np.int64)
    for vertex, col, values in prefixes:
        table[vertex, col] = values
        counts += np.bincount(vertex, minlength=header.n)
    short = np.flatnonzero(counts < header.prefix)
    if short.size:
        raise InputError(path, f"vertex {int(short[0]) + 1}: its line lacks the {header.prefix} size/weight fields the header's fmt announces")
    fields = {}
    col = 0
    if header.has_size:
        fields["vsize"] = table[:, 0].copy()
        col = 1
    if header.has_vwgt:
        fields["vwgt"] = np.ascontiguousarray(table[:, col : col + header.ncon])
    return fields


# ---------------------------------------------------------------------------
# DIMACS / PACE .gr
# ---------------------------------------------------------------------------


def _dimacs_problem(path: Path, tok: Tokens, lead: np.ndarray, g: int, line0: int) -> tuple[str, int, int]:
    """(kind, n, m) of the problem line `p sp|tw n m`, which line group `g` must be."""
    t0 = int(tok.first[g])
    if lead[g] != ord("p") or tok.text(t0) != "p" or tok.count[g] != 4:
        raise InputError(path, f"line {line0 + int(tok.line[t0]) + 1}: expected the problem line 'p sp|tw n m' first")
    vals = parse_or_fail(path, tok, np.arange(t0 + 2, t0 + 4), line0, "header field")
    n, m = int(vals[0]), int(vals[1])
    if n < 0 or m < 0:
        raise InputError(path, f"line {line0 + int(tok.line[t0]) + 1}: negative counts in the problem line")
    return tok.text(t0 + 1), n, m


def read_dimacs(path: Path, spill: Optional[ScratchDir] = None) -> Graph:
    """DIMACS-9 shortest-path `p sp n m` + `a u v w` arcs, or PACE `p tw n m` + `u v` lines; the arcs parsed into
    memory, or with `spill` appended to scratch files there (mapped), as read_snap."""
    kind: Optional[str] = None
    n = m = 0
    srcs, dsts = growing_ids(spill, "src"), growing_ids(spill, "dst")
    wgts = growing_ids(spill, "edge_weight")
    line0 = 0
    for block in text_blocks(path):
        tok = tokenize(block)
        lead = tok.group_first_byte()
        data = lead != ord("c")
        groups = np.flatnonzero(data)
        if kind is None and groups.size:
            kind, n, m = _dimacs_problem(path, tok, lead, int(groups[0]), line0)
            data[int(groups[0])] = False
        extra = data & (lead == ord("p"))
        if kind is not None and extra.any():
            t = int(tok.first[int(np.argmax(extra))])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: second problem line")
        if kind is None:
            line0 += tok.num_lines
            continue
        arc = kind == "sp"
        width = 4 if arc else 2
        wrong = data & ((tok.count != width) | ((lead == ord("a")) != arc))
        if wrong.any():
            t = int(tok.first[int(np.argmax(wrong))])
            want = "'a u v w'" if arc else "'u v'"
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: expected {want} for problem '{kind}'")
        keep = data[tok.group]
        rank = tok.rank
        off = 1 if arc else 0
        cu = np.flatnonzero(keep & (rank == off))
        cv = np.flatnonzero(keep & (rank == off + 1))
        u = parse_or_fail(path, tok, cu, line0, "node id")
        v = parse_or_fail(path, tok, cv, line0, "node id")
        for which, vals in ((cu, u), (cv, v)):
            fail_negative(path, tok, which, vals, line0, lowest=1)
            over = vals > n
            if over.any():
                t = int(which[int(np.argmax(over))])
                raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: node id {tok.text(t)} > n = {n}")
        srcs.append(u - 1)
        dsts.append(v - 1)
        if arc:
            cw = np.flatnonzero(keep & (rank == 3))
            wgts.append(parse_or_fail(path, tok, cw, line0, "arc weight"))
        line0 += tok.num_lines
    if kind is None:
        raise InputError(path, "no problem line 'p sp|tw n m' (empty file?)")
    if srcs.size != m:  # before anything is mapped: the scratch files of a refused read go with their ScratchDir
        raise InputError(path, f"problem line says {m} {'arcs' if kind == 'sp' else 'edges'} but the file lists {srcs.size}")
    graph = Graph(n, srcs.finish(), dsts.finish())
    if kind == "sp":
        graph.edge_data["edge_weight"] = wgts.finish()
    return graph
