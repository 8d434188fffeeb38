"""The key each data array gets in a target's layout: the target's defaults, overridden by `--rename NAME=KEY`."""

from __future__ import annotations

from typing import Mapping

from gpart.base.errors import InputError
from gpart.convert.target import ConvertPlan, PathLike
from gpart.formats.partition.typed import HeteroMeta, etype_key


def check_rename(rename: Mapping[str, str], names: set[str], where: PathLike) -> None:
    """Every --rename NAME must be a data array of the result."""
    for name in rename:
        if name not in names:
            raise InputError(where, f"--rename names {name!r}, which is no node or edge array (arrays: {', '.join(sorted(names)) or 'none'})")


def data_keys(names: list[str], rename: Mapping[str, str], defaults: Mapping[str, str], kind: str, where: PathLike) -> dict[str, str]:
    """{array name: the target's key} for one kind (and type) of array; two arrays under one key is an error."""
    keys = {n: rename.get(n, defaults.get(n, n)) for n in names}
    if len(set(keys.values())) < len(keys):
        dup = next(k for k in keys.values() if list(keys.values()).count(k) > 1)
        raise InputError(where, f"two {kind} arrays would both be key {dup!r}; choose other keys with --rename NAME=KEY")
    return keys


def keys_plan(nodes: list[str], edges: list[str], rename: Mapping[str, str], defaults: Mapping[str, str], where: PathLike) -> ConvertPlan:
    """Every node and edge array of a homogeneous result under its key."""
    check_rename(rename, set(nodes) | set(edges), where)
    return ConvertPlan(node=data_keys(nodes, rename, defaults, "node", where), edge=data_keys(edges, rename, defaults, "edge", where))


def typed_keys_plan(meta: HeteroMeta, rename: Mapping[str, str], defaults: Mapping[str, str], where: PathLike) -> ConvertPlan:
    """Every array of a typed result under its key: {"node": {ntype: {name: key}}, "edge": {"s:r:d": {name: key}}}."""
    check_rename(rename, {n for d in meta.node_data.values() for n in d} | {n for d in meta.edge_data.values() for n in d}, where)
    return ConvertPlan(
        node={t: data_keys(list(meta.node_data[t]), rename, defaults, f"{t!r} node", where) for t in meta.node_types},
        edge={etype_key(e): data_keys(list(meta.edge_data[e]), rename, defaults, f"{etype_key(e)!r} edge", where) for e in meta.edge_types},
    )
