"""One partition request: gpart.pipeline.partition.partition_graph's keywords packed at once, so that every
step below it (the homogeneous pass, the typed pass of gpart.pipeline.typed) takes one value."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, Optional, Union

from gpart.base.progress import Progress
from gpart.pipeline.write_plan import DataSpec, PathLike

VerboseLog = Optional[Callable[[str, float, float], None]]


@dataclass(frozen=True)
class PartitionRequest:
    """What to partition into how many parts, how to write it, and the method's own parameters.

    `method`: a registered method or None (gpart.partition_methods.registry.resolve_method);
    `storage`, `halo`: as the result stores them; `force`: replace an existing result;
    `max_memory`: bytes or '2GB' (None: a fraction of the available RAM); `node_data` /
    `edge_data`: NAME -> .npy arrays added to an input path; `add_reverse`: every edge in both
    directions; `scratch_dir`: where a method spills (None: next to the output);
    `method_params`: the method's options (`assignment=` included).
    """

    num_parts: int
    method: Optional[str] = None
    storage: str = "binary"
    halo: int = 0
    force: bool = False
    max_memory: Union[str, int, None] = None
    node_data: DataSpec = None
    edge_data: DataSpec = None
    progress: Optional[Progress] = None
    verbose_log: VerboseLog = None
    add_reverse: bool = False
    scratch_dir: Optional[PathLike] = None
    method_params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, num_parts: int, method: Optional[str], keywords: Mapping[str, Any]) -> "PartitionRequest":
        """The request of partition_graph's keywords: its own options by name, every other keyword a method
        parameter."""
        own = {f.name for f in fields(cls)} - {"num_parts", "method", "method_params"}
        return cls(num_parts, method, **{k: v for k, v in keywords.items() if k in own},
                   method_params={k: v for k, v in keywords.items() if k not in own})
