"""House rules the code keeps (README, "Layout and packaging"): modules stay small enough to read, and
functions that need many settings take them as an options dataclass rather than a long parameter list.

Two kinds of signature keep their keywords, by design: click commands (click passes every option as a
parameter) and the library's documented keyword entry points listed in KEYWORD_ENTRY_POINTS, which
mirror the APIs users know (PyG's NeighborLoader, sqlite-utils' one function per command) and pack their
keywords into one dataclass at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("gpart", "cli", "formats")
MAX_MODULE_LINES = 400
MAX_PARAMETERS = 9
KEYWORD_ENTRY_POINTS = {
    "gpart/pipeline/partition:partition_graph",  # -> PartitionRequest
    "gpart/export/features:export_feat",  # -> FeatExport
    "gpart/convert/__init__:convert_partitions",  # -> ConvertRequest
    "gpart/distributed/partition_chunks:partition_chunks",  # -> ChunksRequest
    "gpart/runtime/loaders/node:DistNeighborLoader",  # PyG's NeighborLoader keywords -> NodeLoaderOptions
    "gpart/runtime/loaders/link:DistLinkNeighborLoader",  # PyG's LinkNeighborLoader keywords -> LinkLoaderOptions
    "gpart/runtime/partition/load:load_partition",  # -> LoadOptions
}


def source_files() -> list[Path]:
    return sorted(p for root in SOURCE_ROOTS for p in (REPO / root).rglob("*.py"))


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")])


def is_triton_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with triton.jit: its parameters are the kernel's launch arguments (pointers, sizes, constexprs),
    which no options dataclass can carry."""
    return any(isinstance(d, ast.Attribute) and d.attr == "jit" and isinstance(d.value, ast.Name) and d.value.id == "triton"
               for d in fn.decorator_list)


def is_click_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with a click option, argument or command (click's own decorators or the CLI's wrappers of them)."""
    for deco in fn.decorator_list:
        call = deco.func if isinstance(deco, ast.Call) else deco
        name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
        if any(word in name for word in ("option", "argument", "command")):
            return True
    return False


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in source_files() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_long_parameter_lists_are_option_dataclasses():
    long = []
    for path in source_files():
        rel = path.relative_to(REPO).with_suffix("").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMETERS:
                where = f"{rel}:{node.name}"
                if not is_click_command(node) and not is_triton_kernel(node) and where not in KEYWORD_ENTRY_POINTS:
                    long.append(f"{where} ({parameter_count(node)} parameters)")
    assert long == []


def test_the_rules_see_what_they_guard():
    """The two checks above read real code: the CLI's partition command is long and exempt as a click command."""
    tree = ast.parse((REPO / "cli" / "commands" / "partition.py").read_text())
    commands = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "partition"]
    assert commands and is_click_command(commands[0]) and parameter_count(commands[0]) > MAX_PARAMETERS
    assert len(source_files()) > 100
