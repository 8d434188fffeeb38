"""One gather for both partition classes (gpart.runtime.partition.serving), in every trainer layout, and the
Partition interface they implement (gpart.runtime.partition.interface).

Real data: the repository's Cora sample, homogeneous and typed, 2 partitions with halo data. On 4 gloo ranks
(2 partitions x 2 trainers, rank r on partition r // 2) every rank gathers owned, halo and remote ids, alone
and mixed with duplicates, and gets the input's rows; bad ids fail on their rank with the errors of a
single process while the other ranks still get their rows; ranks that loaded another partition than
r // 2 fail on every rank, naming the layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import error_text, run_distributed

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.runtime.partition.interface import PLAIN_EDGE_TYPE, PLAIN_NODE_TYPE, Partition
from gpart.runtime.partition.serving import misplaced_partitions

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, str]:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists() or not HETERO.exists():
        pytest.skip("sample_data/cora.npz or cora_hetero.npz missing")
    root = tmp_path_factory.mktemp("gather")
    partition_graph(CORA, root / "plain", 2, "metis", halo=1)
    partition_graph(CORA, root / "plain_random", 2, "random")
    partition_graph(HETERO, root / "typed", 2, "metis", halo=1)
    return {name: str(root / name) for name in ("plain", "plain_random", "typed")}


def _id_classes(owned: torch.Tensor, halo: torch.Tensor, remote: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Owned, halo and remote ids alone (with duplicates), then all three mixed and shuffled."""
    def pick(ids: torch.Tensor, n: int) -> torch.Tensor:
        return ids[torch.randint(0, ids.numel(), (n,), generator=gen)] if ids.numel() else ids
    classes = {"owned": pick(owned, 120), "halo": pick(halo, 60), "remote": pick(remote, 150)}
    mixed = torch.cat(list(classes.values()))
    classes["mixed"] = mixed[torch.randperm(mixed.numel(), generator=gen)]
    return classes


def _plain_checks(rank: int, path: str, data: dict[str, np.ndarray], gen: torch.Generator) -> dict:
    part = gr.load_partition(path, device="cpu")  # this rank's partition: rank // 2
    out = {"partition": part.rank, "stores_halo": part.halo}
    owner = part.owner(torch.arange(part.num_nodes))
    remote = torch.nonzero(owner != part.rank).reshape(-1)
    remote = remote[~torch.isin(remote, part.halo_ids)]
    out["halo"] = int(part.num_halo)
    for what, ids in _id_classes(part.owned_ids, part.halo_ids, remote, gen).items():
        for key in ("feat", "label"):
            out[f"{what}/{key}"] = bool(np.array_equal(part.gather(key, ids).numpy(), data[key][ids.numpy()]))
        out[f"{what}/count"] = int(ids.numel())
    grid = remote[:12].reshape(3, 4)
    out["grid"] = bool(np.array_equal(part.gather("label", grid).numpy(), data["label"][grid.numpy()]))
    mine = remote[:0] if rank == 1 else remote[:7]  # rank 1 asks for nothing while the others ask
    out["empty_one"] = bool(np.array_equal(part.gather("feat", mine).numpy(), data["feat"][mine.numpy()]))
    # a rank asking for bad ids fails with the single-process error; the others still get their rows
    if rank == 3:
        out["range"] = error_text(lambda: part.gather("feat", torch.tensor([0, part.num_nodes])))
        out["dtype"] = error_text(lambda: part.gather("feat", torch.tensor([1.0])))
    else:
        for turn in ("range", "dtype"):
            out[turn] = bool(np.array_equal(part.gather("feat", remote[:5]).numpy(), data["feat"][remote[:5].numpy()]))
    return out


