"""The rows of a batch's node list once its hops are done (gpart.runtime.sampling.protocol).

    node_data, y = rows_of(protocol, got, frontier, seeds, n_id)

`got` holds per key the rows the hops' answers carried, one segment per
hop's frontier (the seeds', then each hop's added nodes: a tensor, or
held-first pieces, gpart.runtime.sampling.grouped_rows); the last hop's
added nodes were never asked for, so their rows take one more round. With
one kind (a homogeneous partition) the batch's tensor is allocated once and
every segment is written into it, the last round's rows straight into its
end. Without carried rows (carry_rows off: benchmarks and equivalence
tests) every array takes a round of its own over the whole node list.
"""

from __future__ import annotations

from typing import Hashable, Optional, Protocol

import torch

from gpart.runtime.sampling.disjoint_round import Rounds, keyed_round
from gpart.runtime.sampling.grouped_rows import Segment, batch_rows, place_rows
from gpart.runtime.sampling.row_fetcher import RowFetcher


class RowRounds(Rounds, Protocol):
    """What rows_of needs of the protocol beyond its rounds."""

    rows: RowFetcher
    carry_rows: bool
    held_first: bool


def rows_of(protocol: RowRounds, got: dict[Hashable, list[Segment]], frontier: torch.Tensor, seeds: torch.Tensor,
            n_id: torch.Tensor) -> tuple[dict[Hashable, torch.Tensor], Optional[torch.Tensor]]:
    """(rows of n_id per key, the seeds' labels): the carried rows and one round for the last hop's nodes, or
    (carry_rows off) rounds after sampling."""
    rows, carry = protocol.rows, protocol.carry_rows
    if carry and rows.data_keys and len(rows.kind_keys) == 1 and not protocol.disjoint:
        node_data = _last_rows_into(protocol, got, frontier, int(n_id.numel()))
    elif carry and rows.data_keys:  # the last hop's nodes: one round of requests and rows for every array
        for key, part_rows in keyed_round(protocol, frontier, rows.keys(False), None).node_rows.items():
            got[key].append(part_rows)
        node_data = {key: torch.cat(got[key]) for key in rows.data_keys}
    else:
        node_data = {} if carry else _fetch_after(protocol, n_id)
    y = None
    if rows.label_key is not None:
        y = got[rows.label_key][0] if carry else \
            keyed_round(protocol, seeds, rows.only(rows.label_key, rows.seed_kind), None).node_rows[rows.label_key]
    return node_data, y


def _last_rows_into(protocol: RowRounds, got: dict[Hashable, list[Segment]], frontier: torch.Tensor,
                    total: int) -> dict[Hashable, torch.Tensor]:
    """Per key the rows of the whole node list: the carried ones written in, the last hop's nodes' round written
    straight into the end (one kind: the rows of the last hop, most of the batch's, are not copied again)."""
    rows = protocol.rows
    keys = rows.keys(False)
    (layout,) = rows.layouts(keys)
    last = total - int(frontier.numel())
    out = {key: batch_rows((total, *shape), dtype, protocol.device) for key, (dtype, shape) in zip(keys[0], layout.fields)}
    for key, table in out.items():
        place_rows(rows, key, got[key], table)
    tails = {key: table[last:] for key, table in out.items()}
    answered = protocol.round(frontier, keys, None, into=tails, held_first=protocol.held_first).node_rows
    for key, table in answered.items():
        if table is not tails[key]:  # every row held here: read, not written in place
            tails[key].copy_(table)
    return out


def _fetch_after(protocol: RowRounds, n_id: torch.Tensor) -> dict[Hashable, torch.Tensor]:
    """Rows of every array for the whole node list, after sampling: one round per array (and kind)."""
    rows = protocol.rows
    out = {}
    for kind, keys in enumerate(rows.kind_keys):
        for key in keys:
            out[key] = keyed_round(protocol, n_id, rows.only(key, kind), None).node_rows[key]
    return out
