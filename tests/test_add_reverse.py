"""`--add-reverse` (SPEC.md 4.7): every edge stored in both directions, copies mapped back to their input edge.

Cora as sample_data stores it holds the 5,429 directed citations; with their reverses (duplicates of an
existing reverse edge collapsing) it has the 10,556 edges of DGL's and PyG's Cora.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run

from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.readers import read_graph
from gpart.formats.input.typed import read_hetero_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.pipeline.reverse_edges import reverse_copy_ids

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
STORAGES = ["binary", "hdf5"]


def stored_edges(out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(source, destination, edge id) of every stored edge, and the edge data rows, over all partitions."""
    with PartitionReader(out) as reader:
        src, dst, ids, data = [], [], [], {name: [] for name in reader.edge_data_names()}
        for p in range(reader.num_parts):
            node_ids, indptr = np.asarray(reader.array(p, "node_ids")), np.asarray(reader.array(p, "indptr"))
            src.append(node_ids[np.asarray(reader.array(p, "indices"))])
            dst.append(node_ids[np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))])
            ids.append(np.asarray(reader.array(p, "edge_ids")))
            for name, rows in data.items():
                rows.append(np.asarray(reader.array(p, f"edge_data/{name}")))
        return np.concatenate(src), np.concatenate(dst), np.concatenate(ids), {k: np.concatenate(v) for k, v in data.items()}


def input_edges(out: Path) -> np.ndarray:
    """The input edge of every stored edge id (SPEC.md 4.7): itself below E, reverse/input_edge above."""
    with PartitionReader(out) as reader:
        num_input = reader.reverse.num_input_edges
        return np.concatenate([np.arange(num_input), np.asarray(reader.reverse_input_edge())])


def test_cora_is_directed_and_gets_dgl_and_pyg_edge_count(capsys, tmp_path):
    g = read_graph(CORA)
    pairs = set(zip(g.src.tolist(), g.dst.tolist()))
    assert g.num_edges == len(pairs) == 5429  # directed citations, no duplicates: --add-reverse has work to do
    assert len(pairs | {(v, u) for u, v in pairs}) == 10556
    out = tmp_path / "parts"
    rc, text, err = run(capsys, "partition", CORA, "--parts", 4, "--add-reverse", "-o", out)
    assert rc == 0, err
    assert "5,127 copies" in text
    m = json.loads((out / "manifest.json").read_text())
    assert m["graph"]["num_edges"] == sum(p["num_edges"] for p in m["partitions"]) == 10556
    assert (m["reverse"]["num_input_edges"], m["reverse"]["num_reverse_edges"]) == (5429, 5127)
    src, dst, _, _ = stored_edges(out)
    stored = set(zip(src.tolist(), dst.tolist()))
    assert len(stored) == 10556 and stored == {(v, u) for u, v in stored}  # every edge in both directions, once
    rc, text, err = run(capsys, "info", out)
    assert rc == 0 and "reverse edges (--add-reverse): 5,127 copies stored after the input's 5,429 edges" in text, text + err


@pytest.mark.parametrize("storage", STORAGES)
def test_cora_edge_ids_map_back_and_copies_carry_input_rows(capsys, tmp_path, storage):
    g = read_graph(CORA)
    weight = np.random.default_rng(0).standard_normal((g.num_edges, 3)).astype(np.float32)
    np.save(tmp_path / "w.npy", weight)
    out = tmp_path / "parts"
    rc, _, err = run(capsys, "partition", CORA, "--parts", 3, "--method", "random", "--add-reverse", "--format", storage,
                     "--edge-data", f"edge_w={tmp_path / 'w.npy'}", "-o", out, "-q")
    assert rc == 0, err
    rc, text, err = run(capsys, "verify", out, "--graph", CORA)
    assert rc == 0 and "reconstruction" in text, text + err
    src, dst, ids, data = stored_edges(out)
    assert np.array_equal(np.sort(ids), np.arange(10556))
    origin = input_edges(out)[ids]
    copy = ids >= g.num_edges
    assert np.array_equal(src[~copy], g.src[origin[~copy]]) and np.array_equal(dst[~copy], g.dst[origin[~copy]])
    assert np.array_equal(src[copy], g.dst[origin[copy]]) and np.array_equal(dst[copy], g.src[origin[copy]])
    assert np.array_equal(data["edge_w"], weight[origin])  # a reverse copy's rows are its input edge's
    with PartitionReader(out) as reader:  # copies in ascending input edge id, each input edge once
        assert np.all(np.diff(np.asarray(reader.reverse_input_edge())) > 0)