def _typed_checks(rank: int, path: str, data: dict[str, np.ndarray], gen: torch.Generator) -> dict:
    part = gr.load_partition(path, device="cpu")
    out = {"partition": part.rank, "stores_halo": part.halo_rows}
    paper = part.node_types.index("paper")
    lo, hi = int(part.node_offsets[paper]), int(part.node_offsets[paper + 1])
    erased_halo = part.halo_ids[(part.halo_ids >= lo) & (part.halo_ids < hi)]
    every = torch.arange(part.num_nodes_of("paper"))
    owner = part.owner(every + lo)
    remote = every[(owner != part.rank) & ~torch.isin(every + lo, erased_halo)]
    out["halo"] = int(erased_halo.numel())
    for what, ids in _id_classes(part.owned_ids_of("paper"), erased_halo - lo, remote, gen).items():
        for name in ("feat", "label"):
            got = part.gather(("paper", name), ids).numpy()
            out[f"{what}/{name}"] = bool(np.array_equal(got, data[f"paper/{name}"][ids.numpy()]))
        out[f"{what}/count"] = int(ids.numel())
    out["every"] = bool(np.array_equal(part.gather("paper/label", every).numpy(), data["paper/label"]))
    if rank == 0:
        out["range"] = error_text(lambda: part.gather(("paper", "feat"), torch.tensor([2708])))
    else:
        out["range"] = bool(np.array_equal(part.gather(("paper", "feat"), remote[:3]).numpy(), data["paper/feat"][remote[:3].numpy()]))
    return out


def _four_trainers(rank: int, world_size: int, paths: dict[str, str]) -> dict:
    gen = torch.Generator().manual_seed(7 + rank)
    plain, typed = _arrays(CORA), _arrays(HETERO)
    report = {"plain": _plain_checks(rank, paths["plain"], plain, gen),
              "random": _plain_checks(rank, paths["plain_random"], plain, gen),
              "typed": _typed_checks(rank, paths["typed"], typed, gen)}
    # every rank loads partition 0: ranks 2 and 3 are on the wrong one, and every rank says so
    wrong = gr.load_partition(paths["plain"], 0, device="cpu")
    report["wrong"] = error_text(lambda: wrong.gather("feat", [0], timeout_s=20))
    return report


def test_gather_on_two_partitions_by_two_trainers(results):
    reports = run_distributed(_four_trainers, 4, results, timeout_s=150)
    for rank, report in enumerate(reports):
        for kind in ("plain", "random", "typed"):
            checks = report[kind]
            assert checks["partition"] == rank // 2, (rank, kind)
            for what in ("owned", "remote", "mixed"):
                assert checks[f"{what}/count"] > 0 and checks[f"{what}/feat"] and checks[f"{what}/label"], (rank, kind, what)
            # halo nodes: answered here where their data is stored, by their owners in the random result (no halo data)
            assert checks["halo"] > 0 and checks["halo/count"] > 0 and checks["halo/feat"] and checks["halo/label"], (rank, kind)
            assert checks["stores_halo"] == (kind != "random")
        assert report["plain"]["grid"] and report["plain"]["empty_one"] and report["typed"]["every"]
        for kind in ("plain", "random"):
            if rank == 3:
                assert report[kind]["range"].startswith("IndexError: 1 global ids outside 0..2707 (min 0, max 2708)")
                assert report[kind]["dtype"] == "TypeError: global ids must be integers, got torch.float32"
            else:
                assert report[kind]["range"] is True and report[kind]["dtype"] is True
        if rank == 0:
            assert report["typed"]["range"].startswith("IndexError: typed ids outside 0..2707 of node type 'paper'")
        else:
            assert report["typed"]["range"] is True
        assert report["wrong"].startswith("InputError: ")
        assert ("has 2 partitions but torch.distributed has world size 4 and rank 2 loaded partition 0: with 2 "
                "trainers per partition rank r serves partition r // 2 (2 of 4 ranks loaded another partition") in report["wrong"]


def test_misplaced_partitions_names_the_first_wrong_rank():
    assert misplaced_partitions([0, 0, 1, 1], 2) is None
    assert misplaced_partitions([0, 1, 2], 3) is None
    problem = misplaced_partitions([0, 1, 0, 1], 2)
    assert problem is not None and "rank 1 loaded partition 1" in problem and "(2 of 4 ranks" in problem
    one = misplaced_partitions([1, 0], 2)
    assert one is not None and "with 1 trainer per partition rank r serves partition r // 1" in one


