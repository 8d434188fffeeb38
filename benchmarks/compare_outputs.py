"""Byte-identity check for restructures: run a fixed, broad set of gpart commands and digest every output.

    python benchmarks/compare_outputs.py --out DIR [--src CHECKOUT]   # run everything, write DIR/digests.json
    python benchmarks/compare_outputs.py --compare A/digests.json B/digests.json

Every command runs as a subprocess with DIR as its working directory and only relative
paths on its command line, so results do not record where DIR is. Inputs are written
into DIR/inputs first (copies of sample_data/cora.npz, sample_data/cora_hetero.npz and
one SNAP graph; a small typed .npz, feature arrays, torch.save and WholeGraph checkpoint
files made with numpy/torch only, deterministically), then the commands' results go to
DIR/out/... and each command's stdout, stderr and exit status to DIR/cap/<step>.{stdout,stderr,rc}.

Without --src the installed package runs (the `gpart` console script beside this
Python, `python -m gpart.distributed`). With --src CHECKOUT every command runs as
`python -c 'import sys; from <module> import <attr>; sys.argv[0] = "gpart"; sys.exit(<attr>())'`
(the target of [project.scripts] gpart in CHECKOUT/pyproject.toml) with CHECKOUT on
PYTHONPATH. An editable install of gpart elsewhere registers an import finder that
maps `gpart.cli` / `gpart.formats` to *its* tree and runs before the checkout's own
import hook, so a small sitecustomize (in DIR/logs/shim, also on PYTHONPATH) drops
any such finder whose mapping points outside CHECKOUT, and records any gpart module
that is imported from outside CHECKOUT (the run stops with an error if there is one).

DIR/digests.json maps every produced file (relative to DIR) to its sha256; empty
directories are listed as "<dir>/" -> "empty-dir". The only normalisation before
hashing is listed in DIR/normalised.json and in the report (export-feat's stdout
prints the elapsed seconds and throughput; an absolute path of DIR, if any output
held one, would be replaced by <OUT>). DIR/run.json holds the environment and timing
and is not digested, neither is DIR/logs (torchrun's own chatter, with pids and
timestamps).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared" / "data"
DEFAULT_CORA = REPO / "sample_data" / "cora.npz"
DEFAULT_CORA_HETERO = REPO / "sample_data" / "cora_hetero.npz"
DEFAULT_SNAP = SHARED / "facebook-combined" / "facebook_combined.txt.gz"

# The choices the CLI lists today; choices read from --help are added to these (a new one shows as extra digests).
METHODS = ["balanced", "metis", "kaminpar", "stream", "remainder", "range", "random"]
COMMANDS = ["partition", "chunk", "info", "verify", "export-feat", "gather-ckpt", "scatter-ckpt", "import-ckpt",
            "export-ckpt", "convert"]
DIST_COMMANDS = ["gather-ckpt", "partition", "scatter-ckpt"]
CONVERT_TARGETS = ["pyg", "glt", "dgl"]
EXPORT_CKPT_TARGETS = ["wholegraph", "distdgl"]
IMPORT_CKPT_SOURCES = ["wholegraph", "torch"]

NOT_DIGESTED = {"digests.json", "normalised.json", "run.json", "logs"}

SHIM = '''\
"""compare_outputs.py: run gpart from GPART_COMPARE_SRC only (see benchmarks/compare_outputs.py)."""
import atexit
import os
import sys

_ROOT = os.path.realpath(os.environ["GPART_COMPARE_SRC"])


def _inside(path):
    return os.path.realpath(path).startswith(_ROOT + os.sep)


def _foreign_gpart_finder(finder):
    # setuptools' editable finder: a class whose module holds MAPPING {"gpart": "/path/gpart", "gpart.cli": ...}
    mapping = getattr(finder, "MAPPING", None)
    if mapping is None:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
    if not isinstance(mapping, dict):
        return False
    ours = [str(v) for k, v in mapping.items() if k == "gpart" or str(k).startswith("gpart.")]
    return bool(ours) and not all(_inside(v) for v in ours)


sys.meta_path[:] = [f for f in sys.meta_path if not _foreign_gpart_finder(f)]


@atexit.register
def _report_foreign_modules():
    bad = sorted(f"{name} {getattr(m, '__file__', None)}" for name, m in list(sys.modules.items())
                 if name.split(".")[0] == "gpart" and getattr(m, "__file__", None) and not _inside(m.__file__))
    log = os.environ.get("GPART_COMPARE_LEAKS")
    if bad and log:
        with open(log, "a") as fh:
            fh.write("".join(line + "\\n" for line in bad))
'''


# --------------------------------------------------------------------------- running commands


class Runner:
    def __init__(self, out: Path, src: Optional[Path], verbose: bool):
        self.out = out
        self.src = src
        self.verbose = verbose
        self.steps: list[dict] = []
        self.normalised: dict[str, str] = {}
        self.skipped: list[str] = []
        self.env = self._env()
        self.gpart = self._gpart_argv()

    # ---- environment and entry points

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS",
                            "JUPYTER_LINES", "PYTHONSTARTUP", "PYTHONINSPECT")}
        # Fixed terminal geometry and encoding: rich tables and click help wrap at COLUMNS.
        env.update({"COLUMNS": "100", "LINES": "50", "NO_COLOR": "1", "TERM": "dumb", "PYTHONHASHSEED": "0",
                    "PYTHONIOENCODING": "utf-8", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"})
        if self.src is not None:
            shim = self.out / "logs" / "shim"
            shim.mkdir(parents=True, exist_ok=True)
            (shim / "sitecustomize.py").write_text(SHIM)
            env["GPART_COMPARE_SRC"] = str(self.src)
            env["GPART_COMPARE_LEAKS"] = str(self.out / "logs" / "foreign_modules.txt")
            env["PYTHONPATH"] = os.pathsep.join([str(shim), str(self.src)])
        return env

    def _gpart_argv(self) -> list[str]:
        if self.src is None:
            script = Path(sys.executable).parent / "gpart"
            if not script.exists():
                found = shutil.which("gpart")
                if not found:
                    sys.exit("compare_outputs: no `gpart` console script installed (pip install -e .), or give --src")
                script = Path(found)
            return [str(script)]
        target = console_script_target(self.src)
        module, _, attr = target.partition(":")
        code = (f"import sys, functools; import {module} as _m; sys.argv[0] = 'gpart'; "
                f"sys.exit(functools.reduce(getattr, {attr.split('.')!r}, _m)())")
        return [sys.executable, "-c", code]

    def describe_import(self) -> dict:
        """Where `gpart` (and the console script's module) come from, as the commands will see it."""
        if self.src is not None:
            module = console_script_target(self.src).partition(":")[0]
        else:
            module = "gpart"
        code = ("import json, sys, importlib, gpart; importlib.import_module(%r); "
                "print(json.dumps({'gpart': gpart.__file__, 'entry_module': sys.modules[%r].__file__, "
                "'modules': sorted(n + ' ' + str(getattr(m, '__file__', None)) for n, m in sys.modules.items() "
                "if n.split('.')[0] == 'gpart')}))") % (module, module)
        proc = subprocess.run([sys.executable, "-c", code], cwd=self.out, env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"compare_outputs: cannot import gpart: {proc.stderr.strip()}")
        info = json.loads(proc.stdout)
        print(f"gpart.__file__ = {info['gpart']}   ({module}: {info['entry_module']})", flush=True)
        if self.src is not None:
            root = str(self.src) + os.sep
            bad = [m for m in info["modules"] if m.split(" ", 1)[1] != "None" and not os.path.realpath(m.split(" ", 1)[1]).startswith(root)]
            if not os.path.realpath(info["gpart"]).startswith(root) or bad:
                sys.exit(f"compare_outputs: gpart is not imported from {self.src}: {info['gpart']} {bad}")
        return info

    # ---- steps

    def run(self, name: str, args: list, *, prog: str = "gpart", normalise: tuple[str, ...] = (), capture: bool = True,
            timeout: float = 600) -> int:
        """Run one command; its stdout/stderr/rc go to cap/<name>.* (digested unless capture=False)."""
        args = [str(a) for a in args]
        if prog == "gpart":
            argv = self.gpart + args
        elif prog == "dist":
            argv = [sys.executable, "-m", "gpart.distributed"] + args
        elif prog == "torchrun":
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    "-m", "gpart.distributed"] + args
        else:
            raise ValueError(prog)
        env = self.env if prog != "torchrun" else {**self.env, "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        try:
            proc = subprocess.run(argv, cwd=self.out, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = "timeout", exc.stdout or b"", exc.stderr or b""
        seconds = time.perf_counter() - start
        display = " ".join([prog] + args)
        self.steps.append({"step": name, "command": display, "rc": rc, "seconds": round(seconds, 2)})
        if self.verbose:
            print(f"  [{seconds:5.1f}s] rc={rc} {name}: {display}", flush=True)
        base = ("cap" if capture else "logs/cap") + "/" + name
        self._write(base + ".stdout", stdout)
        self._write(base + ".stderr", stderr)
        self._write(base + ".rc", f"{rc}\n".encode())
        for rule in normalise:
            self.normalised[base + ".stdout"] = rule
        if self.src is not None:
            leaks = self.out / "logs" / "foreign_modules.txt"
            if leaks.exists():
                sys.exit(f"compare_outputs: step {name} imported gpart modules from outside {self.src}:\n{leaks.read_text()}")
        return rc if isinstance(rc, int) else 124

    def _write(self, rel: str, data: bytes) -> None:
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def console_script_target(checkout: Path) -> str:
    """`gpart = "module:attr"` of [project.scripts] in CHECKOUT/pyproject.toml."""
    import tomllib

    with open(checkout / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)
    try:
        return project["project"]["scripts"]["gpart"]
    except KeyError:
        sys.exit(f"compare_outputs: {checkout / 'pyproject.toml'} has no [project.scripts] gpart entry")


# --------------------------------------------------------------------------- normalisation

_FLOAT = r"-?[0-9][0-9.eE+\-]*|NaN|Infinity|-Infinity"
NORMALISERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "export-timing": (
        "export-feat summary: elapsed seconds and throughput ('<size> in <S> s (<rate>/s)' in text; "
        "\"seconds\" and \"bytes_per_second\" values in --json) replaced by placeholders",
        lambda b: re.sub(rb'("bytes_per_second": )(' + _FLOAT.encode() + rb')', rb'\1"<RATE>"',
                         re.sub(rb'("seconds": )(' + _FLOAT.encode() + rb')', rb'\1"<SECONDS>"',
                                re.sub(rb" in [0-9]+\.[0-9]+ s \([^)\n]*/s\)", b" in <SECONDS> s (<RATE>/s)", b))),
    ),
}


# --------------------------------------------------------------------------- inputs (numpy / torch only)


def write_npz(path: Path, arrays: dict) -> None:
    """An uncompressed .npz (SPEC.md 3.1) with fixed zip timestamps, keys in the given order: same bytes every run."""
    import numpy as np

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(value), allow_pickle=False)