def test_bounded_pass_and_bucketed_search_give_the_same_bytes(capsys, tmp_path):
    """Past --max-memory the copies are found bucket by bucket on disk and edges bucketed by owner: same files."""
    outs = []
    for name, extra in (("memory", []), ("bounded", ["--max-memory", "300KB"])):
        out = tmp_path / name
        rc, _, err = run(capsys, "partition", CORA, "--parts", 4, "--method", "remainder", "--add-reverse", "--halo", 1,
                         "-o", out, "-q", *extra)
        assert rc == 0, err
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file())
    assert all((outs[0] / f).read_bytes() == (outs[1] / f).read_bytes() for f in files)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # scratch removed


def test_copies_rule_on_duplicates_self_loops_and_reciprocal_pairs(tmp_path):
    """A copy per distinct pair whose reverse is no input edge, from its first edge; the same in bounded memory."""
    src = np.array([0, 1, 2, 2, 3, 4, 4, 0, 5])
    dst = np.array([1, 0, 3, 3, 3, 5, 5, 2, 4])
    # 0<->1 reciprocal, 2->3 twice (one copy, of edge 2), 3->3 self-loop, 4->5 twice but 5->4 given, 0->2 alone
    with ScratchDir(tmp_path) as scratch:
        for memory in (1 << 30, 64):  # in memory, and bucketed on disk
            assert reverse_copy_ids(src, dst, 6, 6, True, memory, scratch, None).tolist() == [2, 7]
            # into a new relation (two node types): every distinct pair once
            assert reverse_copy_ids(src, dst, 6, 6, False, memory, scratch, None).tolist() == [0, 1, 2, 4, 5, 7, 8]


def test_copies_with_pair_keys_of_every_width():
    """Pair keys packed with their positions, split by their high bits first, or too wide (a stable argsort):
    the same copies, those a plain set computation gives."""
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 62, 40000), rng.integers(0, 62, 40000)
    pairs, copied, new = set(zip(src.tolist(), dst.tolist())), set(), []
    for j, (u, v) in enumerate(zip(src.tolist(), dst.tolist())):
        if (v, u) not in pairs and (v, u) not in copied:
            copied.add((v, u))
            new.append(j)
    for key_space in (62, 1 << 50, 1 << 56, 1 << 57):  # the last: 63-bit keys beside 17-bit positions
        got = reverse_copy_ids(src, dst, key_space, 63, True, 1 << 30, None, None)
        assert got.tolist() == new, key_space


def test_verify_reports_a_damaged_reverse_array(capsys, tmp_path):
    out = tmp_path / "parts"
    assert run(capsys, "partition", CORA, "--parts", 2, "--method", "remainder", "--add-reverse", "-o", out, "-q")[0] == 0
    path = out / "reverse" / "input_edge.bin"
    raw = bytearray(path.read_bytes())
    raw[8:16] = raw[0:8]  # the second copy now names the first one's input edge
    path.write_bytes(bytes(raw))
    rc, text, err = run(capsys, "verify", out)
    assert rc == 1 and "reverse/input_edge" in text + err


def test_distributed_runner_refuses_add_reverse(capsys, tmp_path):
    from click.testing import CliRunner

    from gpart.cli.commands.distributed import cli

    result = CliRunner().invoke(cli, ["partition", str(tmp_path), "--parts", "2", "-o", str(tmp_path / "out"), "--add-reverse"])
    assert result.exit_code == 2 and "not supported by the distributed runner" in result.output
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- typed graphs


def typed_graph(path: Path) -> Path:
    """paper:cites:paper (reciprocal pairs, a duplicate, a self-loop) and author:writes:paper with edge data."""
    rng = np.random.default_rng(1)
    cite_src, cite_dst = rng.integers(0, 40, 120), rng.integers(0, 40, 120)
    cite_src[:3], cite_dst[:3] = [1, 2, 5], [2, 1, 5]
    cite_src[3], cite_dst[3] = 7, 8
    cite_src[4], cite_dst[4] = 7, 8
    w_src, w_dst = rng.integers(0, 15, 60), rng.integers(0, 40, 60)
    np.savez(path, **{
        "paper/num_nodes": np.int64(40), "author/num_nodes": np.int64(15),
        "paper/feat": rng.standard_normal((40, 4)).astype(np.float32), "author/feat": rng.standard_normal((15, 2)),
        "paper:cites:paper/src": cite_src, "paper:cites:paper/dst": cite_dst,
        "paper:cites:paper/edge_w": rng.standard_normal(120).astype(np.float32),
        "author:writes:paper/src": w_src, "author:writes:paper/dst": w_dst,
        "author:writes:paper/edge_feat": rng.standard_normal((60, 3)).astype(np.float16),
    })
    return path


