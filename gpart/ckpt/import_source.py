"""What a checkpoint import source is: the interface every `gpart import-ckpt --from NAME` implements (SPEC.md 6.6).

A source is one module with one ImportSource subclass, registered in
gpart.ckpt.import_registry. import_checkpoint (gpart.ckpt.foreign_import) hands
it the inputs as given on the command line and the options; the source checks
them, reads the files and writes a sharded gpart checkpoint to `out_dir`,
staged and committed with the manifest last (gpart.formats.files.commit).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from gpart.base.progress import Progress

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ImportOptions:
    """What `gpart import-ckpt` was asked beyond the source; each source reads the options it has a use for.

    Files that carry no shape (WholeGraph's) need num_rows, row_shape and world_size from the caller.
    """

    world_size: Optional[int] = None  # ranks that wrote the files (None: as many as files given)
    name: str = "embedding"  # the embedding's name, where the files do not carry one
    num_rows: Optional[int] = None
    row_shape: Optional[Sequence[int]] = None
    dtype: str = "float32"  # the table's dtype, where the files do not carry one
    optimizer: str = "none"  # the optimizer whose states were saved, where the files do not say
    state_dtype: str = "float32"  # dtype of the moment states, where the files do not carry one
    state_files: Mapping[str, str] = field(default_factory=dict)  # gpart state -> the file name part of its files
    boundaries: Optional[Sequence[int]] = None  # W+1 row boundaries of a range split other than the source's default
    hyper_params: Optional[Mapping[str, Any]] = None  # optimizer hyper-parameters of files that do not record them
    layout: str = "remainder"  # how rows were sharded, for files without ids
    policy: str = "remainder"  # the policy of the output shards, for files with ids


class ImportSource(ABC):
    """One system whose checkpoint files `gpart import-ckpt` reads."""

    name: str  # the --from value

    @abstractmethod
    def run(self, inputs: Sequence[PathLike], out_dir: PathLike, options: ImportOptions, *, force: bool = False,
            progress: Optional[Progress] = None) -> dict[str, Any]:
        """Import the files `inputs` names as a sharded gpart checkpoint in `out_dir`; return its manifest."""
