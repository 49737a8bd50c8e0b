"""The import graph of npu_data (read with ``ast``, nothing imported): packages import only
the packages below them (ALLOWED, docs/architecture.md "Dependency graph") and no modules
import each other in a cycle. Every import counts: module-level, inside functions, and the
type-only ones under ``if TYPE_CHECKING:`` (they never run, but a reader and a type checker
follow them as any other, so a type-only import upward is the same back edge)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "npu_data"

# part -> the parts it may import (a part is a subpackage or a top-level module of npu_data)
BASE = {"errors", "progress", "common", "batch", "buckets"}  # anyone may import these
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "batch": set(),  # the batch types of the path every batch takes (npu_data/batch.py)
    "buckets": {"errors"},  # the aspect-ratio bucket rule (npu_data/buckets.py)
    "progress": {"errors"},
    "common": {"errors"},
    "device": {"common", "errors"},
    "codecs": BASE,  # JPEG decode and re-encode (compiled libjpeg-turbo)
    "buffers": BASE | {"device"},  # host batch buffers: shared memory in workers, pinned
    # the kinds are the batch's types: transforms.geometry dispatches over the registry and
    # hands each kind its kernels (as torchvision's transforms over its tv_tensors)
    "kinds": BASE | {"buffers", "device"},
    "transforms": BASE | {"device", "kinds"},
    "annotations": BASE | {"kinds"},
    "shards": BASE | {"annotations", "codecs", "kinds"},
    # the readers (npu_data.readers): images read through a request's crop plan into the
    # batch buffer, JPEG boxes decoded alone; the transforms draw the plan, the loaders call
    "readers": BASE | {"buffers", "codecs", "transforms"},
    "loaders": BASE | {"annotations", "buffers", "codecs", "device", "kinds", "readers",
                       "shards", "transforms"},
    # frozen encoders run once into a latents store (npu_data.latents): reads shards,
    # preprocesses with the transforms, collates with the loaders
    "latents": BASE | {"device", "loaders", "shards", "transforms"},
    "formats": BASE | {"annotations", "buffers", "codecs", "device", "kinds", "loaders",
                       "readers", "shards", "transforms"},
    # the parity suite (npu_data.parity): the kernels, the pipeline and the DataLoader against
    # the Pillow oracle (transforms.oracle); its precision modes; the kernel digests
    "parity": BASE | {"device", "loaders", "transforms"},
    # pictures of samples, batches and latents (npu_data.previews): npu-data show and demo
    "previews": BASE | {"device", "kinds", "transforms"},
    "tools": BASE | {"annotations", "buffers", "codecs", "device", "formats", "kinds",
                     "loaders", "parity", "readers", "shards", "transforms"},
    # the bench suite (npu_data.bench): measures the parts above; only commands.bench runs it
    "bench": BASE | {"annotations", "buffers", "codecs", "device", "formats", "kinds",
                     "latents", "loaders", "parity", "readers", "shards", "tools",
                     "transforms"},
    "commands": BASE | {"annotations", "bench", "buffers", "codecs", "device", "formats",
                        "kinds", "latents", "loaders", "parity", "previews", "readers",
                        "shards", "tools", "transforms"},
}
ALLOWED["cli"] = ALLOWED["commands"] | {"commands"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The npu_data module ``name`` lives in (itself, or the nearest package above it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, text: str | None = None) -> list[tuple[str, int]]:
    """(imported npu_data module, line) for every import in ``module``, wherever it is (module
    level, a function, ``if TYPE_CHECKING:``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    text = path.read_text(encoding="utf-8") if text is None else text
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:  # `from pkg import mod` imports the module pkg.mod
                full = f"{source}.{a.name}"
                found.append((full if full in MODULES else source, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(text, str(path)))
    out = []
    for name, line in found:
        target = _resolve(name) if name.split(".")[0] == "npu_data" else None
        if target and target != module:
            out.append((target, line))
    return out


EDGES = {m: _imports(m, p) for m, p in MODULES.items()}


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _where(src: str, dst: str) -> str:
    line = min(ln for t, ln in EDGES[src] if t == dst)
    return f"{MODULES[src].relative_to(ROOT.parent)}:{line}: {src} -> {dst}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state and (found := walk(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := walk(n)):
            return found
    return None


def test_every_part_is_placed() -> None:
    parts = {_part(m) for m in MODULES} - {""}
    assert parts <= set(ALLOWED), (
        f"{sorted(parts - set(ALLOWED))}: new part(s) of npu_data — add them to ALLOWED in "
        "tests/test_import_graph.py and to docs/architecture.md")


def test_the_bench_suite_is_read_too() -> None:
    """The bench suite lives in the package (npu_data.bench), so the checks above read it: its
    modules are in the graph with their function-level imports (stages -> extras is one)."""
    bench = {m for m in MODULES if _part(m) == "bench"}
    assert {"npu_data.bench.suite", "npu_data.bench.stage_times", "npu_data.bench.extras"} <= bench
    assert "npu_data.bench.extras" in {t for t, _ in EDGES["npu_data.bench.stage_times"]}
    assert any(_part(t) == "bench" for t, _ in EDGES["npu_data.commands.bench"])
    # the cycle the suite had: extras imported stages inside a function (dali_plan)
    text = "def dali_plan():\n    from npu_data.bench.stage_times import StagePlan\n"
    graph = {m: {t for t, _ in targets} for m, targets in EDGES.items()}
    graph["npu_data.bench.extras"] |= {t for t, _ in _imports(
        "npu_data.bench.extras", MODULES["npu_data.bench.extras"], text)}
    assert set(_cycle(graph) or []) == {"npu_data.bench.extras", "npu_data.bench.stage_times"}


def test_allowed_directions_have_no_cycle() -> None:
    assert _cycle(ALLOWED) is None, f"ALLOWED has a cycle: {_cycle(ALLOWED)}"


def _upward(edges: dict[str, list[tuple[str, int]]]) -> list[tuple[str, str]]:
    """The (source, target) module pairs of ``edges`` against the allowed directions."""
    return sorted({(src, dst) for src, targets in edges.items() for dst, _ in targets
                   if _part(src) and _part(dst) and _part(src) != _part(dst)
                   and _part(dst) not in ALLOWED.get(_part(src), set())})


def test_parts_import_only_parts_below_them() -> None:
    bad = [_where(src, dst) for src, dst in _upward(EDGES)]
    if bad:
        pytest.fail("imports against the allowed directions (ALLOWED in "
                    "tests/test_import_graph.py):\n" + "\n".join(bad), pytrace=False)


def test_the_kinds_import_nothing_above_them_not_even_for_typing() -> None:
    """The kinds sit below annotations and transforms; what the hooks are handed is typed by
    ``kinds.protocols``, so no kinds module imports either part (``if TYPE_CHECKING:`` too)."""
    kinds = [m for m in MODULES if _part(m) == "kinds"]
    assert "npu_data.kinds.protocols" in kinds and len(kinds) > 10
    above = {t for m in kinds for t, _ in EDGES[m]
             if _part(t) in ("annotations", "transforms", "loaders", "shards", "tools")}
    assert above == set()
    # and the reader sees such an import where it would be: a type-only one, as one of the
    # kinds had before the Protocols (base.py imported annotations.results for its hooks)
    text = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from npu_data.annotations.results import Context\n")
    edges = {**EDGES, "npu_data.kinds.base": _imports("npu_data.kinds.base",
                                                       ROOT / "kinds" / "base.py", text)}
    assert _upward(edges) == [("npu_data.kinds.base", "npu_data.annotations.results")]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per group of modules that import each other (found one by one)."""
    graph = {n: set(t) for n, t in graph.items()}
    out = []
    while (cycle := _cycle(graph)) is not None:
        out.append(cycle)
        graph[cycle[0]].discard(cycle[1])  # drop one edge, look for the next cycle
    return out


def test_no_module_cycle() -> None:
    graph = {m: {t for t, _ in targets} for m, targets in EDGES.items()}
    cycles = _cycles(graph)
    if cycles:
        pytest.fail("import cycles:\n" + "\n\n".join(
            "\n".join(_where(a, b) for a, b in zip(c, c[1:], strict=False)) for c in cycles),
            pytrace=False)


def test_the_reader_counts_every_import() -> None:
    """Module-level, function-level, relative and TYPE_CHECKING imports all count."""
    text = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from npu_data.shards import reader\nelse:\n    import npu_data.errors\n"
            "from npu_data import device as dev\ndef f():\n    from .format import DATA\n")
    got = _imports("npu_data.shards.x", ROOT / "shards" / "x.py", text)
    assert sorted(got) == [("npu_data.device", 6), ("npu_data.errors", 5),
                           ("npu_data.shards.format", 8), ("npu_data.shards.reader", 3)]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}}) is None
    assert len(_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == 2
