"""Separate hosts as Linux network namespaces (issue 25): root only, skipped elsewhere with the reason.

Every test here carries the `multihost` marker (`-m "not multihost"` leaves them
out; `python -m pytest tests/multihost` runs only them). A cluster fixture
checks after its test that nothing of it is left: no namespace, veth, bridge,
mount, directory or process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpart.formats.chunked import write_chunked
from gpart.formats.readers import read_graph
from jobs import undirected_cora
from netns_hosts import Cluster, unavailable

_REASON = unavailable()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "multihost: runs hosts as network namespaces (root, iproute2)")


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


@pytest.fixture(scope="session")
def cora_chunks(tmp_path_factory, cora_graph) -> Path:
    out = tmp_path_factory.mktemp("chunked") / "chunks"
    write_chunked(read_graph(cora_graph), out, 4)
    return out
