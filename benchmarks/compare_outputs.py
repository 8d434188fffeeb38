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
directories are listed as "<dir>/" -> "empty-dir". Everything is compared byte for byte
except these normalisations before hashing, listed per file in DIR/normalised.json:
  - export-feat's stdout: the elapsed seconds and throughput of its summary line
    (text) and the "seconds" / "bytes_per_second" values (--json);
  - `convert --to glt` .pkl feature files: hashed as the dtype, shape and values of
    each pickled tensor, because pickle.dump of a torch tensor embeds str(id(storage)),
    a memory address, so their bytes differ from run to run; and in the convert
    manifest.json and its stdout the "bytes" / "crc32" of those .pkl entries;
  - "seconds" values in manifests and captured stdout (the default method records
    each KaMinPar run's and repair's time), and in an HDF5 result's manifest
    attribute (the file is hashed as its datasets and attributes);
  - an absolute path of DIR in any output (an error message naming an existing
    output directory prints it resolved) is replaced by <OUT>.
DIR/run.json holds the environment and timing and is not digested, neither is
DIR/logs (torchrun's own chatter, with pids and timestamps; only the exit status
of a torchrun run is digested, its results are).
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
SHARED = REPO / "tests" / "data" / "public"  # the public graphs shipped with the repository
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
        module = console_script_target(self.src).partition(":")[0]
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
        if not capture:  # the exit status is digested even where the output is not
            self._write(f"cap/{name}.rc", f"{rc}\n".encode())
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