def make_inputs(out: Path, cora: Path, cora_hetero: Path, snap: Path) -> dict[str, str]:
    import numpy as np
    import torch

    inp = out / "inputs"
    inp.mkdir(parents=True)
    names = {}
    for key, src in (("cora", cora), ("cora_hetero", cora_hetero), ("snap", snap)):
        dst = inp / src.name
        shutil.copyfile(src, dst)
        names[key] = f"inputs/{src.name}"

    rng = np.random.default_rng(20240601)
    # typed graph (SPEC.md 8.1): three node types, four edge types, typed node and edge data
    na, npp, nv = 60, 150, 7
    writes_src = rng.integers(0, na, 300)
    writes_dst = rng.integers(0, npp, 300)
    cites_src = rng.integers(0, npp, 500)
    cites_dst = rng.integers(0, npp, 500)
    pub_paper = np.arange(npp, dtype=np.int64)
    pub_venue = rng.integers(0, nv, npp)
    write_npz(inp / "typed_small.npz", {
        "author/num_nodes": np.int64(na),
        "paper/num_nodes": np.int64(npp),
        "venue/num_nodes": np.int64(nv),
        "author/feat": rng.standard_normal((na, 4)).astype(np.float32),
        "author/age": rng.integers(20, 80, na).astype(np.int16),
        "paper/feat": rng.standard_normal((npp, 8)).astype(np.float32),
        "paper/label": rng.integers(0, 5, npp).astype(np.int64),
        "paper/train_mask": rng.random(npp) < 0.3,
        "author:writes:paper/src": writes_src.astype(np.int64),
        "author:writes:paper/dst": writes_dst.astype(np.int64),
        "author:writes:paper/weight": rng.random((300, 2)).astype(np.float32),
        "paper:written_by:author/src": writes_dst.astype(np.int64),
        "paper:written_by:author/dst": writes_src.astype(np.int64),
        "paper:cites:paper/src": cites_src.astype(np.int32),
        "paper:cites:paper/dst": cites_dst.astype(np.int32),
        "paper:published_in:venue/src": pub_paper,
        "paper:published_in:venue/dst": pub_venue.astype(np.int64),
    })
    names["typed"] = "inputs/typed_small.npz"

    # feature arrays for export-feat, extra node/edge data and assignments for partition (cora: 2708 nodes, 5429 edges)
    feat = rng.standard_normal((1000, 16)).astype(np.float32)
    np.save(inp / "feat.npy", feat)
    np.save(inp / "big.npy", (feat * 1e6).astype(np.float32))  # overflows float16
    np.save(inp / "ids.npy", rng.integers(0, 1 << 20, (777, 3)).astype(np.int64))
    np.save(inp / "scalar_rows.npy", np.arange(513, dtype=np.float64) / 7)
    np.save(inp / "cora_extra_node.npy", rng.standard_normal((2708, 3)).astype(np.float32))
    np.save(inp / "cora_extra_edge.npy", rng.integers(0, 100, 5429).astype(np.int32))
    owner = (np.arange(2708) * 7 // 3 % 4).astype(np.int64)
    np.save(inp / "cora_owner.npy", owner)
    (inp / "cora_owner.txt").write_text("".join(f"{o}\n" for o in owner[::-1]))

    # checkpoint inputs (SPEC.md 6.6)
    ck = inp / "ckpt"
    ck.mkdir()
    # (a) torch flat dicts, rows in remainder local order, no ids: Adam states, two embeddings
    w = 3
    tables = {"node_emb": (101, (8,), np.float32), "item_emb": (37, (4,), np.float16)}
    full = {}
    for emb, (n, shape, dt) in tables.items():
        full[emb] = rng.standard_normal((n, *shape)).astype(dt)
        full[emb + ".step"] = rng.integers(0, 1000, n).astype(np.int32)
        full[emb + ".exp_avg"] = rng.standard_normal((n, *shape)).astype(np.float32)
        full[emb + ".exp_avg_sq"] = rng.random((n, *shape)).astype(np.float32)
    for r in range(w):
        torch.save({k: torch.from_numpy(np.ascontiguousarray(v[r::w])) for k, v in full.items()}, ck / f"adam_{r}.pt")
    # (b) DistDGL sparse-optimizer save dicts with ids (Adagrad) plus table files, random row placement
    n, w, d = 89, 2, 5
    perm = rng.permutation(n).astype(np.int64)
    table = rng.standard_normal((n, d)).astype(np.float32)
    ssum = rng.random((n, d)).astype(np.float32)
    for r, ids in enumerate(np.array_split(perm, w)):
        t = torch.from_numpy(ids)
        torch.save({"params": {"_lr": 0.05, "_eps": 1e-10, "world_size": w},
                    "emb_states": {"ent": {"ids": t, "states": {"node~_N~ent_sum": torch.from_numpy(ssum[ids])}}}},
                   ck / f"dgl_opt_{r}")
        torch.save({"ent": torch.from_numpy(table[ids]), "ent.ids": t}, ck / f"dgl_emb_{r}.pt")
    # (c) DistDGL Adam with float step counts, rank order as given (no {rank} pattern)
    n, w, d = 40, 2, 3
    for r in range(w):
        ids = np.arange(r, n, w, dtype=np.int64)
        states = {"node~_N~u_step": torch.from_numpy(rng.integers(0, 900, ids.size).astype(np.float32)),
                  "node~_N~u_mem": torch.from_numpy(rng.standard_normal((ids.size, d)).astype(np.float32)),
                  "node~_N~u_power": torch.from_numpy(rng.random((ids.size, d)).astype(np.float32))}
        torch.save({"emb_states": {"u": {"ids": torch.from_numpy(ids), "states": states}},
                    "params": {"world_size": w, "_lr": 0.01, "_eps": 1e-08, "_beta1": 0.9, "_beta2": 0.999}}, ck / f"adamdgl_{r}")
        torch.save({"u": torch.from_numpy(rng.standard_normal((ids.size, d)).astype(np.float32)), "u.ids": torch.from_numpy(ids)},
                   ck / f"adamdgl_emb_{r}.pt")
    # (d) WholeGraph raw files: LazyAdam, 53 x 6 float32 over 4 ranks (WholeGraph's split), and a float16 table alone
    wg = inp / "wg"
    wg.mkdir()
    for prefix, n, d, dt, states in (("lazy", 53, 6, np.float32, ("m", "v", "beta12t")), ("half", 30, 4, np.float16, ())):
        w = 4
        bounds = wholegraph_split(n, w)
        data = {"embedding_tensor": rng.standard_normal((n, d)).astype(dt)}
        for s in states:
            data[s] = (rng.random((n, 2)) if s == "beta12t" else rng.standard_normal((n, d))).astype(np.float32)
        for key, arr in data.items():
            for r in range(w):
                np.ascontiguousarray(arr[bounds[r]:bounds[r + 1]]).tofile(wg / f"{prefix}_{key}_part_{r}_of_{w}")
    return names


def wholegraph_split(n: int, w: int) -> list[int]:
    """WholeGraph's default range split (SPEC.md section 2): ceil(n / w) rows per rank, the last ranks short."""
    per = -(-n // w)
    return [min(r * per, n) for r in range(w + 1)]


# --------------------------------------------------------------------------- the command set


def help_choices(runner: Runner, command: list[str], option: str, prog: str = "gpart") -> list[str]:
    """The [a|b|c] choice list of `option` in the help text captured for `command`."""
    path = runner.out / "cap" / ("help" if prog == "gpart" else "dist-help") / ("_".join(command) or "main")
    text = (path.parent / (path.name + ".stdout")).read_bytes().decode("utf-8", "replace")
    m = re.search(re.escape(option) + r"\s+\[([^\]]+)\]", text)
    return [c.strip() for c in m.group(1).replace("\n", " ").split("|")] if m else []


def listed_commands(runner: Runner, name: str) -> list[str]:
    text = (runner.out / "cap" / name).read_bytes().decode("utf-8", "replace")
    section = text.split("Commands:", 1)[1] if "Commands:" in text else ""
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z0-9-]*)\s", section, re.M)]


