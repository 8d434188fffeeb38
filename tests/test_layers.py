"""The floor plan holds: imports point down the layers, every package has a rank among its siblings
and imports only lower-ranked ones, and no two files import each other.

Layers, bottom up (README, "Layout and packaging"): base -> bytes -> formats ->
operations (the packages of gpart/: engines, partition_methods, pipeline, ...) and
runtime beside them -> cli. Inside every package, its sub-packages are ranked
the same way (PACKAGE_RANKS), so a cycle between two packages fails a test even
where no two files import each other. Imports inside functions count as much as
module-level ones. Run as a script to print the layer graph drawn from the code:

    python tests/test_layers.py
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
# package folders of the repository and the dotted names they install as (pyproject's package-dir)
ROOTS = {"gpart": "gpart", "cli": "gpart.cli", "formats": "gpart.formats"}
RANK = {"base": 0, "bytes": 1, "formats": 2, "operations": 3, "runtime": 3, "cli": 4}
ENTRY_POINTS = {"gpart.distributed.__main__"}
# Each package's sub-packages, ranked: a module may import a sibling package only of a lower rank.
PACKAGE_RANKS: dict[str, dict[str, int]] = {
    "gpart": {"base": 0, "bytes": 1, "formats": 2, "collectives": 3, "engines": 3, "partition_methods": 4,
              "runtime": 4, "pipeline": 5, "export": 5, "convert": 5, "distributed": 6, "ckpt": 7,
              "inspection": 8, "cli": 9},
    "gpart.formats": {"files": 0, "sharding": 0, "partition": 1, "filelist": 1, "foreign": 1, "input": 2,
                      "checkpoint": 2},
    "gpart.cli": {"output": 0, "options": 1, "commands": 2},
    "gpart.runtime": {"partition": 0, "embedding": 0, "sampling": 1, "loaders": 2},
}  # `python -m gpart.distributed` starts the CLI, as a console script does


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def layer(module: str) -> str:
    for prefix, name in (("gpart.base", "base"), ("gpart.bytes", "bytes"), ("gpart.formats", "formats"),
                         ("gpart.cli", "cli"), ("gpart.runtime", "runtime")):
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "operations"


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the gpart modules it imports anywhere in its body (a child's import of its own package aside)."""
    def owner(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = owner(name) if name.startswith("gpart") else ""
                if target and target != module and not module.startswith(target + "."):
                    edges[module].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in list(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_runs_up_a_layer():
    edges = imports(modules())
    upward = [f"{a} -> {b}" for a, targets in sorted(edges.items()) for b in sorted(targets)
              if a not in ENTRY_POINTS and RANK[layer(b)] > RANK[layer(a)]]
    assert upward == []


def test_runtime_and_operations_stay_apart_from_the_cli():
    edges = imports(modules())
    into_cli = [f"{a} -> {b}" for a, targets in edges.items() for b in targets
                if layer(b) == "cli" and layer(a) != "cli" and a not in ENTRY_POINTS]
    assert into_cli == []


def test_no_two_files_import_each_other():
    assert cycles(imports(modules())) == []


def packages(mods: dict[str, Path]) -> set[str]:
    return {m for m, path in mods.items() if path.name == "__init__.py"}


def sibling_packages(a: str, b: str, pkgs: set[str]) -> Optional[tuple[str, str, str]]:
    """(parent, a's package, b's package) where a and b lie in two different sub-packages of one parent."""
    pa, pb = a.split("."), b.split(".")
    common = 0
    while common < min(len(pa), len(pb)) and pa[common] == pb[common]:
        common += 1
    if common >= len(pa) or common >= len(pb):
        return None
    parent = ".".join(pa[:common])
    first, second = f"{parent}.{pa[common]}", f"{parent}.{pb[common]}"
    if first in pkgs and second in pkgs:
        return parent, pa[common], pb[common]
    return None


def test_every_package_is_ranked():
    pkgs = packages(modules())
    unranked = sorted(p for p in pkgs if "." in p
                      and p.rpartition(".")[2] not in PACKAGE_RANKS.get(p.rpartition(".")[0], {}))
    assert unranked == []


def test_no_import_runs_up_a_package_rank():
    mods = modules()
    pkgs = packages(mods)
    upward = []
    for a, targets in sorted(imports(mods).items()):
        for b in sorted(targets):
            pair = sibling_packages(a, b, pkgs)
            if pair is None or a in ENTRY_POINTS:
                continue
            parent, pa, pb = pair
            ranks = PACKAGE_RANKS[parent]
            if ranks[pb] >= ranks[pa]:
                upward.append(f"{a} -> {b} ({pa} rank {ranks[pa]}, {pb} rank {ranks[pb]})")
    assert upward == []


def test_a_package_cycle_fails_the_rank_test():
    """Two sibling packages that import each other: one of the two imports runs up a rank."""
    pkgs = {"gpart", "gpart.engines", "gpart.pipeline"}
    forward = sibling_packages("gpart.pipeline.partition", "gpart.engines.metis", pkgs)
    back = sibling_packages("gpart.engines.metis", "gpart.pipeline.partition", pkgs)
    ranks = PACKAGE_RANKS["gpart"]
    assert forward == ("gpart", "pipeline", "engines") and back == ("gpart", "engines", "pipeline")
    assert [ranks[b] >= ranks[a] for _, a, b in (forward, back)] == [False, True]


def test_no_lazy_module_exports():
    lazy = [str(path.relative_to(REPO)) for path in modules().values()
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(path.read_text()).body)]
    assert lazy == []


if __name__ == "__main__":
    graph: dict[tuple[str, str], int] = defaultdict(int)
    for a, targets in imports(modules()).items():
        for b in targets:
            if layer(a) != layer(b):
                graph[layer(a), layer(b)] += 1
    for (a, b), count in sorted(graph.items(), key=lambda kv: (-RANK[kv[0][0]], kv[0])):
        print(f"{a:>10} -> {b:<10} {count:4d} imports")
    sys.exit(0)
