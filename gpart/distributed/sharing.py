"""Which ranks of a job share an output directory (SPEC.md 10.4): found by looking, not by a flag.

Every rank creates a token file beside its output path (a hidden work name,
`.OUT.gpart-tmp-<pid>-<hex>`, so a killed rank's token is swept like any
stale work), the token names are all-gathered, and every rank looks for every
token beside *its* output path. The answers are all-gathered again, so all
ranks decide from the same matrix: ranks that see each other's tokens share a
directory (one machine's local disk, or a shared file system for all). A
matrix that is not an equivalence (rank r sees rank s's token but s does not
see r's) is refused on every rank: ranks could then commit over each other.

Names rather than host names or real paths: two machines may mount different
disks under the same path, and one machine may reach one disk under two paths.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from gpart.base.errors import GpartError, OutputError
from gpart.collectives.comm import Comm
from gpart.formats.files.names import work_name


def as_output_path(out_dir: Any) -> Path:
    """`out_dir` as formats.commit.check_output_dir names it (absolute; a link to a directory: its target)."""
    out = Path(out_dir).absolute()
    if out.is_symlink() and out.is_dir():
        out = out.resolve()
    return out


def sharing_groups(comm: Comm, out_dir: Any) -> list[list[int]]:
    """The ranks of the job grouped by the output directory they share, each group ascending, the groups
    ordered by their lowest rank; every rank returns the same groups or raises the same error."""
    out = as_output_path(out_dir)
    error, token = None, None
    try:
        token = _make_token(out)
    except GpartError as exc:
        error = exc
    try:
        comm.agree(error, "looking for the ranks that share the output directory")
        assert token is not None
        names = [n.decode() for n in comm.all_gather_bytes(token.name.encode())]
        mine = f".{out.name}.gpart-tmp-"  # a token of another output name in the same parent is not this one
        seen = bytes(int(n.startswith(mine) and (out.parent / n).exists()) for n in names)
        views = np.array([list(v) for v in comm.all_gather_bytes(seen)], dtype=bool)
    finally:
        if token is not None:
            token.unlink(missing_ok=True)
    return groups_from_views(views, out)


def _make_token(out: Path) -> Path:
    token = work_name(out, "tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # as check_output_dir would: the output's parent may be new
        os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise OutputError(out.parent, f"cannot create a file: {exc.strerror or exc}") from None
    return token


def groups_from_views(views: np.ndarray, out_dir: Any) -> list[list[int]]:
    """Groups from `views[r, s]` (rank r sees rank s's token); a one-line OutputError unless the views are an
    equivalence: every rank sees its own token, sharing is mutual, and ranks that share see the same ranks."""
    world = views.shape[0]
    for r in range(world):
        if not views[r, r]:
            raise OutputError(out_dir, f"rank {r} does not see the file it created beside its output directory; "
                                       f"the output's parent directory must be readable by every rank")
        for s in np.flatnonzero(views[r] != views[:, r]).tolist():
            a, b = (r, s) if views[r, s] else (s, r)
            raise OutputError(out_dir, f"rank {a} sees rank {b}'s output directory but rank {b} does not see rank {a}'s "
                                       f"(a file system showing other machines' files late?); give the ranks of one "
                                       f"machine one directory and the ranks of different machines different ones")
        for s in np.flatnonzero(views[r]).tolist():
            if not np.array_equal(views[r], views[s]):
                t = int(np.flatnonzero(views[r] != views[s])[0])
                raise OutputError(out_dir, f"ranks {r} and {s} share an output directory but only one of them shares it "
                                           f"with rank {t}; every rank must see the same ranks in its directory")
    groups: list[list[int]] = []
    for r in range(world):
        if not groups or r not in {m for g in groups for m in g}:
            groups.append(np.flatnonzero(views[r]).tolist())
    return groups