def with_extras(fixed: list[str], listed: list[str], what: str, runner: Runner) -> list[str]:
    extra = [c for c in listed if c not in fixed]
    missing = [c for c in fixed if listed and c not in listed]
    if extra or missing:
        print(f"  note: {what}: help lists {listed}; fixed list {fixed}", flush=True)
    return fixed + sorted(extra)


def run_all(runner: Runner, names: dict[str, str], distributed: bool) -> None:
    r = runner.run
    cora, hetero, snap, typed = names["cora"], names["cora_hetero"], names["snap"], names["typed"]

    # ---- help texts
    print("help texts", flush=True)
    r("help/main", ["--help"])
    r("help/main_short", ["-h"])
    r("help/no_args", [])
    r("help/version", ["--version"])
    r("help/unknown_command", ["no-such-command"])
    commands = with_extras(COMMANDS, listed_commands(runner, "help/main.stdout"), "gpart commands", runner)
    for c in commands:
        r(f"help/{c}", [c, "--help"])
    r("dist-help/main", ["--help"], prog="dist")
    dist_commands = with_extras(DIST_COMMANDS, listed_commands(runner, "dist-help/main.stdout"), "gpart.distributed commands", runner)
    for c in dist_commands:
        r(f"dist-help/{c}", [c, "--help"], prog="dist")
    methods = with_extras(METHODS, help_choices(runner, ["partition"], "--method"), "partition --method", runner)
    targets = with_extras(CONVERT_TARGETS, help_choices(runner, ["convert"], "--to"), "convert --to", runner)
    with_extras(EXPORT_CKPT_TARGETS, help_choices(runner, ["export-ckpt"], "--to"), "export-ckpt --to", runner)
    with_extras(IMPORT_CKPT_SOURCES, help_choices(runner, ["import-ckpt"], "--from"), "import-ckpt --from", runner)

    parts: list[tuple[str, str]] = []  # (result dir, the input it was made from)

    def part(name: str, src: str, *extra, graph_check: bool = False, json_out: bool = False) -> str:
        out = f"out/partition/{name}"
        rc = r(f"partition/{name}", ["partition", src, "-o", out, *extra] + (["--json"] if json_out else []))
        if rc == 0:
            parts.append((out, src))
        return out

    # ---- partition: every method, binary and hdf5, halo 0 and 1, on Cora and the SNAP graph
    print("partition", flush=True)
    for m in methods:
        part(f"cora-{m}-binary", cora, "-p", 4, "--method", m)
        part(f"cora-{m}-hdf5-halo1", cora, "-p", 4, "--method", m, "--format", "hdf5", "--halo", 1)
        part(f"snap-{m}-binary", snap, "-p", 4, "--method", m, json_out=True)
    for m in ("metis", "remainder", "stream"):
        part(f"cora-{m}-binary-halo1", cora, "-p", 3, "--method", m, "--halo", 1)
        part(f"cora-{m}-hdf5", cora, "-p", 3, "--method", m, "--format", "hdf5")
        part(f"snap-{m}-hdf5-halo1", snap, "-p", 3, "--method", m, "--format", "hdf5", "--halo", 1)
    part("cora-default", cora, "-p", 2)
    part("cora-p1-range", cora, "-p", 1, "--method", "range")
    # method options
    part("cora-metis-volume-kway", cora, "-p", 5, "--objective", "volume", "--algorithm", "kway", "--trials", 3,
         "--iterations", 5, "--seed", 3)
    part("cora-metis-recursive-balance", cora, "-p", 4, "--method", "metis", "--algorithm", "recursive",
         "--balance", "train_mask", "--balance-edges", "--imbalance", 0.05)
    part("cora-kaminpar-balance-edges", cora, "-p", 4, "--method", "kaminpar", "--balance-edges", "--seed", 5)
    part("cora-balanced-seed", cora, "-p", 6, "--method", "balanced", "--seed", 11, json_out=True)
    part("cora-stream-passes2", cora, "-p", 4, "--method", "stream", "--passes", 2, "--imbalance", 0.1)
    part("cora-random-seed7", cora, "-p", 5, "--method", "random", "--seed", 7)
    part("cora-assignment-npy", cora, "-p", 4, "--assignment", "inputs/cora_owner.npy")
    part("cora-assignment-txt-hdf5", cora, "-p", 4, "--assignment", "inputs/cora_owner.txt", "--format", "hdf5")
    part("cora-extra-data", cora, "-p", 3, "--method", "range", "--node-data", "extra=inputs/cora_extra_node.npy",
         "--edge-data", "weight=inputs/cora_extra_edge.npy", "--halo", 1)
    part("cora-quiet", cora, "-p", 2, "--method", "remainder", "-q")
    # bounded memory: edges bucketed on disk (the in-memory estimate is far above these limits)
    part("snap-stream-maxmem", snap, "-p", 4, "--method", "stream", "--max-memory", "3MB")
    part("snap-random-hdf5-halo1-maxmem", snap, "-p", 3, "--method", "random", "--format", "hdf5", "--halo", 1,
         "--max-memory", "3MiB")
    part("cora-range-halo1-maxmem", cora, "-p", 4, "--method", "range", "--halo", 1, "--max-memory", "40MB")
    part("snap-metis-maxmem-refused", snap, "-p", 4, "--method", "metis", "--max-memory", "1MB")
    part("snap-stream-maxmem-too-small", snap, "-p", 4, "--method", "stream", "--max-memory", "100KB")
    # typed (heterogeneous) inputs
    for m in methods:
        part(f"typed-{m}-binary", typed, "-p", 3, "--method", m)
    part("typed-remainder-hdf5-halo1", typed, "-p", 2, "--method", "remainder", "--format", "hdf5", "--halo", 1)
    part("typed-metis-binary-halo1", typed, "-p", 3, "--method", "metis", "--halo", 1)
    part("typed-random-maxmem", typed, "-p", 3, "--method", "random", "--max-memory", "300KB", "--halo", 1)
    part("cora_hetero-balanced", hetero, "-p", 4)
    part("cora_hetero-range-hdf5-halo1", hetero, "-p", 3, "--method", "range", "--format", "hdf5", "--halo", 1)
    part("cora_hetero-random-json", hetero, "-p", 2, "--method", "random", json_out=True)
    # input errors are behaviour too (one line on stderr, an exit status, nothing written)
    r("partition/error-parts-too-many", ["partition", typed, "-p", 100000, "-o", "out/partition/err1", "--method", "range"])
    r("partition/error-missing-input", ["partition", "inputs/none.npz", "-p", 2, "-o", "out/partition/err2"])
    r("partition/error-existing-out", ["partition", cora, "-p", 2, "-o", "out/partition/cora-default"])
    part("cora-default", cora, "-p", 3, "--method", "range", "--force")

    # ---- info and verify on every partition result
    print("info / verify", flush=True)
    for out, src in parts:
        name = Path(out).name
        r(f"info/{name}.json", ["info", out, "--json"])
        r(f"verify/{name}.graph", ["verify", out, "--graph", src])
    for out in ("out/partition/cora-metis-binary", "out/partition/typed-range-binary", "out/partition/cora_hetero-balanced"):
        name = Path(out).name
        r(f"info/{name}.text", ["info", out])
        r(f"verify/{name}.plain", ["verify", out])
        r(f"verify/{name}.json", ["verify", out, "--json"])
    r("verify/cora-extra-data.node-data", ["verify", "out/partition/cora-extra-data", "--graph", cora,
                                           "--node-data", "extra=inputs/cora_extra_node.npy",
                                           "--edge-data", "weight=inputs/cora_extra_edge.npy"])
    r("verify/wrong-graph", ["verify", "out/partition/cora-range-binary", "--graph", snap])
    r("verify/not-a-result", ["verify", "inputs"])

    # ---- export-feat
    print("export-feat", flush=True)
    ex = "out/export"
    t = ("export-timing",)
    r("export-feat/plain", ["export-feat", "inputs/feat.npy", "-o", f"{ex}/plain", "--files", 3], normalise=t)
    r("export-feat/plain-json", ["export-feat", "inputs/feat.npy", "-o", f"{ex}/plain-json", "--json"], normalise=t)
    for dt in ("float16", "bfloat16", "float64", "float32"):
        r(f"export-feat/dtype-{dt}", ["export-feat", "inputs/feat.npy", "-o", f"{ex}/dtypes", "--dtype", dt,
                                      "--name", f"feat_{dt}", "--files", 2, "-q"])
    r("export-feat/int32", ["export-feat", "inputs/ids.npy", "-o", f"{ex}/ints", "--dtype", "int32", "--files", 4], normalise=t)
    r("export-feat/scalar-rows", ["export-feat", "inputs/scalar_rows.npy", "-o", f"{ex}/ints", "--files", 5, "--dtype", "float32"],
      normalise=t)
    r("export-feat/overflow-refused", ["export-feat", "inputs/big.npy", "-o", f"{ex}/overflow", "--dtype", "float16"])
    r("export-feat/overflow-allowed", ["export-feat", "inputs/big.npy", "-o", f"{ex}/overflow", "--dtype", "float16",
                                       "--allow-overflow", "-q"])
    r("export-feat/npz-key", ["export-feat", f"{cora}:feat", "-o", f"{ex}/npz", "--name", "x", "--files", 4], normalise=t)
    r("export-feat/npz-label", ["export-feat", f"{cora}:label", "-o", f"{ex}/npz", "--dtype", "int32", "-q"])
    r("export-feat/partition-all", ["export-feat", "out/partition/cora-metis-binary", "-o", f"{ex}/parts-all", "--files", 2],
      normalise=t)
    r("export-feat/partition-hdf5-label", ["export-feat", "out/partition/cora-random-hdf5-halo1", "-o", f"{ex}/parts-label",
                                           "--name", "label", "--json"], normalise=t)
    r("export-feat/typed-paper-feat", ["export-feat", "out/partition/typed-metis-binary", "--node-type", "paper", "--name", "feat",
                                       "-o", f"{ex}/typed-paper"], normalise=t)
    r("export-feat/typed-all", ["export-feat", "out/partition/cora_hetero-range-hdf5-halo1", "-o", f"{ex}/typed-all",
                                "--dtype", "float16", "-q"])
    r("export-feat/typed-author", ["export-feat", "out/partition/typed-random-binary", "--node-type", "author", "-o",
                                   f"{ex}/typed-author", "--json"], normalise=t)
    r("export-feat/csr-cora", ["export-feat", cora, "--csr", "-o", f"{ex}/csr-cora", "--files", 2], normalise=t)
    r("export-feat/csr-snap-rev-dedup", ["export-feat", snap, "--csr", "--add-reverse", "--dedup", "--name", "g",
                                         "-o", f"{ex}/csr-snap", "--files", 3, "-q"])
    r("export-feat/csr-typed", ["export-feat", typed, "--csr", "-o", f"{ex}/csr-typed", "-q"])
    r("export-feat/csr-dtype-refused", ["export-feat", cora, "--csr", "--dtype", "float16", "-o", f"{ex}/csr-bad"])
    r("export-feat/force", ["export-feat", "inputs/feat.npy", "-o", f"{ex}/plain", "--files", 2, "--force", "-q"])

    # ---- convert to every target
    print("convert", flush=True)
    cv = "out/convert"
    for to in targets:
        r(f"convert/{to}-cora-metis", ["convert", "out/partition/cora-metis-binary", "--to", to, "-o", f"{cv}/{to}-cora-metis"])
        r(f"convert/{to}-cora-hdf5-halo1", ["convert", "out/partition/cora-random-hdf5-halo1", "--to", to,
                                            "-o", f"{cv}/{to}-cora-hdf5-halo1", "--json"])
        r(f"convert/{to}-snap", ["convert", "out/partition/snap-remainder-binary", "--to", to, "-o", f"{cv}/{to}-snap", "-q"])
        r(f"convert/{to}-typed", ["convert", "out/partition/typed-range-binary", "--to", to, "-o", f"{cv}/{to}-typed"])
        r(f"convert/{to}-cora_hetero", ["convert", "out/partition/cora_hetero-balanced", "--to", to,
                                        "-o", f"{cv}/{to}-cora_hetero", "-q"])
    r("convert/pyg-rename", ["convert", "out/partition/cora-extra-data", "--to", "pyg", "--rename", "feat=features",
                             "--rename", "weight=w", "-o", f"{cv}/pyg-rename", "-q"])
    r("convert/glt-options", ["convert", "out/partition/cora-extra-data", "--to", "glt", "--node-feat", "extra",
                              "--edge-feat", "weight", "--label", "label", "-o", f"{cv}/glt-options", "-q"])
    r("convert/dgl-graph-name", ["convert", "out/partition/cora-range-binary", "--to", "dgl", "--graph-name", "cora",
                                 "-o", f"{cv}/dgl-graph-name", "-q"])

    # ---- chunk and distributed partition
    print("chunk / distributed", flush=True)
    r("chunk/cora", ["chunk", cora, "-k", 4, "-o", "out/chunk/cora", "--node-data", "extra=inputs/cora_extra_node.npy",
                     "--edge-data", "weight=inputs/cora_extra_edge.npy"])
    r("chunk/snap", ["chunk", snap, "-k", 3, "-o", "out/chunk/snap", "--json"])
    r("chunk/typed", ["chunk", typed, "-k", 2, "-o", "out/chunk/typed", "-q"])
    part("chunked-cora-random", "out/chunk/cora", "-p", 4, "--method", "random")
    part("chunked-snap-metis", "out/chunk/snap", "-p", 3, "--method", "metis", "-q")
    r("dist/single-process-remainder", ["partition", "out/chunk/cora", "-p", 4, "-o", "out/dist/single-remainder"], prog="dist")
    r("dist/single-process-stream-halo1", ["partition", "out/chunk/snap", "-p", 3, "--method", "stream", "--halo", 1,
                                           "-o", "out/dist/single-stream-halo1", "-q"], prog="dist")
    r("dist/single-process-error", ["partition", "out/chunk/none", "-p", 3, "-o", "out/dist/none"], prog="dist")

    # ---- checkpoints
    print("checkpoints", flush=True)
    ck = "out/ckpt"
    ic = "inputs/ckpt"
    r("import-ckpt/torch-adam", ["import-ckpt", "--from", "torch", f"{ic}/adam_{{rank}}.pt", "-w", 3, "--layout", "remainder",
                                 "-o", f"{ck}/adam"])
    r("import-ckpt/torch-distdgl-adagrad", ["import-ckpt", "--from", "torch", f"{ic}/dgl_opt_{{rank}}", f"{ic}/dgl_emb_{{rank}}.pt",
                                            "-w", 2, "--policy", "range", "-o", f"{ck}/adagrad", "--json"])
    r("import-ckpt/torch-distdgl-adam-files", ["import-ckpt", "--from", "torch", f"{ic}/adamdgl_0", f"{ic}/adamdgl_1",
                                               f"{ic}/adamdgl_emb_0.pt", f"{ic}/adamdgl_emb_1.pt", "-o", f"{ck}/adamdgl"])
    r("import-ckpt/wholegraph-lazyadam", ["import-ckpt", "--from", "wholegraph", "inputs/wg/lazy", "--num-rows", 53, "--dim", 6,
                                          "-w", 4, "--optimizer", "lazyadam", "--name", "lazy", "-o", f"{ck}/lazyadam"])
    r("import-ckpt/wholegraph-half", ["import-ckpt", "--from", "wholegraph", "inputs/wg/half", "--num-rows", 30, "--dim", 4,
                                      "-w", 4, "--dtype", "float16", "-o", f"{ck}/half", "-q"])
    r("import-ckpt/wholegraph-wrong-rows", ["import-ckpt", "--from", "wholegraph", "inputs/wg/lazy", "--num-rows", 50, "--dim", 6,
                                            "-w", 4, "-o", f"{ck}/bad"])
    sharded = ["adam", "adagrad", "adamdgl", "lazyadam", "half"]
    for c in sharded:
        r(f"gather-ckpt/{c}", ["gather-ckpt", f"{ck}/{c}", "-o", f"{ck}/{c}-full"])
        r(f"gather-ckpt/{c}-npy", ["gather-ckpt", f"{ck}/{c}", "-o", f"{ck}/{c}-full-npy", "--npy", "--verify", "--json"])
    r("gather-ckpt/adam-chunk-rows", ["gather-ckpt", f"{ck}/adam", "-o", f"{ck}/adam-full-chunked", "--chunk-rows", 7, "-q"])
    r("gather-ckpt/from-global", ["gather-ckpt", f"{ck}/adam-full", "-o", f"{ck}/adam-full-again", "--npy", "-q"])
    r("scatter-ckpt/adam-remainder-w5", ["scatter-ckpt", f"{ck}/adam-full", "-o", f"{ck}/adam-w5", "-w", 5])
    r("scatter-ckpt/adam-range-w2", ["scatter-ckpt", f"{ck}/adam-full-npy", "-o", f"{ck}/adam-w2-range", "-w", 2,
                                     "--policy", "range", "--json"])
    r("scatter-ckpt/adam-sharded-w4", ["scatter-ckpt", f"{ck}/adam", "-o", f"{ck}/adam-w4", "-w", 4, "--verify",
                                       "--chunk-rows", 5, "-q"])
    r("scatter-ckpt/lazyadam-range-boundaries", ["scatter-ckpt", f"{ck}/lazyadam-full", "-o", f"{ck}/lazyadam-w3-b", "-w", 3,
                                                 "--policy", "range", "--boundaries", "0,10,40,53"])
    r("scatter-ckpt/adagrad-remainder-w3", ["scatter-ckpt", f"{ck}/adagrad", "-o", f"{ck}/adagrad-w3", "-w", 3, "-q"])
    r("scatter-ckpt/roundtrip-w3", ["scatter-ckpt", f"{ck}/adam-full", "-o", f"{ck}/adam-w3-again", "-w", 3, "-q"])
    r("scatter-ckpt/bad-boundaries", ["scatter-ckpt", f"{ck}/adam-full", "-o", f"{ck}/bad", "-w", 2, "--policy", "range",
                                      "--boundaries", "0,10,101"])
    ex = "out/ckpt-export"
    r("export-ckpt/wholegraph-lazyadam", ["export-ckpt", f"{ck}/lazyadam", "--to", "wholegraph", "-w", 2, "-o", f"{ex}/wg-lazyadam"])
    r("export-ckpt/wholegraph-adagrad", ["export-ckpt", f"{ck}/adagrad-w3", "--to", "wholegraph", "-w", 3, "--prefix", "ent",
                                         "-o", f"{ex}/wg-adagrad", "--json"])
    r("export-ckpt/wholegraph-adam-table-only", ["export-ckpt", f"{ck}/adam", "--to", "wholegraph", "-w", 4, "--embedding",
                                                 "node_emb", "--table-only", "-o", f"{ex}/wg-adam-table", "--verify"])
    r("export-ckpt/wholegraph-half-boundaries", ["export-ckpt", f"{ck}/half", "--to", "wholegraph", "-w", 3,
                                                 "--boundaries", "0,5,6,30", "-o", f"{ex}/wg-half", "-q"])
    r("export-ckpt/wholegraph-adam-refused", ["export-ckpt", f"{ck}/adam", "--to", "wholegraph", "-w", 2,
                                              "--embedding", "node_emb", "-o", f"{ex}/wg-refused"])
    r("export-ckpt/wholegraph-several-refused", ["export-ckpt", f"{ck}/adam", "--to", "wholegraph", "-w", 2, "--table-only",
                                                 "-o", f"{ex}/wg-refused2"])
    r("export-ckpt/distdgl-adam", ["export-ckpt", f"{ck}/adam", "--to", "distdgl", "-w", 2, "-o", f"{ex}/dgl-adam"])
    r("export-ckpt/distdgl-adamdgl-range", ["export-ckpt", f"{ck}/adamdgl", "--to", "distdgl", "-w", 3, "--policy", "range",
                                            "--prefix", "opt", "--ntype", "paper", "-o", f"{ex}/dgl-adamdgl", "--json"])
    r("export-ckpt/distdgl-adagrad-chunk", ["export-ckpt", f"{ck}/adagrad-full", "--to", "distdgl", "-w", 2, "--chunk-rows", 4,
                                            "-o", f"{ex}/dgl-adagrad", "-q"])
    r("export-ckpt/distdgl-lazyadam-table-only", ["export-ckpt", f"{ck}/lazyadam", "--to", "distdgl", "-w", 2, "--table-only",
                                                  "-o", f"{ex}/dgl-lazy-table", "-q"])
    r("export-ckpt/distdgl-lazyadam-refused", ["export-ckpt", f"{ck}/lazyadam", "--to", "distdgl", "-w", 2,
                                               "-o", f"{ex}/dgl-refused"])
    # import the exports back
    r("import-ckpt/from-wg-export", ["import-ckpt", "--from", "wholegraph", f"{ex}/wg-lazyadam/lazy", "--num-rows", 53, "--dim", 6,
                                     "-w", 2, "--optimizer", "lazyadam", "--name", "lazy", "-o", f"{ck}/wg-back"])
    r("import-ckpt/from-wg-adagrad-export", ["import-ckpt", "--from", "wholegraph", f"{ex}/wg-adagrad/ent", "--num-rows", 89,
                                             "--dim", 5, "-w", 3, "--optimizer", "adagrad", "--name", "ent",
                                             "--state-file", "state_sum=state_sum", "-o", f"{ck}/wg-adagrad-back", "-q"])
    r("import-ckpt/from-dgl-export", ["import-ckpt", "--from", "torch", f"{ex}/dgl-adam/sparse_opt_{{rank}}",
                                      f"{ex}/dgl-adam/sparse_opt_emb_{{rank}}.pt", "-w", 2, "-o", f"{ck}/dgl-back"])
    r("import-ckpt/from-dgl-table-only", ["import-ckpt", "--from", "torch", f"{ex}/dgl-lazy-table/sparse_opt_emb_{{rank}}.pt",
                                          "-w", 2, "--policy", "range", "-o", f"{ck}/dgl-table-back", "--json"])
    for c in sharded + ["adam-full", "adam-full-npy", "adam-w5", "lazyadam-w3-b", "wg-back", "dgl-back"]:
        r(f"info/ckpt-{c}.json", ["info", f"{ck}/{c}", "--json"])
        r(f"verify/ckpt-{c}", ["verify", f"{ck}/{c}"])
    r("info/ckpt-adam.text", ["info", f"{ck}/adam"])
    r("info/export-feat-dir", ["info", f"{ex}/wg-lazyadam"])

    # ---- torchrun: 2 ranks (skipped if torchrun cannot start here)
    if not distributed:
        runner.skipped.append("torchrun runs (--no-distributed)")
        return
    print("torchrun (2 ranks)", flush=True)
    rc = r("torchrun/partition-cora-random", ["partition", "out/chunk/cora", "-p", 4, "--method", "random", "--seed", 3,
                                              "-o", "out/dist/torchrun-cora-random", "-q", "--timeout", 120], prog="torchrun",
           capture=False, timeout=300)
    if rc != 0:
        print("  torchrun did not run (see logs/cap/torchrun/); skipping the distributed runs", flush=True)
        runner.skipped.append(f"torchrun runs (torchrun exit status {rc})")
        shutil.rmtree(runner.out / "out" / "dist" / "torchrun-cora-random", ignore_errors=True)
        (runner.out / "cap" / "torchrun-skipped.txt").parent.mkdir(parents=True, exist_ok=True)
        (runner.out / "cap" / "torchrun-skipped.txt").write_text("torchrun could not run here\n")
        return
    r("torchrun/partition-snap-halo1", ["partition", "out/chunk/snap", "-p", 3, "--method", "remainder", "--halo", 1,
                                        "-o", "out/dist/torchrun-snap-halo1", "-q", "--timeout", 120], prog="torchrun",
      capture=False, timeout=300)
    r("torchrun/gather-ckpt-adam", ["gather-ckpt", f"{ck}/adam", "-o", "out/dist/torchrun-gather-adam", "-q", "--timeout", 120],
      prog="torchrun", capture=False, timeout=300)
    r("torchrun/scatter-ckpt-adam", ["scatter-ckpt", f"{ck}/adam-full", "-w", 5, "-o", "out/dist/torchrun-scatter-adam-w5", "-q",
                                     "--timeout", 120], prog="torchrun", capture=False, timeout=300)


