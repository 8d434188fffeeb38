"""The public graphs shipped in tests/data/public (sources, licences and sha256 in its README.md).

Tests name these paths instead of a folder outside the repository, so a fresh
clone runs them; the files are part of the repository, so a missing one is a
broken checkout (tests/test_public_data.py fails), not a reason to skip.
"""

from __future__ import annotations

from pathlib import Path

PUBLIC_DATA = Path(__file__).resolve().parents[1] / "data" / "public"
CORA_RAW = PUBLIC_DATA / "cora" / "cora.npz"  # gnn-benchmark's file; sample_data/make_cora.py converts it
FACEBOOK = PUBLIC_DATA / "facebook-combined" / "facebook_combined.txt.gz"
ENRON = PUBLIC_DATA / "email-enron" / "email-Enron.txt.gz"
ROAD_NY = PUBLIC_DATA / "road-ny" / "NY.gr.xz"
WALSHAW = PUBLIC_DATA / "walshaw-small"
