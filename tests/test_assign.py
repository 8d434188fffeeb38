"""gpart.pipeline.assign: book rules, assignment files, symmetric CSR, METIS options and quality."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.public_data import WALSHAW

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.engines.metis import resolve_algorithm, vertex_weights
from gpart.engines.symmetric import symmetric_csr
from gpart.formats.partition.book import ArrayBook, RuleBook
from gpart.partition_methods.method import Assignment
from gpart.pipeline.assign import assign

REPO = Path(__file__).resolve().parents[1]
WALSHAW_GRAPHS = ["add20", "data", "3elt", "uk", "whitaker3", "crack", "4elt"]


def small_graph(num_nodes: int = 10, **node_data) -> Graph:
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 2, 2], dtype=np.int64)
    dst = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 2, 3], dtype=np.int64)
    graph = Graph(num_nodes, src, dst, dict(node_data), source="g.npz")
    return graph


def check_book_consistent(book) -> None:
    """owned(p)[local(g)] == g for every node, and counts agree with owned()."""
    ids = np.arange(book.num_nodes)
    owner, local = book.owner(ids), book.local(ids)
    for part in range(book.num_parts):
        owned = book.owned(part)
        assert owned.shape[0] == book.counts()[part]
        assert np.all(np.diff(owned) > 0)
        mine = owner == part
        assert np.array_equal(owned[local[mine]], ids[mine])


# ----------------------------------------------------------------- book rules


def test_remainder_book_rule():
    result = assign(small_graph(10), 3, "remainder")
    assert isinstance(result, Assignment) and result.method == "remainder"
    assert isinstance(result.book, RuleBook)
    ids = np.arange(10)
    assert result.book.owner(ids).tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert result.book.local(ids).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert result.book.counts().tolist() == [4, 3, 3]
    check_book_consistent(result.book)


def test_range_book_rule():
    result = assign(small_graph(10), 3, "range")
    ids = np.arange(10)
    assert result.book.owner(ids).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert result.book.local(ids).tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]
    assert result.book.counts().tolist() == [4, 3, 3]
    check_book_consistent(result.book)


@pytest.mark.parametrize("num_nodes,num_parts", [(10, 3), (1000, 7), (5, 5), (17, 1)])
def test_random_book_exactly_balanced_and_seeded(num_nodes, num_parts):
    graph = small_graph(max(num_nodes, 10))
    graph.num_nodes = num_nodes
    a = assign(graph, num_parts, "random", seed=3)
    b = assign(graph, num_parts, "random", seed=3)
    assert isinstance(a.book, ArrayBook)
    counts = a.book.counts()
    base, extra = divmod(num_nodes, num_parts)
    assert sorted(counts.tolist()) == sorted([base + 1] * extra + [base] * (num_parts - extra))
    assert np.array_equal(a.book.owner_array, b.book.owner_array)
    assert a.params["seed"] == 3
    check_book_consistent(a.book)
    if num_nodes >= 100:
        c = assign(graph, num_parts, "random", seed=4)
        assert not np.array_equal(a.book.owner_array, c.book.owner_array)
        # A permutation, not a blocked split: owners are mixed across the id range.
        assert len(set(a.book.owner_array[:50].tolist())) == num_parts


def test_params_are_json_serialisable():
    graph = small_graph(10, train_mask=np.arange(10) % 2 == 0)
    for method in ("metis", "remainder", "range", "random"):
        result = assign(graph, 2, method, balance=["train_mask"] if method == "metis" else ())
        assert json.loads(json.dumps(result.params)) == result.params
        assert result.params["num_parts"] == 2 and result.params["empty_parts"] == []


# ----------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"num_parts": 0}, "at least 1"),
        ({"num_parts": 11}, "exceeds the number of nodes 10"),
        ({"num_parts": 2.0}, "must be an integer"),
        ({"method": "spectral"}, "unknown partition method 'spectral'"),
        ({"method": "metis", "imbalance": 0}, "imbalance tolerance must be a positive"),
        ({"method": "metis", "imbalance": -0.1}, "imbalance tolerance must be a positive"),
        ({"method": "metis", "imbalance": float("nan")}, "imbalance tolerance must be a positive"),
        ({"trials": 0}, "trials must be an integer >= 1"),
        ({"iterations": 0}, "iterations must be an integer >= 1"),
        ({"objective": "edges"}, "unknown METIS objective"),
        ({"algorithm": "multilevel"}, "unknown METIS algorithm"),
        ({"objective": "volume", "algorithm": "recursive"}, "recursive bisection supports only"),
        ({"seed": -1}, "seed must be an integer"),
        ({"method": "assignment"}, "needs an assignment"),
        ({"method": "range", "assignment": np.zeros(10, dtype=np.int64)}, "conflicts with method 'range'"),
        ({"balance": ["nope"]}, "balance array 'nope' is not a node array"),
    ],
)
def test_bad_parameters_name_the_input(kwargs, message):
    kwargs = {"num_parts": 2, **kwargs}
    num_parts = kwargs.pop("num_parts")
    with pytest.raises(InputError) as info:
        assign(small_graph(10), num_parts, **kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("g.npz: ")
    assert "\n" not in str(info.value)


def test_library_default_is_the_cli_default():
    # gpart.pipeline.assign.assign with no method runs what `gpart partition` runs with no --method
    result = assign(small_graph(10), 2)
    assert result.method == "balanced"
    assert result.params["bound"] == 1.10


@pytest.mark.parametrize("requested,options,chosen", [
    (None, {}, "balanced"),  # the default of gpart partition, partition_graph and the distributed runner
    (None, {"objective": "cut", "trials": 1, "balance": ()}, "balanced"),  # options at their defaults choose nothing
    (None, {"trials": 2}, "metis"),  # a METIS-only option given without a method
    (None, {"balance": ["train_mask"]}, "metis"),
    (None, {"trials": 2, "assignment": np.zeros(10, dtype=np.int64)}, "assignment"),  # an assignment replaces METIS
    ("balanced", {"assignment": "owner.npy"}, "assignment"),
    ("metis", {"assignment": "owner.npy"}, "assignment"),
    ("range", {"seed": 3}, "range"),
])
def test_the_registry_chooses_the_method(requested, options, chosen):
    from gpart.partition_methods.registry import resolve_method

    assert resolve_method(requested, options, "g.npz").name == chosen


def test_options_of_another_method_must_hold_their_defaults():
    graph = small_graph(10)
    assert assign(graph, 2, "random", imbalance=None, balance=(), passes=None, threads=1).params["seed"] == 0
    with pytest.raises(InputError, match=r"^g\.npz: --imbalance applies to --method metis, kaminpar, stream only; "
                                         r"it conflicts with method 'random'$"):
        assign(graph, 2, "random", imbalance=0.05)
    with pytest.raises(InputError, match="--threads applies to --method balanced, kaminpar only"):
        assign(graph, 2, "metis", threads=4)
    with pytest.raises(TypeError, match="unknown partition option 'colour'"):
        assign(graph, 2, "random", colour=1)


def test_balance_array_must_be_boolean():
    graph = small_graph(10, score=np.linspace(0, 1, 10), count=np.arange(10), two_d=np.zeros((10, 2), bool),
                        flags=(np.arange(10) % 2).astype(np.int8))
    with pytest.raises(InputError, match="'score' must be boolean or 0/1 integers, got dtype float64"):
        assign(graph, 2, balance=["score"])
    with pytest.raises(InputError, match="'count' must be boolean or 0/1, found other values"):
        assign(graph, 2, balance=["count"])
    with pytest.raises(InputError, match="'two_d' must be 1-D"):
        assign(graph, 2, balance=["two_d"])
    weights, names = vertex_weights(graph, ["flags"], balance_edges=True)  # 0/1 integers are accepted
    assert names == ["nodes", "flags", "in_degree"]
    table = weights.reshape(10, 3)
    assert table[:, 0].tolist() == [1] * 10
    assert table[:, 1].tolist() == (np.arange(10) % 2).tolist()
    assert table[:, 2].tolist() == np.bincount(graph.dst, minlength=10).tolist()


# ----------------------------------------------------------------- assignment input


def test_assignment_array_and_files(tmp_path):
    graph = small_graph(10)
    owner = np.array([0, 0, 1, 1, 2, 2, 0, 1, 2, 0], dtype=np.int16)
    from_array = assign(graph, 3, assignment=owner)
    assert from_array.method == "assignment"
    assert from_array.book.owner(np.arange(10)).tolist() == owner.tolist()
    check_book_consistent(from_array.book)

    npy = tmp_path / "parts.npy"
    np.save(npy, owner.astype(np.int64))
    assert assign(graph, 3, "assignment", assignment=str(npy)).params["assignment"] == str(npy)
    npz = tmp_path / "parts.npz"
    np.savez(npz, owner=owner.astype(np.int32))
    spec = f"{npz}:owner"
    assert assign(graph, 3, assignment=spec).book.owner(np.arange(10)).tolist() == owner.tolist()

    # ParMETIS / KaHIP style: one integer per line; comment lines as in the Walshaw .ptn files.
    text = tmp_path / "parts.txt"
    text.write_text("% written by kaffpa\n" + "\n".join(str(x) for x in owner) + "\n")
    result = assign(graph, 3, assignment=text)
    assert result.book.owner(np.arange(10)).tolist() == owner.tolist()
    assert result.params["assignment"] == str(text)


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("short.npy", np.zeros(9, dtype=np.int64), "has 9 entries but the graph has 10 nodes"),
        ("float.npy", np.zeros(10, dtype=np.float32), "must hold integers, got dtype float32"),
        ("big.npy", np.full(10, 3, dtype=np.int64), "assignment of node 0 is 3, outside [0, 3)"),
        ("neg.npy", np.array([0] * 9 + [-1], dtype=np.int64), "assignment of node 9 is -1, outside [0, 3)"),
        ("2d.npy", np.zeros((10, 1), dtype=np.int64), "must be 1-D"),
        ("objects.npy", np.array([0] * 10, dtype=object), ""),
        ("truncated.npy", "truncate", ""),
        ("frac.txt", "0\n1\n1.5\n" + "0\n" * 7, "line 3 is not an integer"),
        ("nan.txt", "0\nnan\n" + "0\n" * 8, "line 2 is not a number"),
        ("word.txt", "0\nabc\n" + "0\n" * 8, "one integer per line"),
        ("cols.txt", "0 1\n" * 10, "got 2 columns"),
    ],
)
def test_bad_assignment_files(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, np.ndarray):
        np.save(path, content, allow_pickle=True)
    elif content == "truncate":
        np.save(path, np.zeros(10, dtype=np.int64))
        path.write_bytes(path.read_bytes()[:-8])
    else:
        path.write_text(content)
    with pytest.raises(InputError) as info:
        assign(small_graph(10), 3, assignment=path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_missing_assignment_file(tmp_path):
    with pytest.raises(InputError, match="assignment file not found"):
        assign(small_graph(10), 3, assignment=tmp_path / "absent.txt")
    with pytest.raises(InputError, match="absent.npy"):
        assign(small_graph(10), 3, assignment=tmp_path / "absent.npy")


def test_bad_assignment_array_has_one_line_error():
    with pytest.raises(InputError, match=r"^assignment array: assignment has 3 entries"):
        assign(small_graph(10), 3, assignment=np.zeros(3, dtype=np.int64))


# ----------------------------------------------------------------- symmetric CSR


def reference_adjacency(num_nodes, src, dst) -> list[list[int]]:
    neighbours = [set() for _ in range(num_nodes)]
    for u, v in zip(src.tolist(), dst.tolist()):
        if u != v:
            neighbours[u].add(v)
            neighbours[v].add(u)
    return [sorted(s) for s in neighbours]


def csr_lists(xadj, adjncy) -> list[list[int]]:
    return [adjncy[xadj[i]:xadj[i + 1]].tolist() for i in range(xadj.shape[0] - 1)]


def test_symmetric_csr_random_multigraph_with_loops():
    rng = np.random.default_rng(7)
    n = 60
    src = rng.integers(0, n, 400).astype(np.int32)  # narrow input dtype as readers keep it
    dst = rng.integers(0, n, 400).astype(np.int32)
    src[:20] = dst[:20]  # self-loops
    src = np.concatenate([src, src[20:60]])  # duplicates
    dst = np.concatenate([dst, dst[20:60]])
    xadj, adjncy = symmetric_csr(Graph(n + 5, src, dst))  # 5 extra isolated nodes
    assert xadj.dtype == np.int64 and adjncy.dtype == np.int64
    assert xadj.shape == (n + 6,) and xadj[0] == 0 and xadj[-1] == adjncy.shape[0]
    assert csr_lists(xadj, adjncy) == reference_adjacency(n + 5, src, dst)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_symmetric_csr_is_the_same_for_any_thread_count(monkeypatch, threads):
    # Spans of the key build, the repeat mask and compaction, the list starts and the decode; chunks small
    # enough that every span holds several, repeats straddling span bounds.
    import gpart.engines.symmetric as module

    monkeypatch.setattr(module, "KEY_CHUNK", 5)
    rng = np.random.default_rng(threads)
    src, dst = rng.integers(0, 25, 400), rng.integers(0, 25, 400)
    src[:30] = dst[:30]  # self-loops
    xadj, adjncy = symmetric_csr(Graph(27, src, dst), threads=threads)
    assert csr_lists(xadj, adjncy) == reference_adjacency(27, src, dst)


def test_symmetric_csr_chunked_compaction(monkeypatch):
    # Small chunks exercise the chunked key build and in-place duplicate compaction.
    import gpart.engines.symmetric as module

    monkeypatch.setattr(module, "KEY_CHUNK", 7)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 30, 300), rng.integers(0, 30, 300)
    xadj, adjncy = symmetric_csr(Graph(30, src, dst))
    assert csr_lists(xadj, adjncy) == reference_adjacency(30, src, dst)


def test_symmetric_csr_empty_and_memmap(tmp_path):
    xadj, adjncy = symmetric_csr(Graph(4, np.zeros(0, np.int64), np.zeros(0, np.int64)))
    assert xadj.tolist() == [0, 0, 0, 0, 0] and adjncy.shape == (0,)
    loops = np.arange(3, dtype=np.int64)
    xadj, adjncy = symmetric_csr(Graph(3, loops, loops))
    assert xadj.tolist() == [0, 0, 0, 0] and adjncy.shape == (0,)
    path = tmp_path / "src.npy"
    np.save(path, np.array([0, 1, 1], dtype=np.uint32))
    mapped = np.load(path, mmap_mode="r")
    xadj, adjncy = symmetric_csr(Graph(3, mapped, np.array([1, 2, 0], dtype=np.uint32)))
    assert csr_lists(xadj, adjncy) == [[1], [0, 2], [1]]


@settings(max_examples=40, deadline=None)
@given(
    num_nodes=st.integers(1, 25),
    edges=st.lists(st.tuples(st.integers(0, 24), st.integers(0, 24)), max_size=80),
    num_parts=st.integers(1, 8),
    algorithm=st.sampled_from(["recursive", "kway"]),
)
def test_property_symmetric_csr_and_metis(num_nodes, edges, num_parts, algorithm):
    pairs = np.array([(u % num_nodes, v % num_nodes) for u, v in edges], dtype=np.int64).reshape(-1, 2)
    graph = Graph(num_nodes, pairs[:, 0].copy(), pairs[:, 1].copy(), source="h.npz")
    xadj, adjncy = symmetric_csr(graph)
    assert csr_lists(xadj, adjncy) == reference_adjacency(num_nodes, graph.src, graph.dst)
    if num_parts > num_nodes:
        with pytest.raises(InputError, match="exceeds the number of nodes"):
            assign(graph, num_parts)
        return
    # Isolated nodes, loops, duplicates, more parts than components: METIS must still assign everyone.
    result = assign(graph, num_parts, seed=1, algorithm=algorithm)
    assert result.params["algorithm"] == algorithm
    owner = result.book.owner(np.arange(num_nodes))
    assert owner.shape == (num_nodes,) and owner.min() >= 0 and owner.max() < num_parts
    counts = np.bincount(owner, minlength=num_parts)
    assert result.params["empty_parts"] == np.flatnonzero(counts == 0).tolist()
    check_book_consistent(result.book)


# ----------------------------------------------------------------- METIS options


def test_metis_params_recorded_and_reproducible():
    rng = np.random.default_rng(0)
    graph = Graph(300, rng.integers(0, 300, 1500), rng.integers(0, 300, 1500), source="r.npz")
    a = assign(graph, 4, seed=5, imbalance=0.05, trials=2, iterations=4)
    b = assign(graph, 4, seed=5, imbalance=0.05, trials=2, iterations=4)
    assert np.array_equal(a.book.owner_array, b.book.owner_array)
    p = a.params
    assert (p["seed"], p["ufactor"], p["trials"], p["iterations"], p["objective"]) == (5, 50, 2, 4, "cut")
    assert p["algorithm_requested"] == "auto" and p["algorithm"] == "recursive"
    assert p["constraints"] == ["nodes"] and p["symmetric_edges"] > 0
    seeds = {assign(graph, 4, seed=s).book.owner_array.tobytes() for s in range(3)}
    assert len(seeds) == 3  # every seed is a distinct METIS run (METIS itself equates 0 and 1)
    assert assign(graph, 4, algorithm="kway").params["algorithm"] == "kway"
    volume = assign(graph, 4, objective="volume")
    assert volume.params["algorithm"] == "kway" and volume.params["objective"] == "volume"


def test_auto_algorithm_rule():
    for parts in (2, 4, 8, 16, 32, 256):
        assert resolve_algorithm("auto", "cut", parts) == "recursive"
    assert resolve_algorithm("auto", "volume", 2) == "kway"
    assert resolve_algorithm("auto", "cut", 4, num_constraints=2) == "kway"
    assert resolve_algorithm("recursive", "cut", 64) == "recursive"


def test_metis_edge_cases_isolated_nodes_and_one_node_per_part():
    edgeless = Graph(6, np.zeros(0, np.int64), np.zeros(0, np.int64), source="e.npz")
    for parts in (1, 3, 6):
        for algorithm in ("recursive", "kway"):
            result = assign(edgeless, parts, algorithm=algorithm)
            counts = np.bincount(result.book.owner(np.arange(6)), minlength=parts)
            assert counts.sum() == 6
            assert result.params["empty_parts"] == np.flatnonzero(counts == 0).tolist()
    path = Graph(4, np.array([0, 1, 2]), np.array([1, 2, 3]), source="p.npz")
    assert assign(path, 1).book.owner(np.arange(4)).tolist() == [0, 0, 0, 0]


def test_progress_reports_metis_stages():
    stages = []

    class Recorder:
        def stage(self, name, total=None, unit=""):
            stages.append(name)
            from gpart.base.progress import NullProgress

            return NullProgress().stage(name)

    assign(small_graph(10), 2, "metis", progress=Recorder())
    assert stages == ["symmetrise", "metis"]


# ----------------------------------------------------------------- METIS quality (Walshaw)


def read_metis_graph(path: Path) -> Graph:
    from gpart.formats.input.readers import read_graph

    return read_graph(path)


def read_ptn(path: Path) -> np.ndarray:
    with gzip.open(path, "rt") as fh:
        return np.array([int(line) for line in fh if line.strip() and not line.startswith("%")], dtype=np.int64)


def undirected_cut(graph: Graph, owner: np.ndarray) -> int:
    # Walshaw graphs are symmetric: every undirected edge appears in both directions.
    return int(np.count_nonzero(owner[graph.src] != owner[graph.dst])) // 2


@pytest.fixture(scope="module")
def walshaw():
    graphs = {}
    for name in WALSHAW_GRAPHS:
        graph = read_metis_graph(WALSHAW / f"{name}.graph.gz")
        best = undirected_cut(graph, read_ptn(WALSHAW / f"{name}.2.ptn.gz"))
        graphs[name] = (graph, best)
    return graphs


def walshaw_ratios(walshaw, seeds, **options) -> list[float]:
    ratios = []
    for seed in seeds:
        for name, (graph, best) in walshaw.items():
            result = assign(graph, 2, "metis", seed=seed, imbalance=0.05, **options)
            owner = result.book.owner_array
            # The 5% imbalance constraint holds: max part <= 1.05 * n / 2.
            assert np.bincount(owner, minlength=2).max() <= 1.05 * graph.num_nodes / 2, name
            assert result.params["metis_objective_value"] == undirected_cut(graph, owner), name
            ratios.append(undirected_cut(graph, owner) / best)
    return ratios


def geomean(values) -> float:
    return float(np.exp(np.mean(np.log(values))))


def test_walshaw_best_known_cuts_match_source_md(walshaw):
    best = {name: cut for name, (_, cut) in walshaw.items()}
    assert best == {"add20": 536, "data": 181, "3elt": 87, "uk": 18, "whitaker3": 126, "crack": 182, "4elt": 137}


# Geometric mean over 7 graphs x 10 seeds of cut / best-known cut, 2 parts, 5%.
# Measured here (pymetis 2025.2.2): k-way 1.172 (1 trial) and 1.091 (10 trials);
# recursive bisection (auto's choice at 2 parts) 1.234 and 1.107. Bounds sit
# slightly above the measurements.
SEEDS = range(10)


def test_walshaw_kway_quality(walshaw):
    assert geomean(walshaw_ratios(walshaw, SEEDS, algorithm="kway")) <= 1.19
    assert geomean(walshaw_ratios(walshaw, SEEDS, algorithm="kway", trials=10)) <= 1.10


def test_walshaw_default_quality_and_trials_trade(walshaw):
    default = geomean(walshaw_ratios(walshaw, SEEDS))
    ten_trials = geomean(walshaw_ratios(walshaw, SEEDS, trials=10))
    assert default <= 1.25
    assert ten_trials <= 1.12
    assert ten_trials < default - 0.05  # more trials buy a clearly better cut


# ----------------------------------------------------------------- balance (Cora)


@pytest.fixture(scope="module")
def cora():
    path = REPO / "sample_data" / "cora.npz"
    if not path.is_file():
        pytest.skip("sample_data/cora.npz not available")
    from gpart.formats.input.readers import read_graph

    return read_graph(path)


@pytest.mark.parametrize("num_parts", [2, 4, 8])
def test_cora_balance_train_mask(cora, num_parts):
    train = np.asarray(cora.node_data["train_mask"])
    imbalance = 0.03

    def train_spread(result):
        per_part = np.bincount(result.book.owner_array[train], minlength=num_parts)
        return per_part.max() / per_part.mean(), per_part

    balanced = assign(cora, num_parts, balance=["train_mask"], imbalance=imbalance)
    plain = assign(cora, num_parts, "metis", imbalance=imbalance)
    assert balanced.params["constraints"] == ["nodes", "train_mask"] and balanced.params["algorithm"] == "kway"
    spread, per_part = train_spread(balanced)
    # Within tolerance, up to one node of granularity (140 train nodes over P parts).
    assert per_part.max() <= (1 + imbalance) * per_part.mean() + 1
    assert spread < train_spread(plain)[0]
    nodes = np.bincount(balanced.book.owner_array, minlength=num_parts)
    assert nodes.max() <= (1 + imbalance) * nodes.mean() + 1  # node balance still holds


def test_cora_balance_edges(cora):
    in_degree = np.bincount(np.asarray(cora.dst), minlength=cora.num_nodes)

    def edge_spread(result):
        per_part = np.bincount(result.book.owner_array, weights=in_degree, minlength=4)
        return per_part.max() / per_part.mean()

    balanced = assign(cora, 4, balance_edges=True, balance=["train_mask"])
    assert balanced.params["constraints"] == ["nodes", "train_mask", "in_degree"]
    assert balanced.params["balance_edges"] is True
    assert edge_spread(balanced) <= 1.04
    assert edge_spread(balanced) < edge_spread(assign(cora, 4))


# ----------------------------------------------------------------- the balanced default: no fallback cliff


def test_a_narrow_miss_is_repaired_not_sent_to_metis(monkeypatch, tmp_path):
    """Each KaMinPar result is pushed to in-edge balance ~1.12 (the 1.10 bound missed by a little, as R-MAT
    4M/50M did): the repair brings every share within the bound, METIS never runs, and every try in the
    manifest's params.tried carries its seconds, each repair under half its run's (so the default
    spends at most 1.5x its first try on a narrow miss); the lower repaired cut is the one kept."""
    pytest.importorskip("kaminpar")
    from support.synthetic import powerlaw_graph

    import gpart.partition_methods.balanced_method as balanced_module
    from gpart.engines.balance import BALANCE_BOUND
    from gpart.pipeline.partition import partition_graph

    graph = powerlaw_graph(60_000, 600_000, feat_dim=0, seed=1)
    degree = np.bincount(np.asarray(graph.dst), minlength=graph.num_nodes)
    real = balanced_module.kaminpar_partitions

    def narrowly_missing(*args, then, **kwargs):  # KaMinPar's result, pushed before what follows it in the child
        return real(*args, then=lambda i, owner: then(i, push_in_edges(owner.copy(), args[3])), **kwargs)

    def push_in_edges(owner, num_parts):
        # the busiest in-edges of part 1 go to part 0 until part 0 holds 1.12x the mean in-edges
        want = 1.12 * degree.sum() / num_parts - degree[owner == 0].sum()
        donors = np.flatnonzero(owner == 1)
        donors = donors[np.argsort(-degree[donors], kind="stable")]
        owner[donors[:int(np.searchsorted(np.cumsum(degree[donors]), want))]] = 0
        return owner

    def no_metis(*args, **kwargs):
        raise AssertionError("the METIS fallback ran")

    monkeypatch.setattr(balanced_module, "kaminpar_partitions", narrowly_missing)
    monkeypatch.setattr(balanced_module, "metis_book", no_metis)
    partition_graph(graph, tmp_path / "out", 4)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    tried = manifest["params"]["tried"]
    runs = [t for t in tried if "repaired" not in t]
    repairs = {t["weighting"]: t for t in tried if "repaired" in t}
    assert {t["backend"] for t in tried} == {"kaminpar"} and [t["weighting"] for t in runs] == ["even", "in_edges"]
    assert sorted(repairs) == ["even", "in_edges"], tried
    for run in runs:
        assert 1.10 < run["edge_balance"] < 1.15 and run["seconds"] > 0, run
        assert 0 < repairs[run["weighting"]]["seconds"] <= 0.5 * run["seconds"], tried
    kept = min(repairs.values(), key=lambda t: t["edge_cut_ratio"])
    assert manifest["params"]["backend_params"]["weighting"] == kept["weighting"]
    stats = manifest["stats"]
    assert max(stats["node_balance"], stats["edge_balance"]) <= BALANCE_BOUND, stats
    assert stats["edge_balance"] == pytest.approx(kept["edge_balance"], abs=1e-6)
    assert stats["edge_cut_ratio"] == pytest.approx(kept["edge_cut_ratio"], abs=1e-6)


def test_kaminpar_leaves_the_parent_free_to_draw_progress():
    """KaMinPar holds the GIL for its whole run, so it runs in a child process: a thread of the caller (the
    progress display's refresh) keeps running meanwhile, and the result is the same as before (reproducible)."""
    pytest.importorskip("kaminpar")
    import threading
    import time

    from support.synthetic import powerlaw_graph

    from gpart.engines.balance import combined_weights, in_degrees
    from gpart.engines.kaminpar import kaminpar_partition

    graph = powerlaw_graph(60_000, 600_000, feat_dim=0, seed=1)
    xadj, adjncy = symmetric_csr(graph)
    weights = combined_weights(graph.num_nodes, in_degrees(graph))
    ticks, done = [], threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    start = time.perf_counter()
    try:
        owner = kaminpar_partition(xadj, adjncy, weights, 4, seed=0, imbalance=0.03, threads=1)
    finally:
        done.set()
        ticker.join()
    took = time.perf_counter() - start
    during = [t for t in ticks if start < t < start + took]
    assert max(np.diff([start] + during + [start + took])) < max(0.25, took / 4), (took, len(during))
    again = kaminpar_partition(xadj, adjncy, weights, 4, seed=0, imbalance=0.03, threads=1)
    assert np.array_equal(owner, again) and owner.dtype == np.int32 and set(np.unique(owner)) == {0, 1, 2, 3}


@pytest.mark.parametrize("renumbered", [False, True])
@pytest.mark.parametrize("kernel_copies", [True, False])
def test_parhip_files_of_several_weightings_share_their_bytes(monkeypatch, kernel_copies, renumbered):
    """KaMinPar's input, one ParHiP file per weighting: the files after the first copy its header, offsets and
    neighbour ids (inside the kernel, or written again where it cannot copy) and each is byte for byte the file
    written from the arrays alone; a weightless file never copies from a weighted one."""
    from support.synthetic import powerlaw_graph

    import gpart.engines.kaminpar as backend
    from gpart.bytes.copy import KernelCopyUnsupported
    from gpart.formats.files.scratch import ScratchDir

    if not kernel_copies:
        def unsupported(*args):
            raise KernelCopyUnsupported()
        monkeypatch.setattr(backend, "kernel_copy", unsupported)
    xadj, adjncy = symmetric_csr(powerlaw_graph(5_000, 40_000, feat_dim=0, seed=2))
    n = xadj.shape[0] - 1
    weightings = [np.arange(1, n + 1, dtype=np.int64), np.full(n, 3, dtype=np.int64), None]
    order = np.random.default_rng(0).permutation(n) if renumbered else None
    with ScratchDir() as scratch:
        shared = backend._write_parhips(scratch, xadj, adjncy, weightings, order)
        alone = [backend._write_parhip(scratch, f"alone-{i}", xadj, adjncy, w, order) for i, w in enumerate(weightings)]
        for a, b in zip(shared, alone):
            assert a.read_bytes() == b.read_bytes(), a
