"""Modules outside ``npu_data.transforms`` use its public names only: no ``_CropBase``,
``_dispatch``, ``_kernels``, ``_native`` (issue 32). What the loaders need has a public name
(``transforms.pipeline``). The checker reads the syntax trees (imports in functions too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRANSFORMS = ROOT / "npu_data" / "transforms"
# the kernel tooling that still reaches the backends directly (parity, digests, doctor,
# kernel benches): each entry must still offend (the list only shrinks)


def private_imports(tree: ast.AST) -> list[str]:
    """The private ``npu_data.transforms`` names a module imports."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "npu_data.transforms"):
            parts = (node.module or "").split(".")[2:]
            names = [a.name for a in node.names]
            found += [f"{node.module}.{n}" for n in names
                      if n.startswith("_") or any(p.startswith("_") for p in parts)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("npu_data.transforms.")
                      and any(p.startswith("_") for p in a.name.split(".")[2:])]
    return found


def _outside() -> dict[str, list[str]]:
    paths = [p for p in (ROOT / "npu_data").rglob("*.py") if TRANSFORMS not in p.parents]
    out = {}
    for p in paths:
        found = private_imports(ast.parse(p.read_text(encoding="utf-8"), str(p)))
        if found:
            out[str(p.relative_to(ROOT))] = found
    return out


def test_nothing_outside_transforms_imports_a_private_transforms_name() -> None:
    offenders = _outside()
    assert not offenders, f"private transforms names imported outside transforms: " \
        f"{offenders} — give them a public name in npu_data.transforms (e.g. backends)"


def test_the_checker_finds_every_form() -> None:
    for code in ("from npu_data.transforms.crop import _CropBase",
                 "from npu_data.transforms import _dispatch",
                 "from npu_data.transforms._kernels.crop import window_regions",
                 "import npu_data.transforms._native",
                 "def f():\n    from npu_data.transforms._native import backend"):
        assert private_imports(ast.parse(code)), code
    for code in ("from npu_data.transforms import ReadCrop, read_crop",
                 "from npu_data.transforms.pipeline import ReadCrop",
                 "from npu_data.loaders import _private", "import npu_data.transforms"):
        assert not private_imports(ast.parse(code)), code