@pytest.mark.parametrize("storage", STORAGES)
def test_typed_graph_gets_rev_relations(capsys, tmp_path, storage):
    graph = typed_graph(tmp_path / "typed.npz")
    out = tmp_path / "parts"
    rc, _, err = run(capsys, "partition", graph, "--parts", 3, "--add-reverse", "--format", storage, "-o", out, "-q")
    assert rc == 0, err
    rc, text, err = run(capsys, "verify", out, "--graph", graph)
    assert rc == 0 and "reconstruction" in text, text + err
    m = json.loads((out / "manifest.json").read_text())
    hg = read_hetero_graph(graph)
    types = {tuple(t["edge_type"]): t for t in m["reverse"]["edge_types"]}
    # a relation within one node type takes its copies; one between two types gets (d, rev_r, s) as DGL and PyG name it
    assert list(types) == [("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "rev_writes", "author")]
    cites, rev = types[("paper", "cites", "paper")], types[("paper", "rev_writes", "author")]
    s, d = hg.edges[("paper", "cites", "paper")]
    pairs = set(zip(s.tolist(), d.tolist()))
    assert cites["reverses"] == ["paper", "cites", "paper"] and cites["num_input_edges"] == 120
    assert cites["num_reverse_edges"] == len({(v, u) for u, v in pairs} - pairs)
    ws, wd = hg.edges[("author", "writes", "paper")]
    assert rev == {"edge_type": ["paper", "rev_writes", "author"], "reverses": ["author", "writes", "paper"],
                   "num_input_edges": 0, "num_reverse_edges": len(set(zip(ws.tolist(), wd.tolist())))}
    assert types[("author", "writes", "paper")]["reverses"] is None
    _check_typed_copies(out, hg)


def _check_typed_copies(out: Path, hg) -> None:
    """Every stored edge of a type with copies maps back through reverse/input_edge to its input edge, reversed,
    with that edge's data rows."""
    with PartitionReader(out) as reader:
        meta, rev = reader.hetero, reader.reverse
        input_edge = np.asarray(reader.reverse_input_edge())
        node_ids = [np.asarray(reader.array(p, "node_ids")) for p in range(reader.num_parts)]
        for (name, start, stop, _), t in zip(rev.blocks(meta), rev.edge_types):
            r = meta.edge_types.index(t.edge_type)
            for p in range(reader.num_parts):
                etype = np.asarray(reader.array(p, "edge_type"))
                typed = np.asarray(reader.array(p, "edge_ids"))[etype == r] - meta.edge_offsets[r]
                indptr = np.asarray(reader.array(p, "indptr"))
                col = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))[etype == r]
                src = node_ids[p][np.asarray(reader.array(p, "indices"))[etype == r]]
                dst = node_ids[p][col]
                copy = typed >= t.num_input_edges
                origin = np.where(copy, input_edge[start:stop][np.maximum(typed - t.num_input_edges, 0)] if stop > start else 0, typed)
                source = t.reverses if t.reverses is not None else t.edge_type
                s_in, d_in = (np.asarray(a) for a in hg.edges[source])
                s_off, d_off = meta.node_offsets[meta.node_types.index(source[0])], meta.node_offsets[meta.node_types.index(source[2])]
                assert np.array_equal(src[copy] - d_off, d_in[origin[copy]]) and np.array_equal(dst[copy] - s_off, s_in[origin[copy]]), name
                for key, rows in hg.edge_data.get(source, {}).items():
                    stored = np.asarray(reader.array(p, f"edge_data/{'.'.join(t.edge_type)}/{key}"))
                    assert np.array_equal(stored, np.asarray(rows)[origin]), (name, key)


def test_typed_bounded_pass_gives_the_same_bytes(capsys, tmp_path):
    graph = typed_graph(tmp_path / "typed.npz")
    outs = []
    for name, extra in (("memory", []), ("bounded", ["--max-memory", "8KB"])):
        out = tmp_path / name
        rc, _, err = run(capsys, "partition", graph, "--parts", 2, "--method", "range", "--add-reverse", "-o", out, "-q", *extra)
        assert rc == 0, err
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert all((outs[0] / f).read_bytes() == (outs[1] / f).read_bytes() for f in files)


def test_typed_rev_name_taken_is_refused(capsys, tmp_path):
    path = tmp_path / "taken.npz"
    np.savez(path, **{"a/num_nodes": np.int64(3), "b/num_nodes": np.int64(2),
                      "a:r:b/src": np.array([0, 1]), "a:r:b/dst": np.array([1, 0]),
                      "b:rev_r:a/src": np.array([0]), "b:rev_r:a/dst": np.array([2])})
    rc, _, err = run(capsys, "partition", path, "--parts", 2, "--add-reverse", "-o", tmp_path / "out")
    assert rc == 2 and "'b:rev_r:a' is in the input" in err
    assert not (tmp_path / "out").exists()
