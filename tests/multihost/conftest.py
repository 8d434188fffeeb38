"""Separate hosts as Linux network namespaces (issue 25): root only, skipped elsewhere with the reason.

Every test here carries the `multihost` marker (`-m "not multihost"` leaves them
out; `python -m pytest tests/multihost` runs only them). A cluster fixture
checks after its test that nothing of it is left: no namespace, veth, bridge,
mount, directory or process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from jobs import undirected_cora
from netns_hosts import Cluster, unavailable

_REASON = unavailable()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "multihost: runs hosts as network namespaces (root, iproute2)")


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.multihost)
            if _REASON:
                item.add_marker(pytest.mark.skip(reason=_REASON))


@pytest.fixture
def cluster2(tmp_path):
    """Two hosts, hostA (serving the rendezvous) and hostB; torn down and checked after the test."""
    with Cluster(2, tmp_path / "logs") as cluster:
        yield cluster
    assert cluster.leftovers() == []


@pytest.fixture(scope="session")
def cora_graph(tmp_path_factory) -> Path:
    return undirected_cora(tmp_path_factory.mktemp("graph") / "cora_undirected.npz")


def _chunk(graph: Path, out: Path) -> Path:
    subprocess.run(["gpart", "chunk", str(graph), "--chunks", "4", "-o", str(out), "-q"], check=True)
    return out


@pytest.fixture(scope="session")
def cora_chunks(tmp_path_factory, cora_graph) -> Path:
    """`gpart chunk` of the undirected Cora: the input every host gets a copy of."""
    return _chunk(cora_graph, tmp_path_factory.mktemp("chunked") / "chunks")


@pytest.fixture(scope="session")
def cora_edge_chunks(tmp_path_factory, cora_graph) -> Path:
    """The same edges without node data: 0.2 MiB to shuffle instead of 16 MiB, for the slow-link test."""
    graph = tmp_path_factory.mktemp("edges") / "cora_edges.npz"
    data = np.load(cora_graph)
    np.savez(graph, src=data["src"], dst=data["dst"], num_nodes=data["num_nodes"])
    return _chunk(graph, graph.parent / "chunks")
