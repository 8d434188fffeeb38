"""The public graphs the tests read ship in the repository, intact, and no test reads data outside it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from support.public_data import CORA_RAW, ENRON, FACEBOOK, PUBLIC_DATA, ROAD_NY, WALSHAW

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\S+/\S+) \| (\d+) \| ([0-9a-f]{64}) \|$")


def listed_files() -> dict[str, tuple[int, str]]:
    """file -> (bytes, sha256) from the table of tests/data/public/README.md."""
    rows = (ROW.match(line) for line in (PUBLIC_DATA / "README.md").read_text().splitlines())
    return {m[1]: (int(m[2]), m[3]) for m in rows if m}


def test_every_shipped_file_is_listed_with_its_sha256():
    listed = listed_files()
    shipped = sorted(str(p.relative_to(PUBLIC_DATA)) for p in PUBLIC_DATA.glob("*/*") if p.name != "SOURCE.md")
    assert sorted(listed) == shipped and len(shipped) == 18
    for name, (size, digest) in listed.items():
        data = (PUBLIC_DATA / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest), name
    for path in (CORA_RAW, ENRON, FACEBOOK, ROAD_NY, WALSHAW / "4elt.graph.gz"):
        assert str(path.relative_to(PUBLIC_DATA)) in listed
    assert all((folder / "SOURCE.md").is_file() for folder in PUBLIC_DATA.iterdir() if folder.is_dir())


def test_no_test_reads_data_outside_the_repository():
    """A fresh clone has no ../shared/data: a test that read it would skip there (or fail) and hide it."""
    outside = re.compile(r"""(parents\[2\]|\.parent)\s*/\s*["']shared["']|\.\./shared/data""")
    found = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "tests").rglob("*.py")) if p.name != "test_public_data.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if outside.search(line)]
    assert found == []
