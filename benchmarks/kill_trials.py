"""Kill gpart writers at random moments and right at every rename; count what goes wrong.

    python benchmarks/kill_trials.py [--trials 50] [--sigterm 10] [--only partition,export-feat,...] [--no-exchange]

For each writer (partition binary and hdf5, export-feat, gather-ckpt, scatter-ckpt)
the script keeps a result at OUT and runs the writer again with --force,
alternating two configurations (so an old and a new result differ in their
files). Every trial SIGKILLs the run:

  rename k/before, k/after   inside the child, os.rename / os.replace and the
                             rename-exchange of gpart.formats.files.commit are wrapped
                             so the process kills itself just before or just
                             after the k-th call (every k of a full run);
  random                     from outside, at a uniform random time between the
                             end of interpreter start-up and the end of an
                             uninterrupted run (both measured first);
  sigterm                    as random, but SIGTERM (--sigterm trials more): the
                             run must clean up after itself, with no next run.

After a SIGKILL it counts:
  looks complete but is not  OUT has its manifest / export JSON, and verify fails
  old result lost            OUT is not intact, and the recovery the next run
                             performs first (sweep / roll-forward) does not make
                             it intact either
  leftovers after next run   hidden `.gpart-` entries left after running the
                             same command again to completion
All three must be 0. The input is the Cora sample (small, so a trial is about
a second on an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import harness
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORA = ROOT / "sample_data" / "cora.npz"

# Runs `gpart ARGS` in this interpreter, SIGKILLing itself at the K-th rename (K > 0), or
# printing the number of renames to stderr as `renames=N` (K == 0).
CHILD = r"""
import os, signal, sys
k, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
calls = [0]
def wrap(fn):
    def counted(*a, **kw):
        calls[0] += 1
        if calls[0] == k and mode == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = fn(*a, **kw)
        if calls[0] == k and mode == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return counted
os.rename, os.replace = wrap(os.rename), wrap(os.replace)
import gpart.formats.files.commit as commit
if os.environ.get("GPART_KILL_TRIALS_NO_EXCHANGE"):  # the two-rename fallback of systems without it
    commit.exchange_names = lambda a, b: False
commit.exchange_names = wrap(commit.exchange_names)
from gpart.cli.main import main
rc = main(args)
if k == 0:
    print(f"renames={calls[0]}", file=sys.stderr)
