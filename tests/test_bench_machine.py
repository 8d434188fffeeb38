"""benchmarks/harness.machine_line: the one line every whole-job benchmark prints about the machine it ran on."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from harness import machine_line  # noqa: E402 (benchmarks/ is put on sys.path above)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads Linux's /proc and /sys")
def test_the_machine_line_names_the_cpu_cores_cache_and_memory():
    line = machine_line()
    assert line.startswith("machine: ") and "\n" not in line
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((row.split(":", 1)[1].strip() for row in cpuinfo.splitlines() if row.startswith("model name")), "unknown CPU")
    assert model in line
    assert f"{len(os.sched_getaffinity(0))} cores" in line
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    assert f"{memory:.1f} GiB" in line
    caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))
    if caches:  # the highest level's size, as sysfs writes it
        top = max(caches, key=lambda index: int((index / "level").read_text()))
        assert f"last-level cache {(top / 'size').read_text().strip()}" in line
    assert ("no AVX-512" in line) == ("avx512f" not in cpuinfo.split())
