"""The benchmark harness: what every script in benchmarks/ needs besides the code it measures.

Benchmarks run as scripts (`python benchmarks/X.py`), so they import this module as
`harness`, from their own folder. Importing it puts the repository root on sys.path (at the
end, so that the gpart a script measures is still the one PYTHONPATH or the installation
gives): what the benchmarks share with the tests, `tests.support` (synthetic graphs, memory
caps, gloo process groups), is not installed with gpart.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