sys.exit(rc)
"""


class Scenario:
    """A writer, its two alternating configurations, and how to recover and verify its output."""

    def __init__(self, name: str, out: Path, commands: list[list[str]], export_dir: bool = False):
        self.name, self.out, self.commands, self.export_dir = name, out, commands, export_dir

    def looks_complete(self) -> bool:
        if self.export_dir:
            return (self.out / "feat" / "feat.json").exists()  # export-feat's set folder (SPEC.md 5)
        return (self.out / "manifest.json").exists()

    def intact(self) -> bool:
        from gpart.base.errors import GpartError
        from gpart.inspection.result import verify

        if not self.looks_complete():
            return False
        try:
            return bool(verify(self.out)["ok"])
        except GpartError:
            return False

    def recover(self) -> None:
        """What the next run does before anything else."""
        from gpart.formats.filelist.commit_record import recover_exports
        from gpart.formats.files.commit import sweep_stale_work

        if self.export_dir:
            if self.out.is_dir():
                recover_exports(self.out)
                sweep_stale_work(self.out)
        else:
            sweep_stale_work(self.out.parent, self.out.name)

    def leftovers(self) -> list[str]:
        places = [self.out.parent] + ([self.out] if self.export_dir and self.out.is_dir() else [])
        return [f"{p}/{n}" for p in places for n in os.listdir(p) if ".gpart-" in n]


def run_child(args: list[str], k: int = 0, mode: str = "before", timeout: float = 300) -> harness.ChildRun:
    """`gpart ARGS` in a child that kills itself at its k-th rename (`mode` before or after it); k = 0: counts them."""
    return harness.run_child([sys.executable, "-c", CHILD, str(k), mode, *args], timeout=timeout)


def start_child(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, "-1", "none", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_at_random(command: list[str], window: tuple[float, float], sig: int, rng: random.Random) -> int:
    proc = start_child(command)
    time.sleep(rng.uniform(*window))
    proc.send_signal(sig)
    return proc.wait()


def make_checkpoint(directory: Path, n: int = 20000, w: int = 4, dim: int = 32) -> None:
    """A sharded Adam checkpoint written as W ranks would (write_shard per rank, manifest last)."""
    from gpart.formats.checkpoint import entries as ck
    from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
    from gpart.formats.sharding.policies import RemainderPolicy

    rng = np.random.default_rng(0)
    policy = RemainderPolicy(n, w)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {"node_emb": rng.standard_normal((n, dim), dtype=np.float32)}
    for state, spec in ck.OPTIMIZER_STATES["adam"].items():
        dtype = np.int32 if state == "step" else np.float32
        arrays[ck.tensor_name("node_emb", state)] = rng.integers(0, 9, (n, *spec.shape_for((dim,)))).astype(dtype)
    per_rank = [[write_shard(directory, t, r, w, a[policy.global_ids(r)]) for t, a in arrays.items()] for r in range(w)]
    opt = {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "grad_duplicates": "sum"}
    manifest = ck.build_checkpoint_manifest([ck.EmbeddingSpec("node_emb", n, (dim,), "float32", policy)], per_rank, w, opt)
    write_checkpoint_manifest(directory, manifest)


def scenarios(work: Path) -> list[Scenario]:
    run_dir, full = work / "inputs" / "run", work / "inputs" / "full"
    if not full.exists():
        make_checkpoint(run_dir)
        assert run_child(["gather-ckpt", str(run_dir), "-o", str(full), "-q"]).returncode == 0
    cora = str(CORA)
    out = {name: work / name / "out" for name in ("partition", "partition-hdf5", "export-feat", "gather-ckpt", "scatter-ckpt")}
    return [
        Scenario("partition", out["partition"], [["partition", cora, "-p", str(p), "--method", "range", "-o", str(out["partition"]), "--force", "-q"] for p in (2, 3)]),
        Scenario("partition-hdf5", out["partition-hdf5"], [["partition", cora, "-p", str(p), "--method", "random", "--format", "hdf5", "-o", str(out["partition-hdf5"]), "--force", "-q"] for p in (2, 3)]),
        Scenario("export-feat", out["export-feat"], [["export-feat", f"{cora}:feat", "--name", "feat", "-o", str(out["export-feat"]), "--files", str(f), "--force", "-q"] for f in (2, 3)], export_dir=True),
        Scenario("gather-ckpt", out["gather-ckpt"], [["gather-ckpt", str(run_dir), "-o", str(out["gather-ckpt"]), "--force", "-q", *npy] for npy in ([], ["--npy"])]),
        Scenario("scatter-ckpt", out["scatter-ckpt"], [["scatter-ckpt", str(full), "-o", str(out["scatter-ckpt"]), "-w", str(w), "--force", "-q"] for w in (2, 3)]),
    ]


def kill_plan(renames: int, trials: int, rng: random.Random) -> list[tuple[str, int]]:
    """(mode, k) for every rename before and after, then random-time kills up to `trials`."""
    plan = [(mode, k) for k in range(1, renames + 1) for mode in ("before", "after")]
    return plan[:trials] + [("random", 0)] * max(0, trials - len(plan))


def trial(s: Scenario, command: list[str], mode: str, k: int, window: tuple[float, float], rng: random.Random) -> dict[str, bool]:
    if mode == "random":
        kill_at_random(command, window, signal.SIGKILL, rng)
    else:
        run_child(command, k, mode)
    looks = s.looks_complete()
    intact = s.intact()
    bad_complete = looks and not intact
    lost = False
    if not intact:
        s.recover()
        lost = not s.intact()
    finished = run_child(command)
    if finished.returncode != 0:
        raise SystemExit(f"{s.name}: the run after a kill failed: {finished.stderr.strip()}")
    return {"bad_complete": bad_complete, "lost": lost, "leftovers": len(s.leftovers()), "intact_after_kill": intact}


def run_scenario(s: Scenario, trials: int, rng: random.Random, sigterm_trials: int = 0) -> dict[str, object]:
    shutil.rmtree(s.out.parent, ignore_errors=True)
    s.out.parent.mkdir(parents=True)
    assert run_child(s.commands[0]).returncode == 0  # the first old result
    started = time.perf_counter()
    run_child(["--version"])
    startup = time.perf_counter() - started
    started = time.perf_counter()
    counted = run_child(s.commands[1])
    duration = time.perf_counter() - started
    renames = int(counted.stderr.strip().rsplit("renames=", 1)[1])
    window = (min(startup, duration), duration)
    totals = {"trials": 0, "bad_complete": 0, "lost": 0, "leftovers": 0, "killed_at_rename": 0, "killed_at_random": 0, "intact_after_kill": 0}
    for i, (mode, k) in enumerate(kill_plan(renames, trials, rng)):
        result = trial(s, s.commands[i % 2], mode, k, window, rng)
        totals["trials"] += 1
        totals["killed_at_random" if mode == "random" else "killed_at_rename"] += 1
        for key in ("bad_complete", "lost", "leftovers", "intact_after_kill"):
            totals[key] += int(result[key])
    sigterm_leftovers = sigterm_bad = 0
    for i in range(sigterm_trials):
        rc = kill_at_random(s.commands[i % 2], window, signal.SIGTERM, rng)
        sigterm_leftovers += len(s.leftovers())  # right away: no next run to sweep them
        sigterm_bad += int(rc not in (0, 143, -signal.SIGTERM) or (s.looks_complete() and not s.intact()))
    totals.update(renames_per_run=renames, run_seconds=round(duration, 2), startup_seconds=round(startup, 2),
                  sigterm_trials=sigterm_trials, sigterm_leftovers=sigterm_leftovers, sigterm_bad=sigterm_bad)
    return totals


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50, help="trials per writer")
    parser.add_argument("--work", type=Path, default=None, help="work directory (default: a fresh one under /tmp)")
    parser.add_argument("--only", default=None, help="comma-separated writers to run")
    parser.add_argument("--sigterm", type=int, default=10, help="SIGTERM trials per writer (cleanup without a next run)")
    parser.add_argument("--no-exchange", action="store_true", help="swap with the two-rename fallback instead of rename-exchange")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.no_exchange:
        os.environ["GPART_KILL_TRIALS_NO_EXCHANGE"] = "1"
    work = args.work or Path(f"/tmp/gpart-kill-trials-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    wanted = set(args.only.split(",")) if args.only else None
    report = {}
    for s in scenarios(work):
        if wanted and s.name not in wanted:
            continue
        started = time.perf_counter()
        report[s.name] = run_scenario(s, args.trials, rng, args.sigterm)
        report[s.name]["seconds"] = round(time.perf_counter() - started, 1)
        if not args.json:
            r = report[s.name]
            print(f"{s.name:15s} trials {r['trials']:3d} (at renames {r['killed_at_rename']:2d}, random {r['killed_at_random']:2d}; "
                  f"{r['renames_per_run']} renames per run, {r['run_seconds']} s per run)  "
                  f"looks complete but is not {r['bad_complete']}  old lost {r['lost']}  leftovers after next run {r['leftovers']}  "
                  f"[intact right after the kill {r['intact_after_kill']}]  SIGTERM {r['sigterm_trials']}: leftovers {r['sigterm_leftovers']}, "
                  f"bad {r['sigterm_bad']}  {r['seconds']} s", flush=True)
    if args.json:
        print(json.dumps(report, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    bad = sum(r["bad_complete"] + r["lost"] + r["leftovers"] + r["sigterm_leftovers"] + r["sigterm_bad"] for r in report.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