# --------------------------------------------------------------------------- digests


def digest_tree(out: Path, rules: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """sha256 of every file under `out` (except the report files and logs/), relative POSIX paths, sorted;
    and {path: what was normalised} for the files hashed after a normalisation (rules: path -> NORMALISERS key)."""
    absolute = str(out.resolve()).encode()
    digests: dict[str, str] = {}
    notes: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(out):
        rel_dir = Path(dirpath).relative_to(out)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in NOT_DIGESTED]
            filenames = [f for f in filenames if f not in NOT_DIGESTED]
        dirnames.sort()
        if not dirnames and not filenames and rel_dir != Path("."):
            digests[rel_dir.as_posix() + "/"] = "empty-dir"
        for f in sorted(filenames):
            path = Path(dirpath) / f
            rel = (rel_dir / f).as_posix()
            if path.is_symlink():
                digests[rel] = "symlink:" + os.readlink(path)
                continue
            data = path.read_bytes()
            applied = []
            if rel in rules:
                description, fn = NORMALISERS[rules[rel]]
                if fn(data) != data:
                    data = fn(data)
                    applied.append(description)
            if absolute in data:
                data = data.replace(absolute, b"<OUT>")
                applied.append("absolute path of the output folder replaced by <OUT>")
            if applied:
                notes[rel] = "; ".join(applied)
            digests[rel] = hashlib.sha256(data).hexdigest()
    return dict(sorted(digests.items())), notes


