"""Named registries: the rooms for what changes (partition methods, conversion targets, checkpoint export
targets and import sources) each list their entries in one of these, in the order they are offered.

An entry is any object with a `name`; the registry keeps registration order (the CLI's choices and
--help list them in it), refuses a name registered twice, and answers an unknown name with a one-line
InputError that lists the known ones.
"""

from __future__ import annotations

from typing import Generic, Optional, Protocol, TypeVar

from gpart.base.errors import InputError


class Named(Protocol):
    name: str


Entry = TypeVar("Entry", bound=Named)


class NamedRegistry(Generic[Entry]):
    """Entries by name, in registration order; `what` names them in errors ("conversion target", ...)."""

    def __init__(self, what: str, unknown: Optional[str] = None):
        self.what = what
        self.unknown = unknown or what  # how the unknown-name error calls them (kept as each command wrote it)
        self.entries: dict[str, Entry] = {}

    def register(self, entry: Entry) -> None:
        """Offer `entry` under its name, after the entries registered before it."""
        if entry.name in self.entries:
            raise ValueError(f"{self.what} {entry.name!r} is registered twice")
        self.entries[entry.name] = entry

    def names(self) -> list[str]:
        """The names, in registration order."""
        return list(self.entries)

    def get(self, name: str, where: Optional[str] = None) -> Entry:
        """The entry registered as `name`; a one-line InputError (about `where`) for any other name."""
        if name not in self.entries:
            raise InputError(where, f"unknown {self.unknown} {name!r} (expected one of {', '.join(self.entries)})")
        return self.entries[name]