def console_script_target(checkout: Optional[Path]) -> str:
    """`gpart = "module:attr"` of [project.scripts] in CHECKOUT/pyproject.toml, or of the installed distribution."""
    if checkout is None:
        from importlib.metadata import entry_points

        found = [e.value for e in entry_points(group="console_scripts") if e.name == "gpart"]
        return found[0] if found else "gpart"
    text = (checkout / "pyproject.toml").read_text()
    try:
        import tomllib

        target = tomllib.loads(text).get("project", {}).get("scripts", {}).get("gpart")
    except ImportError:  # Python 3.10: the one line of [project.scripts] this needs
        section = re.search(r"^\[project\.scripts\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        m = section and re.search(r"^\s*gpart\s*=\s*[\"']([^\"']+)[\"']", section.group(1), re.M)
        target = m.group(1) if m else None
    if not target:
        sys.exit(f"compare_outputs: {checkout / 'pyproject.toml'} has no [project.scripts] gpart entry")
    return target


# --------------------------------------------------------------------------- normalisation

_FLOAT = r"-?[0-9][0-9.eE+\-]*|NaN|Infinity|-Infinity"


def _pickled_tensors(data: bytes) -> bytes:
    """A GLT .pkl feature file (one or more pickle.dump()s of CPU tensors) as the dtype, shape and values of each
    pickled tensor, in order. Pickling a tensor embeds str(id(storage)), a memory address, in the byte stream."""
    import io
    import pickle

    import torch

    fh, out = io.BytesIO(data), []
    while fh.tell() < len(data):
        t = pickle.load(fh)
        if not isinstance(t, torch.Tensor):
            return data  # not what this rule is for: hash the bytes as they are
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out.append(f"{type(t).__name__} {t.dtype} {tuple(t.shape)} {hashlib.sha256(raw).hexdigest()}\n".encode())
    return b"pickled tensors\n" + b"".join(out)


_SECONDS = re.compile(rb'("seconds": )(' + _FLOAT.encode() + rb')')


def _hdf5_without_timings(data: bytes) -> bytes:
    """An HDF5 result as its groups, datasets (dtype, shape, sha256 of the values) and attributes, with the
    timings of JSON attributes (the manifest) replaced: the file's own bytes hold the manifest and its timings."""
    import io

    import h5py
    import numpy as np

    lines: list[bytes] = []

    def attrs(name: str, obj) -> None:
        for key in sorted(obj.attrs):
            value = obj.attrs[key]
            text = value.encode() if isinstance(value, str) else value if isinstance(value, bytes) else repr(np.asarray(value).tolist()).encode()
            lines.append(f"attr {name} {key} ".encode() + _SECONDS.sub(rb'\1"<SECONDS>"', text))

    def visit(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            values = np.ascontiguousarray(obj[()])
            lines.append(f"dataset {name} {values.dtype} {values.shape} {hashlib.sha256(values.tobytes()).hexdigest()}".encode())
        else:
            lines.append(f"group {name}".encode())
        attrs(name, obj)

    with h5py.File(io.BytesIO(data), "r") as f:
        attrs("/", f)
        f.visititems(visit)
    return b"hdf5\n" + b"\n".join(lines) + b"\n"


_PKL_ENTRY = re.compile(rb'("file": "[^"\n]*\.pkl",\s*"bytes": )[0-9]+(,\s*"crc32": ")[0-9a-f]{8}(")')

NORMALISERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "export-timing": (
        "export-feat summary: elapsed seconds and throughput ('<size> in <S> s (<rate>/s)' in text; "
        "\"seconds\" and \"bytes_per_second\" values in --json) replaced by placeholders",
        lambda b: re.sub(rb'("bytes_per_second": )(' + _FLOAT.encode() + rb')', rb'\1"<RATE>"',
                         re.sub(rb'("seconds": )(' + _FLOAT.encode() + rb')', rb'\1"<SECONDS>"',
                                re.sub(rb" in [0-9]+\.[0-9]+ s \([^)\n]*/s\)", b" in <SECONDS> s (<RATE>/s)", b))),
    ),
    "pickled-tensors": (
        "GLT .pkl feature file: digest of each pickled tensor's type, dtype, shape and values (the pickle stream "
        "holds str(id(storage)), a memory address, which changes every run)",
        _pickled_tensors,
    ),
    "pkl-entries": (
        "convert manifest: \"bytes\" and \"crc32\" of the .pkl file entries replaced by placeholders (those files "
        "embed memory addresses; their contents are compared by the pickled-tensors rule)",
        lambda b: _PKL_ENTRY.sub(rb'\1"<PKL>"\2<PKL>\3', b),
    ),
    "run-timing": (
        "\"seconds\" values (the default method records each KaMinPar run's and repair's time in params.tried) "
        "replaced by a placeholder: they change with the machine's load, run to run",
        lambda b: _SECONDS.sub(rb'\1"<SECONDS>"', b),
    ),
    "hdf5-timing": (
        "HDF5 result: digest of its groups, datasets and attributes, the manifest attribute's \"seconds\" values "
        "replaced by a placeholder (as run-timing)",
        _hdf5_without_timings,
    ),
}


def path_rules(rel: str) -> list[str]:
    """The normalisations every file at `rel` gets (whether or not a step asked for one)."""
    if rel.startswith("out/convert/") and rel.endswith(".pkl"):
        return ["pickled-tensors"]
    if rel.endswith(".h5"):
        return ["hdf5-timing"]
    rules = []
    if rel.endswith("manifest.json") or (rel.startswith("cap/") and rel.endswith(".stdout")):
        rules.append("run-timing")
    if (rel.startswith("out/convert/") and rel.endswith("/manifest.json")) or (rel.startswith("cap/convert/") and rel.endswith(".stdout")):
        rules.append("pkl-entries")
    return rules


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
        # the same tables in WholeGraph's range split, for --layout range
        torch.save({k: torch.from_numpy(np.ascontiguousarray(v[slice(*wholegraph_split(v.shape[0], w)[r:r + 2])]))
                    for k, v in full.items()}, ck / f"adamrange_{r}.pt")
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


def help_choices(runner: Runner, step: str, option: str) -> list[str]:
    """The [a|b|c] choice list of `option` in the help text captured by `step`."""
    text = (runner.out / "cap" / (step + ".stdout")).read_bytes().decode("utf-8", "replace")
    m = re.search(re.escape(option) + r"\s+\[([^\]]+)\]", text)
    return [c.strip() for c in re.sub(r"\s+", " ", m.group(1)).split("|")] if m else []


def listed_commands(runner: Runner, step: str) -> list[str]:
    """The command names of click's 'Commands:' section (up to the first blank line) of a captured help text."""
    text = (runner.out / "cap" / (step + ".stdout")).read_bytes().decode("utf-8", "replace")
    section = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0] if "Commands:\n" in text else ""
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z0-9-]*)(?:\s{2,}|$)", section, re.M)]


def with_extras(fixed: list[str], listed: list[str], what: str) -> list[str]:
    """`fixed` plus any choice the help text lists beyond it (sorted); says so when the two differ."""
    extra = [c for c in listed if c not in fixed]
    missing = [c for c in fixed if c not in listed]
    if extra or missing:
        print(f"  note: {what}: --help lists {listed}, the fixed list is {fixed}", flush=True)
    return fixed + sorted(extra)