def compare(a_path: str, b_path: str) -> int:
    def load(p: str) -> dict[str, str]:
        path = Path(p)
        if path.is_dir():
            path = path / "digests.json"
        return json.loads(path.read_text())

    a, b = load(a_path), load(b_path)
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    missing = sorted(a.keys() - b.keys())
    extra = sorted(b.keys() - a.keys())
    for k in differ:
        print(f"differs: {k}")
    for k in missing:
        print(f"missing: {k}   (in {a_path} only)")
    for k in extra:
        print(f"extra:   {k}   (in {b_path} only)")
    same = len(a.keys() & b.keys()) - len(differ)
    print(f"{same} identical, {len(differ)} differ, {len(missing)} missing, {len(extra)} extra")
    return 1 if differ or missing or extra else 0


# --------------------------------------------------------------------------- main


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", type=Path, help="output folder (must not exist or be empty)")
    ap.add_argument("--src", type=Path, help="source checkout to run (PYTHONPATH=CHECKOUT); default: the installed gpart")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two digests.json (or their folders)")
    ap.add_argument("--cora", type=Path, default=DEFAULT_CORA, help="homogeneous .npz input [%(default)s]")
    ap.add_argument("--cora-hetero", type=Path, default=DEFAULT_CORA_HETERO, help="typed .npz input [%(default)s]")
    ap.add_argument("--snap", type=Path, default=DEFAULT_SNAP, help="SNAP edge list input [%(default)s]")
    ap.add_argument("--no-distributed", action="store_true", help="skip the torchrun runs")
    ap.add_argument("--force", action="store_true", help="empty --out first if it exists")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command as it runs")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out DIR (or --compare A B) is required")
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        if not args.force:
            ap.error(f"{out} is not empty (use --force to replace it)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    src = args.src.resolve() if args.src else None
    if src is not None and not (src / "pyproject.toml").is_file():
        ap.error(f"--src {src}: no pyproject.toml there")
    for p in (args.cora, args.cora_hetero, args.snap):
        if not p.is_file():
            ap.error(f"input {p} not found")

    started = time.perf_counter()
    runner = Runner(out, src, args.verbose)
    print(f"gpart from: {'--src ' + str(src) if src else 'installed package'}; command: {' '.join(runner.gpart[:2])} ...",
          flush=True)
    where = runner.describe_import()
    names = make_inputs(out, args.cora.resolve(), args.cora_hetero.resolve(), args.snap.resolve())
    run_all(runner, names, distributed=not args.no_distributed)

    digests, normalised = digest_tree(out, runner.normalised)
    (out / "digests.json").write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    (out / "normalised.json").write_text(json.dumps(dict(sorted(normalised.items())), indent=1) + "\n")
    seconds = time.perf_counter() - started
    failed = [s for s in runner.steps if s["rc"] != 0]
    (out / "run.json").write_text(json.dumps({
        "src": str(src) if src else None, "gpart_command": runner.gpart, "import": where, "python": sys.executable,
        "seconds": round(seconds, 1), "skipped": runner.skipped, "steps": runner.steps,
    }, indent=1) + "\n")
    print(f"{len(runner.steps)} commands ({len(failed)} with a non-zero exit status, recorded as behaviour), "
          f"{len(digests)} digests, {len(normalised)} normalised files, {seconds:.0f} s -> {out / 'digests.json'}")
    if runner.skipped:
        print("skipped: " + "; ".join(runner.skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
