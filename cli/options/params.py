"""Parsers of command-line values shared by several commands (click callbacks stay in the commands)."""

from __future__ import annotations

from typing import Sequence

from gpart.base.errors import InputError
from gpart.formats.input.checks import check_name


def parse_name_paths(specs: Sequence[str], what: str = "--node-data") -> dict[str, str]:
    """Turn CLI values `NAME=PATH` into a mapping, refusing empty or repeated names."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not value:
            raise InputError(spec, f"{what} expects NAME=PATH.npy")
        check_name(value, name, what)
        if name in out:
            raise InputError(value, f"{what} name {name!r} given twice")
        out[name] = value
    return out