class Plan:
    """Commands in phases: every task of a phase is independent of the phase's other tasks (own outputs, inputs
    made by earlier phases); the commands of one task run in order. Tasks run on `jobs` workers."""

    def __init__(self, runner: Runner, jobs: int):
        self.runner = runner
        self.jobs = jobs
        self.tasks: list[list[tuple]] = []

    def task(self, *commands: tuple) -> None:
        self.tasks.append(list(commands))

    def run(self, title: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        tasks, self.tasks = self.tasks, []
        start = time.perf_counter()

        def go(task):
            for name, args, kw in task:
                self.runner.run(name, args, **kw)

        with ThreadPoolExecutor(max(1, self.jobs)) as pool:
            for f in [pool.submit(go, t) for t in tasks]:
                f.result()
        print(f"{title}: {sum(len(t) for t in tasks)} commands, {time.perf_counter() - start:.0f} s", flush=True)


def c(name: str, args: list, **kw) -> tuple:
    """One command of a task: step name, gpart arguments, Runner.run options."""
    return (name, args, kw)


def run_all(runner: Runner, names: dict[str, str], distributed: bool, jobs: int) -> None:
    cora, hetero, snap, typed = names["cora"], names["cora_hetero"], names["snap"], names["typed"]
    plan = Plan(runner, jobs)
    T = ("export-timing",)

    # ---- phase 0: every help text (and the choice lists the later phases use)
    plan.task(c("help/main", ["--help"]))
    plan.task(c("dist-help/main", ["--help"], prog="dist"))
    plan.task(c("help/partition", ["partition", "--help"]))
    plan.task(c("help/convert", ["convert", "--help"]))
    plan.run("help texts (1/2)")
    commands = with_extras(COMMANDS, listed_commands(runner, "help/main"), "gpart commands")
    dist_commands = with_extras(DIST_COMMANDS, listed_commands(runner, "dist-help/main"), "gpart.distributed commands")
    methods = with_extras(METHODS, help_choices(runner, "help/partition", "--method"), "partition --method")
    targets = with_extras(CONVERT_TARGETS, help_choices(runner, "help/convert", "--to"), "convert --to")
    plan.task(c("help/main_short", ["-h"]), c("help/no_args", []), c("help/version", ["--version"]),
              c("help/unknown_command", ["no-such-command"]))
    for cmd in commands:
        if cmd not in ("partition", "convert"):
            plan.task(c(f"help/{cmd}", [cmd, "--help"]))
    for cmd in dist_commands:
        plan.task(c(f"dist-help/{cmd}", [cmd, "--help"], prog="dist"))
    plan.run("help texts (2/2)")
    with_extras(EXPORT_CKPT_TARGETS, help_choices(runner, "help/export-ckpt", "--to"), "export-ckpt --to")
    with_extras(IMPORT_CKPT_SOURCES, help_choices(runner, "help/import-ckpt", "--from"), "import-ckpt --from")

    # ---- phase 1: partition (every method; binary and hdf5; halo 0 and 1; bounded memory; typed), chunk, import-ckpt
    P = "out/partition"

    def part(name: str, src: str, *extra) -> None:
        plan.task(c(f"partition/{name}", ["partition", src, "-o", f"{P}/{name}", *extra]))

    for m in methods:
        part(f"cora-{m}-binary", cora, "-p", 4, "--method", m)
        part(f"cora-{m}-hdf5-halo1", cora, "-p", 4, "--method", m, "--format", "hdf5", "--halo", 1)
        part(f"snap-{m}-binary", snap, "-p", 4, "--method", m, "--json")
        part(f"typed-{m}-binary", typed, "-p", 3, "--method", m)
    part("cora-metis-binary-halo1", cora, "-p", 3, "--method", "metis", "--halo", 1)
    part("cora-stream-hdf5", cora, "-p", 3, "--method", "stream", "--format", "hdf5")
    part("snap-metis-hdf5-halo1", snap, "-p", 3, "--method", "metis", "--format", "hdf5", "--halo", 1)
    part("snap-remainder-hdf5", snap, "-p", 3, "--method", "remainder", "--format", "hdf5", "-q")
    part("cora-default", cora, "-p", 2)
    part("cora-p1-range", cora, "-p", 1, "--method", "range")
    part("cora-metis-volume-kway", cora, "-p", 5, "--objective", "volume", "--algorithm", "kway", "--trials", 3,
         "--iterations", 5, "--seed", 3)
    part("cora-metis-recursive-balance", cora, "-p", 4, "--method", "metis", "--algorithm", "recursive",
         "--balance", "train_mask", "--balance-edges", "--imbalance", 0.05)
    part("cora-kaminpar-balance-edges", cora, "-p", 4, "--method", "kaminpar", "--balance-edges", "--seed", 5)
    part("cora-balanced-seed-json", cora, "-p", 6, "--method", "balanced", "--seed", 11, "--json")
    part("cora-stream-passes2", cora, "-p", 4, "--method", "stream", "--passes", 2, "--imbalance", 0.1)
    part("cora-random-seed7", cora, "-p", 5, "--method", "random", "--seed", 7)
    part("cora-assignment-npy", cora, "-p", 4, "--assignment", "inputs/cora_owner.npy")
    part("cora-assignment-txt-hdf5", cora, "-p", 4, "--assignment", "inputs/cora_owner.txt", "--format", "hdf5")
    part("cora-extra-data", cora, "-p", 3, "--method", "range", "--node-data", "extra=inputs/cora_extra_node.npy",
         "--edge-data", "weight=inputs/cora_extra_edge.npy")
    part("cora-extra-data-halo1-hdf5", cora, "-p", 2, "--method", "remainder", "--node-data", "extra=inputs/cora_extra_node.npy",
         "--edge-data", "weight=inputs/cora_extra_edge.npy", "--halo", 1, "--format", "hdf5", "-q")
    # bounded memory (SPEC.md 4.6): these limits are far below the in-memory estimate, so edges are bucketed on disk
    part("snap-stream-maxmem", snap, "-p", 4, "--method", "stream", "--max-memory", "3MB")
    part("snap-random-hdf5-halo1-maxmem", snap, "-p", 3, "--method", "random", "--format", "hdf5", "--halo", 1,
         "--max-memory", "3MiB")
    part("cora-range-halo1-maxmem", cora, "-p", 4, "--method", "range", "--halo", 1, "--max-memory", "40MB")
    part("typed-random-halo1-maxmem", typed, "-p", 3, "--method", "random", "--max-memory", "300KB", "--halo", 1)
    part("snap-metis-maxmem-refused", snap, "-p", 4, "--method", "metis", "--max-memory", "1MB")
    part("snap-stream-maxmem-too-small", snap, "-p", 4, "--method", "stream", "--max-memory", "100KB")
    # typed (heterogeneous) inputs beyond the method sweep
    part("typed-remainder-hdf5-halo1", typed, "-p", 2, "--method", "remainder", "--format", "hdf5", "--halo", 1)
    part("typed-metis-binary-halo1", typed, "-p", 3, "--method", "metis", "--halo", 1)
    part("cora_hetero-balanced", hetero, "-p", 4)
    part("cora_hetero-range-hdf5-halo1", hetero, "-p", 3, "--method", "range", "--format", "hdf5", "--halo", 1, "--json")
    # input errors are behaviour too (one line on stderr, an exit status, nothing written)
    part("error-parts-too-many", typed, "-p", 100000, "--method", "range")
    part("error-missing-input", "inputs/none.npz", "-p", 2)
    plan.task(c("chunk/cora", ["chunk", cora, "-k", 4, "-o", "out/chunk/cora", "--node-data", "extra=inputs/cora_extra_node.npy",
                               "--edge-data", "weight=inputs/cora_extra_edge.npy"]))
    plan.task(c("chunk/snap", ["chunk", snap, "-k", 3, "-o", "out/chunk/snap", "--json"]))
    plan.task(c("chunk/typed", ["chunk", typed, "-k", 2, "-o", "out/chunk/typed", "-q"]))
    CK, IC = "out/ckpt", "inputs/ckpt"
    plan.task(c("import-ckpt/torch-adam", ["import-ckpt", "--from", "torch", f"{IC}/adam_{{rank}}.pt", "-w", 3,
                                           "--layout", "remainder", "-o", f"{CK}/adam"]))
    plan.task(c("import-ckpt/torch-adam-files-range", ["import-ckpt", "--from", "torch", f"{IC}/adamrange_0.pt",
                                                       f"{IC}/adamrange_1.pt", f"{IC}/adamrange_2.pt", "--layout", "range", "-o", f"{CK}/adam-range", "-q"]))
    plan.task(c("import-ckpt/torch-distdgl-adagrad", ["import-ckpt", "--from", "torch", f"{IC}/dgl_opt_{{rank}}",
                                                      f"{IC}/dgl_emb_{{rank}}.pt", "-w", 2, "--policy", "range",
                                                      "-o", f"{CK}/adagrad", "--json"]))
    plan.task(c("import-ckpt/torch-distdgl-adam", ["import-ckpt", "--from", "torch", f"{IC}/adamdgl_{{rank}}",
                                                   f"{IC}/adamdgl_emb_{{rank}}.pt", "-w", 2, "-o", f"{CK}/adamdgl"]))
    plan.task(c("import-ckpt/torch-world-size-mismatch", ["import-ckpt", "--from", "torch", f"{IC}/adamdgl_0", f"{IC}/adamdgl_1",
                                                          f"{IC}/adamdgl_emb_0.pt", f"{IC}/adamdgl_emb_1.pt", "-o", f"{CK}/bad1"]))
    plan.task(c("import-ckpt/wholegraph-lazyadam", ["import-ckpt", "--from", "wholegraph", "inputs/wg/lazy", "--num-rows", 53,
                                                    "--dim", 6, "-w", 4, "--optimizer", "lazyadam", "--name", "lazy",
                                                    "-o", f"{CK}/lazyadam"]))
    plan.task(c("import-ckpt/wholegraph-half", ["import-ckpt", "--from", "wholegraph", "inputs/wg/half", "--num-rows", 30,
                                                "--dim", 4, "-w", 4, "--dtype", "float16", "-o", f"{CK}/half", "-q"]))
    plan.task(c("import-ckpt/wholegraph-wrong-rows", ["import-ckpt", "--from", "wholegraph", "inputs/wg/lazy", "--num-rows", 50,
                                                      "--dim", 6, "-w", 4, "-o", f"{CK}/bad2"]))
    plan.run("partition, chunk, import-ckpt")

    # ---- phase 2: info / verify, export-feat, convert, partition of chunks, gather-ckpt
    for name, src in [("cora-metis-binary", cora), ("cora-balanced-hdf5-halo1", cora), ("cora-stream-hdf5", cora),
                      ("cora-kaminpar-binary", cora), ("cora-extra-data", cora), ("cora-p1-range", cora),
                      ("snap-random-binary", snap), ("snap-metis-hdf5-halo1", snap), ("snap-stream-maxmem", snap),
                      ("snap-random-hdf5-halo1-maxmem", snap), ("typed-balanced-binary", typed),
                      ("typed-remainder-hdf5-halo1", typed), ("typed-random-halo1-maxmem", typed),
                      ("cora_hetero-balanced", hetero), ("cora_hetero-range-hdf5-halo1", hetero)]:
        plan.task(c(f"info/{name}.json", ["info", f"{P}/{name}", "--json"]),
                  c(f"verify/{name}.graph", ["verify", f"{P}/{name}", "--graph", src]))
    for name in ("cora-range-binary", "typed-range-binary", "cora_hetero-range-hdf5-halo1"):
        plan.task(c(f"info/{name}.text", ["info", f"{P}/{name}"]), c(f"verify/{name}.plain", ["verify", f"{P}/{name}"]),
                  c(f"verify/{name}.json", ["verify", f"{P}/{name}", "--json"]))
    plan.task(c("verify/cora-extra-data.node-data", ["verify", f"{P}/cora-extra-data", "--graph", cora, "--node-data",
                                                     "extra=inputs/cora_extra_node.npy", "--edge-data",
                                                     "weight=inputs/cora_extra_edge.npy", "-q"]),
              c("verify/wrong-graph", ["verify", f"{P}/cora-range-binary", "--graph", snap]),
              c("verify/not-a-result", ["verify", "inputs"]))
    plan.task(c("partition/error-existing-out", ["partition", cora, "-p", 2, "-o", f"{P}/cora-default"]),
              c("partition/cora-default-force", ["partition", cora, "-p", 3, "--method", "range", "-o", f"{P}/cora-default",
                                                 "--force", "-q"]),
              c("info/cora-default-forced.json", ["info", f"{P}/cora-default", "--json"]))
    EX = "out/export"
    plan.task(c("export-feat/plain", ["export-feat", "inputs/feat.npy", "-o", f"{EX}/plain", "--files", 3], normalise=T),
              c("export-feat/force", ["export-feat", "inputs/feat.npy", "-o", f"{EX}/plain", "--files", 2, "--force", "-q"]))
    plan.task(c("export-feat/plain-json", ["export-feat", "inputs/feat.npy", "-o", f"{EX}/plain-json", "--json"], normalise=T))
    plan.task(*[c(f"export-feat/dtype-{dt}", ["export-feat", "inputs/feat.npy", "-o", f"{EX}/dtypes", "--dtype", dt,
                                              "--name", f"feat_{dt}", "--files", 2, "-q"])
                for dt in ("float16", "bfloat16", "float64")])
    plan.task(c("export-feat/int32", ["export-feat", "inputs/ids.npy", "-o", f"{EX}/ints", "--dtype", "int32", "--files", 4],
                normalise=T),
              c("export-feat/scalar-rows", ["export-feat", "inputs/scalar_rows.npy", "-o", f"{EX}/ints", "--files", 5,
                                            "--dtype", "float32", "-q"]))
    plan.task(c("export-feat/overflow-refused", ["export-feat", "inputs/big.npy", "-o", f"{EX}/overflow", "--dtype", "float16"]),
              c("export-feat/overflow-allowed", ["export-feat", "inputs/big.npy", "-o", f"{EX}/overflow", "--dtype", "float16",
                                                 "--allow-overflow", "-q"]))
    plan.task(c("export-feat/npz-key", ["export-feat", f"{cora}:feat", "-o", f"{EX}/npz", "--name", "x", "--files", 4],
                normalise=T),
              c("export-feat/npz-label", ["export-feat", f"{cora}:label", "-o", f"{EX}/npz", "--dtype", "int32", "-q"]))
    plan.task(c("export-feat/partition-all", ["export-feat", f"{P}/cora-metis-binary", "-o", f"{EX}/parts-all", "--files", 2],
                normalise=T))
    plan.task(c("export-feat/partition-hdf5-label", ["export-feat", f"{P}/cora-random-hdf5-halo1", "-o", f"{EX}/parts-label",
                                                     "--name", "label", "--json"], normalise=T))
    plan.task(c("export-feat/typed-paper-feat", ["export-feat", f"{P}/typed-metis-binary", "--node-type", "paper",
                                                 "--name", "feat", "-o", f"{EX}/typed-paper"], normalise=T))
    plan.task(c("export-feat/typed-all", ["export-feat", f"{P}/cora_hetero-range-hdf5-halo1", "-o", f"{EX}/typed-all",
                                          "--dtype", "float16", "-q"]))
    plan.task(c("export-feat/typed-author", ["export-feat", f"{P}/typed-random-binary", "--node-type", "author",
                                             "-o", f"{EX}/typed-author", "--json"], normalise=T))
    plan.task(c("export-feat/csr-cora", ["export-feat", cora, "--csr", "-o", f"{EX}/csr-cora", "--files", 2], normalise=T),
              c("export-feat/csr-dtype-refused", ["export-feat", cora, "--csr", "--dtype", "float16", "-o", f"{EX}/csr-bad"]))
    plan.task(c("export-feat/csr-snap-rev-dedup", ["export-feat", snap, "--csr", "--add-reverse", "--dedup", "--name", "g",
                                                   "-o", f"{EX}/csr-snap", "--files", 3, "-q"]),
              c("export-feat/csr-typed", ["export-feat", typed, "--csr", "-o", f"{EX}/csr-typed", "-q"]))
    CV = "out/convert"
    for to in targets:
        plan.task(c(f"convert/{to}-cora-metis", ["convert", f"{P}/cora-metis-binary", "--to", to, "-o", f"{CV}/{to}-cora-metis"]))
        plan.task(c(f"convert/{to}-typed", ["convert", f"{P}/typed-range-binary", "--to", to, "-o", f"{CV}/{to}-typed", "--json"]))
    plan.task(c("convert/pyg-snap-hdf5", ["convert", f"{P}/snap-remainder-hdf5", "--to", "pyg", "-o", f"{CV}/pyg-snap-hdf5", "-q"]),
              c("convert/pyg-halo-refused", ["convert", f"{P}/cora-random-hdf5-halo1", "--to", "pyg", "-o", f"{CV}/bad"]))
    plan.task(c("convert/pyg-rename", ["convert", f"{P}/cora-extra-data", "--to", "pyg", "--rename", "feat=features",
                                       "--rename", "weight=w", "-o", f"{CV}/pyg-rename", "-q"]))
    plan.task(c("convert/glt-options", ["convert", f"{P}/cora-extra-data", "--to", "glt", "--node-feat", "extra",
                                        "--edge-feat", "weight", "--label", "label", "-o", f"{CV}/glt-options", "-q"]),
              c("convert/dgl-graph-name", ["convert", f"{P}/cora-range-binary", "--to", "dgl", "--graph-name", "cora",
                                           "-o", f"{CV}/dgl-graph-name", "-q"]))
    plan.task(c("partition/chunked-cora-random", ["partition", "out/chunk/cora", "-p", 4, "--method", "random",
                                                  "-o", f"{P}/chunked-cora-random"]),
              c("partition/chunked-snap-metis", ["partition", "out/chunk/snap", "-p", 3, "--method", "metis",
                                                 "-o", f"{P}/chunked-snap-metis", "-q"]))
    plan.task(c("dist/single-process-stream-halo1", ["partition", "out/chunk/snap", "-p", 3, "--method", "stream", "--halo", 1,
                                                     "-o", "out/dist/single-stream-halo1"], prog="dist"))
    sharded = ["adam", "adam-range", "adagrad", "adamdgl", "lazyadam", "half"]
    for ck in sharded:
        plan.task(c(f"gather-ckpt/{ck}", ["gather-ckpt", f"{CK}/{ck}", "-o", f"{CK}/{ck}-full"]),
                  c(f"info/ckpt-{ck}.json", ["info", f"{CK}/{ck}", "--json"]),
                  c(f"verify/ckpt-{ck}", ["verify", f"{CK}/{ck}"]))
    plan.task(c("gather-ckpt/adam-npy", ["gather-ckpt", f"{CK}/adam", "-o", f"{CK}/adam-full-npy", "--npy", "--verify", "--json"]),
              c("gather-ckpt/adam-chunk-rows", ["gather-ckpt", f"{CK}/adam", "-o", f"{CK}/adam-full-chunked",
                                                "--chunk-rows", 7, "-q"]),
              c("info/ckpt-adam.text", ["info", f"{CK}/adam"]))
    plan.run("info, verify, export-feat, convert, gather-ckpt")

    # ---- phase 3: scatter-ckpt, export-ckpt
    plan.task(c("scatter-ckpt/adam-remainder-w5", ["scatter-ckpt", f"{CK}/adam-full", "-o", f"{CK}/adam-w5", "-w", 5]),
              c("info/ckpt-adam-w5.json", ["info", f"{CK}/adam-w5", "--json"]),
              c("verify/ckpt-adam-w5", ["verify", f"{CK}/adam-w5"]))
    plan.task(c("scatter-ckpt/adam-range-w2", ["scatter-ckpt", f"{CK}/adam-full-npy", "-o", f"{CK}/adam-w2-range", "-w", 2,
                                               "--policy", "range", "--json"]),
              c("scatter-ckpt/bad-boundaries", ["scatter-ckpt", f"{CK}/adam-full", "-o", f"{CK}/bad3", "-w", 2,
                                                "--policy", "range", "--boundaries", "0,10,101"]))
    plan.task(c("scatter-ckpt/adam-sharded-w4", ["scatter-ckpt", f"{CK}/adam", "-o", f"{CK}/adam-w4", "-w", 4, "--verify",
                                                 "--chunk-rows", 5, "-q"]),
              c("scatter-ckpt/roundtrip-w3", ["scatter-ckpt", f"{CK}/adam-full", "-o", f"{CK}/adam-w3-again", "-w", 3, "-q"]))
    plan.task(c("scatter-ckpt/lazyadam-range-boundaries", ["scatter-ckpt", f"{CK}/lazyadam-full", "-o", f"{CK}/lazyadam-w3-b",
                                                           "-w", 3, "--policy", "range", "--boundaries", "0,10,40,53"]),
              c("info/ckpt-lazyadam-w3-b.json", ["info", f"{CK}/lazyadam-w3-b", "--json"]))
    plan.task(c("scatter-ckpt/adagrad-remainder-w3", ["scatter-ckpt", f"{CK}/adagrad", "-o", f"{CK}/adagrad-w3", "-w", 3, "-q"]),
              c("export-ckpt/wholegraph-adagrad", ["export-ckpt", f"{CK}/adagrad-w3", "--to", "wholegraph", "-w", 3,
                                                   "--prefix", "ent", "-o", "out/ckpt-export/wg-adagrad", "--json"]),
              c("import-ckpt/from-wg-adagrad-export", ["import-ckpt", "--from", "wholegraph", "out/ckpt-export/wg-adagrad/ent",
                                                       "--num-rows", 89, "--dim", 5, "-w", 3, "--optimizer", "adagrad",
                                                       "--name", "ent", "--state-file", "state_sum=state_sum",
                                                       "-o", f"{CK}/wg-adagrad-back", "-q"]))
    EC = "out/ckpt-export"
    plan.task(c("export-ckpt/wholegraph-lazyadam", ["export-ckpt", f"{CK}/lazyadam", "--to", "wholegraph", "-w", 2,
                                                    "-o", f"{EC}/wg-lazyadam"]),
              c("import-ckpt/from-wg-export", ["import-ckpt", "--from", "wholegraph", f"{EC}/wg-lazyadam/lazy", "--num-rows", 53,
                                               "--dim", 6, "-w", 2, "--optimizer", "lazyadam", "--name", "lazy",
                                               "-o", f"{CK}/wg-back"]),
              c("verify/ckpt-wg-back", ["verify", f"{CK}/wg-back"]),
              c("info/export-dir-refused", ["info", f"{EC}/wg-lazyadam"]))
    plan.task(c("export-ckpt/wholegraph-adam-table-only", ["export-ckpt", f"{CK}/adam", "--to", "wholegraph", "-w", 4,
                                                           "--embedding", "node_emb", "--table-only", "-o", f"{EC}/wg-adam-table",
                                                           "--verify"]),
              c("export-ckpt/wholegraph-adam-refused", ["export-ckpt", f"{CK}/adam", "--to", "wholegraph", "-w", 2,
                                                        "--embedding", "node_emb", "-o", f"{EC}/wg-refused"]),
              c("export-ckpt/wholegraph-several-refused", ["export-ckpt", f"{CK}/adam", "--to", "wholegraph", "-w", 2,
                                                           "--table-only", "-o", f"{EC}/wg-refused2"]))
    plan.task(c("export-ckpt/wholegraph-half-boundaries", ["export-ckpt", f"{CK}/half", "--to", "wholegraph", "-w", 3,
                                                           "--boundaries", "0,5,6,30", "-o", f"{EC}/wg-half", "-q"]))
    plan.task(c("export-ckpt/distdgl-adam", ["export-ckpt", f"{CK}/adam", "--to", "distdgl", "-w", 2, "-o", f"{EC}/dgl-adam"]),
              c("import-ckpt/from-dgl-export", ["import-ckpt", "--from", "torch", f"{EC}/dgl-adam/sparse_opt_{{rank}}",
                                                f"{EC}/dgl-adam/sparse_opt_emb_{{rank}}.pt", "-w", 2, "-o", f"{CK}/dgl-back"]),
              c("info/ckpt-dgl-back.json", ["info", f"{CK}/dgl-back", "--json"]))
    plan.task(c("export-ckpt/distdgl-adamdgl-range", ["export-ckpt", f"{CK}/adamdgl", "--to", "distdgl", "-w", 3, "--policy",
                                                      "range", "--prefix", "opt", "--ntype", "paper", "-o", f"{EC}/dgl-adamdgl",
                                                      "--json"]))
    plan.task(c("export-ckpt/distdgl-adagrad-chunk", ["export-ckpt", f"{CK}/adagrad-full", "--to", "distdgl", "-w", 2,
                                                      "--chunk-rows", 4, "-o", f"{EC}/dgl-adagrad", "-q"]))
    plan.task(c("export-ckpt/distdgl-lazyadam-table-only", ["export-ckpt", f"{CK}/lazyadam", "--to", "distdgl", "-w", 2,
                                                            "--table-only", "-o", f"{EC}/dgl-lazy-table", "-q"]),
              c("import-ckpt/from-dgl-table-only", ["import-ckpt", "--from", "torch", f"{EC}/dgl-lazy-table/sparse_opt_emb_{{rank}}.pt",
                                                    "-w", 2, "--policy", "range", "-o", f"{CK}/dgl-table-back", "--json"]),
              c("export-ckpt/distdgl-lazyadam-refused", ["export-ckpt", f"{CK}/lazyadam", "--to", "distdgl", "-w", 2,
                                                         "-o", f"{EC}/dgl-refused"]))
    plan.run("scatter-ckpt, export-ckpt, import-ckpt of the exports")

    # ---- phase 4: torchrun, 2 ranks, one run at a time (skipped if torchrun cannot start here)
    if not distributed:
        runner.skipped.append("torchrun runs (--no-distributed)")
        return
    start = time.perf_counter()
    tr = dict(prog="torchrun", capture=False, timeout=300)
    rc = runner.run("torchrun/partition-cora-random-halo1", ["partition", "out/chunk/cora", "-p", 4, "--method", "random",
                                                             "--seed", 3, "--halo", 1, "-o", "out/dist/torchrun-cora-random-halo1",
                                                             "-q", "--timeout", 120], **tr)
    if rc != 0:
        print("  torchrun did not run (see logs/cap/torchrun/); skipping the distributed runs", flush=True)
        runner.skipped.append(f"torchrun runs (torchrun exit status {rc})")
        shutil.rmtree(runner.out / "out" / "dist" / "torchrun-cora-random-halo1", ignore_errors=True)
        (runner.out / "cap" / "torchrun-skipped.txt").write_text("torchrun could not run here\n")
        return
    runner.run("torchrun/gather-ckpt-adam", ["gather-ckpt", f"{CK}/adam", "-o", "out/dist/torchrun-gather-adam", "-q",
                                             "--timeout", 120], **tr)
    runner.run("torchrun/scatter-ckpt-adam-w5", ["scatter-ckpt", f"{CK}/adam-full", "-w", 5, "-o", "out/dist/torchrun-scatter-adam-w5",
                                                 "-q", "--timeout", 120], **tr)
    print(f"torchrun: 3 runs, {time.perf_counter() - start:.0f} s", flush=True)


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
            for rule in ([rules[rel]] if rel in rules else []) + path_rules(rel):
                description, fn = NORMALISERS[rule]
                new = fn(data)
                if new != data:
                    data = new
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
    ap.add_argument("-j", "--jobs", type=int, default=2, help="commands run at once (independent ones only) [%(default)s]")
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
    run_all(runner, names, distributed=not args.no_distributed, jobs=args.jobs)

    digests, normalised = digest_tree(out, runner.normalised)
    (out / "digests.json").write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    (out / "normalised.json").write_text(json.dumps(dict(sorted(normalised.items())), indent=1) + "\n")
    seconds = time.perf_counter() - started
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    failed = [s for s in runner.steps if s["rc"] != 0]
    (out / "run.json").write_text(json.dumps({
        "src": str(src) if src else None, "gpart_command": runner.gpart, "import": where, "python": sys.executable,
        "seconds": round(seconds, 1), "children_cpu_seconds": round(cpu, 1), "skipped": runner.skipped, "steps": runner.steps,
    }, indent=1) + "\n")
    print(f"{len(runner.steps)} commands ({len(failed)} with a non-zero exit status, recorded as behaviour), "
          f"{len(digests)} digests, {len(normalised)} normalised files, {seconds:.0f} s wall, {cpu:.0f} s CPU "
          f"-> {out / 'digests.json'}")
    if runner.skipped:
        print("skipped: " + "; ".join(runner.skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
