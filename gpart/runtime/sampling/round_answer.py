"""What one request round of the sampling protocol (gpart.runtime.sampling.protocol) takes and gives back.

    answer = protocol.round(frontier, keys, (hop, generator))   # a RoundAnswer
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional

import torch

Keys = list[list[Hashable]]  # per kind, the node data keys a round carries
Draw = Optional[tuple]  # (hop, generator[, time per frontier key]) of a sampling round; None: rows alone


@dataclass
class RoundAnswer:
    """The sampled in-edges and the rows a round brought back for its frontier."""

    counts: torch.Tensor  # sampled in-edges per requested node (per draw, when drawn several times), order frontier[order]
    src: torch.Tensor
    eid: torch.Tensor
    order: torch.Tensor
    node_rows: dict[Hashable, torch.Tensor]  # per key: rows of the requested nodes of its kind, in frontier order
    grouped: Optional["GroupedRows"] = None  # a held-first round's rows as pieces (node_rows then empty)


@dataclass
class GroupedRows:
    """The rows of a frontier listed held-first (gpart.runtime.sampling.grouped_rows): rows here of its first
    len(held) nodes, then per key the rows of the others as the owners sent them (in the frontier's order)."""

    held: torch.Tensor
    sent: dict[Hashable, torch.Tensor]
