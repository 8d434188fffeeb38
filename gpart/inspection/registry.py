"""The kinds of directory `gpart info` and `gpart verify` understand, in the order they are tried.

Adding a kind: one module with an InspectedKind subclass (gpart.inspection.kind)
and one `register(...)` line below. A kind that recognises a narrower manifest
than another of the same format (a typed partition result) is registered first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from gpart.base.errors import InputError, IntegrityError
from gpart.ckpt.foreign_export import EXPORT_FORMAT
from gpart.convert import CONVERT_FORMAT
from gpart.formats.files.manifest import MANIFEST_NAME, manifest_path, read_json
from gpart.inspection.checkpoint_kind import CheckpointKind
from gpart.inspection.exports_kind import ExportsKind
from gpart.inspection.foreign_kind import ForeignOutputKind
from gpart.inspection.kind import InspectedKind
from gpart.inspection.partition_kind import PartitionResultKind
from gpart.inspection.typed_kind import TypedPartitionKind

PathLike = Union[str, "os.PathLike[str]"]

KINDS: list[InspectedKind] = []


def register(kind: InspectedKind) -> None:
    """Try `kind` after the kinds registered before it."""
    if any(type(k) is type(kind) and k.formats == kind.formats for k in KINDS):
        raise ValueError(f"{type(kind).__name__} for {', '.join(kind.formats)} is registered twice")
    KINDS.append(kind)


def known_formats() -> list[str]:
    """The manifest formats info and verify read, in registration order, each once."""
    return list(dict.fromkeys(f for kind in KINDS for f in kind.formats))


def kind_of(directory: PathLike, missing_is_damage: bool) -> InspectedKind:
    """The kind of `directory`: by its files where it has no manifest and a kind recognises them, else by its
    manifest. A missing or unreadable manifest is an IntegrityError with `missing_is_damage` (verify), an
    InputError otherwise (info); a format no kind reads is an InputError naming the known ones."""
    directory = Path(directory)
    if directory.is_dir() and not (directory / MANIFEST_NAME).exists():
        for kind in KINDS:
            if kind.recognises_unlisted(directory):
                return kind
    path = manifest_path(directory, IntegrityError if missing_is_damage else InputError)
    try:
        manifest = read_json(path)
    except InputError as exc:
        if missing_is_damage:
            raise IntegrityError(exc.path, exc.problem) from None
        raise
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(fmt, str):
        raise (IntegrityError if missing_is_damage else InputError)(path, "manifest has no 'format' string")
    for kind in KINDS:
        if kind.recognises(manifest):
            return kind
    raise InputError(directory / MANIFEST_NAME, f"format {fmt!r} is none that gpart info and verify read ({', '.join(known_formats())})")


register(TypedPartitionKind())
register(PartitionResultKind())
register(CheckpointKind())
register(ExportsKind())
register(ForeignOutputKind(CONVERT_FORMAT))
register(ForeignOutputKind(EXPORT_FORMAT))