def test_homogeneous_partition_is_the_one_type_case(results):
    part = gr.load_partition(results["plain"], 1, device="cpu")
    assert isinstance(part, Partition) and part.typed is False
    assert part.node_types == [PLAIN_NODE_TYPE] and part.edge_types == [PLAIN_EDGE_TYPE]
    assert part.node_offsets.tolist() == [0, part.num_nodes] and part.edge_offsets.tolist() == [0, part.num_edges]
    assert part.num_nodes_of(PLAIN_NODE_TYPE) == part.num_nodes
    assert torch.equal(part.owned_ids_of(PLAIN_NODE_TYPE), part.owned_ids)
    ids = torch.arange(part.num_nodes)
    kind, rows = part.erased_rows(ids)
    assert not bool(kind.any()) and torch.equal(rows, part.local_rows(ids))
    held = rows >= 0
    assert torch.equal(part.node_data["label"][rows[held]], torch.from_numpy(_arrays(CORA)["label"])[held])
    local = torch.arange(part.num_owned)
    assert [t.tolist() for t in part.owned_rows(local)] == [[0] * part.num_owned, local.tolist()]
    with pytest.raises(InputError, match="unknown node type 'paper'"):
        part.num_nodes_of("paper")


def test_homogeneous_edge_data_through_the_typed_call(tmp_path):
    from gpart.pipeline.partition import partition_graph

    np.save(tmp_path / "weight.npy", np.arange(_arrays(CORA)["src"].size, dtype=np.float32))
    partition_graph(CORA, tmp_path / "parts", 2, "metis", edge_data={"weight": str(tmp_path / "weight.npy")})
    part = gr.load_partition(tmp_path / "parts", 0, device="cpu")
    name = "weight"
    positions = torch.tensor([[0, 3], [5, int(part.indices.numel()) - 1]])
    expect = part.edge_data[name][positions]
    assert torch.equal(part.gather_edges(name, positions), expect)
    assert torch.equal(part.gather_edges((PLAIN_EDGE_TYPE, name), positions), expect)
    with pytest.raises(IndexError, match="edge positions outside"):
        part.gather_edges(name, [int(part.indices.numel())])
    with pytest.raises(KeyError, match="no edge data 'nope'"):
        part.gather_edges("nope", [0])


def test_typed_partition_offers_its_base_explicitly(results):
    part = gr.load_partition(results["typed"], 0, device="cpu")
    assert isinstance(part, Partition) and part.typed is True and part.is_hetero
    base = part.base
    for name in ("directory", "digest", "rank", "num_parts", "num_nodes", "num_edges", "num_owned", "num_halo", "halo",
                 "device", "timeout_s", "book", "node_ids", "indptr", "indices", "edge_ids"):
        assert getattr(part, name) is getattr(base, name), name
    assert torch.equal(part.halo_ids, base.halo_ids)
    assert torch.equal(part.owner(torch.arange(10)), base.owner(torch.arange(10)))
    assert torch.equal(part.owned_ids_of("word"), part.owned_ids("word"))
    with pytest.raises(AttributeError):
        part.node_data_names  # noqa: B018 - the erased partition's names of untyped data are not the typed partition's


def test_node_split_of_a_typed_partition_takes_erased_ids(results):
    part = gr.load_partition(results["typed"], 1, device="cpu")
    paper = torch.arange(part.num_nodes_of("paper")) + int(part.node_offsets[part.node_types.index("paper")])
    mask = torch.from_numpy(_arrays(HETERO)["paper/train_mask"])
    # one process, 2 partitions: the one-line error of every split without torch.distributed, not a crash
    with pytest.raises(InputError, match="has 2 partitions: node_split needs torch.distributed"):
        gr.node_split(part, paper[mask])
    with pytest.raises(InputError, match=r"no node data 'train_mask' loaded \(loaded: paper/feat, "):
        gr.node_split(part, "train_mask")
