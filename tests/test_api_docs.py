"""The API reference (mkdocs.yml, pages in docs/api/) documents every name of
``npu_data.__all__`` and ``npu_data.transforms.__all__``: each has an entry on a page (itself or
its module), renders in the site ``mkdocs build --strict`` builds (griffe's docstring warnings,
e.g. an argument documented that the signature lacks, fail the build), and has a Google-style
docstring with the sections its signature and body need: ``Args:`` naming every parameter
(a class's constructor's included), ``Returns:`` (or ``Yields:``) when it returns a value,
``Raises:`` naming each exception class it raises itself. The code is read with griffe, as
the site is; nothing is imported but the two ``__all__`` lists."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import griffe
import pytest

import npu_data
import npu_data.transforms

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))
PUBLIC = sorted({f"npu_data.{n}" for n in npu_data.__all__}
                | {f"npu_data.transforms.{n}" for n in npu_data.transforms.__all__})


def _load() -> griffe.Module:
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)], docstring_parser=griffe.Parser.google)
    package = loader.load("npu_data")
    loader.resolve_aliases(implicit=False, external=False)
    assert isinstance(package, griffe.Module)
    return package


PACKAGE = _load()


def _get(path: str) -> griffe.Object:
    try:
        obj = PACKAGE[path.removeprefix("npu_data.")]
    except KeyError:
        pytest.fail(f"{path} is invisible to type checkers and the API reference: a lazy name "
                    "needs its `if TYPE_CHECKING:` import in the package's __init__.py",
                    pytrace=False)
    return obj.final_target if obj.is_alias else obj


def _entries() -> list[str]:
    """The identifiers the pages render (``::: npu_data.X``)."""
    return [m for p in PAGES for m in re.findall(r"^::: (\S+)", p.read_text(), re.M)]


def _members(module: griffe.Module) -> list[griffe.Object]:
    """What the site renders of a module: its ``__all__`` or, without one, the public names it
    defines (not those it imports)."""
    names = [n for n, m in module.members.items() if not n.startswith("_") and not m.is_alias]
    if module.exports is not None:
        names = [n if isinstance(n, str) else n.name for n in module.exports]
    return [_get(f"{module.path}.{n}") for n in names]


def _documented() -> dict[str, str]:
    """Target path -> the identifier under which the site renders it."""
    out = {}
    for entry in _entries():
        obj = _get(entry)
        out.setdefault(obj.path, entry)
        if obj.is_module:
            for m in _members(obj):  # type: ignore[arg-type]
                out.setdefault(m.path, f"{entry}.{m.name}")
    return out


def _sections(obj: griffe.Object) -> list[griffe.DocstringSection]:
    return obj.docstring.parsed if obj.docstring else []


def _named(obj: griffe.Object, kinds: tuple[str, ...]) -> set[str]:
    """The names an object's docstring lists under sections of ``kinds``."""
    return {p.name.lstrip("*") for s in _sections(obj) if s.kind.value in kinds
            for p in s.value}


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> range:
    """The lines of a function definition, its decorators included."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return range(first, (node.end_lineno or node.lineno) + 1)


def _raised(func: griffe.Function) -> set[str]:
    """The exception classes ``func``'s own body raises (nested functions not counted)."""
    if func.filepath is None or func.lineno is None or isinstance(func.filepath, list):
        return set()
    tree = ast.parse(func.filepath.read_text(encoding="utf-8"))
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name == func.name and func.lineno in _lines(n)), None)
    if node is None:  # made by griffe (a dataclass's __init__)
        return set()
    out: set[str] = set()

    def visit(n: ast.AST) -> None:
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          | ast.ClassDef):
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                name = exc.id if isinstance(exc, ast.Name) else (
                    exc.attr if isinstance(exc, ast.Attribute) else "")
                if name[:1].isupper():  # a class; not a variable (``raise err``, ``raise cls(...)``)
                    out.add(name)
            visit(child)

    visit(node)
    return out


def _raises_listed(obj: griffe.Object) -> set[str]:
    return {str(r.annotation).rpartition(".")[2] for s in _sections(obj)
            if s.kind.value == "raises" for r in s.value}


def _and_bases(name: str) -> set[str]:
    """An exception class of ``npu_data.errors`` and its bases there (``UserError`` listed
    under Raises: covers its subclasses)."""
    errors = PACKAGE["errors"]
    cls = errors.members.get(name)
    if not isinstance(cls, griffe.Class):
        return {name}
    return {name}.union(*(_and_bases(str(b).rpartition(".")[2]) for b in cls.bases))


def _problems_of_function(func: griffe.Function, owner: griffe.Object | None = None
                          ) -> list[str]:
    """What ``func``'s docstring lacks (``owner``: the class whose docstring may hold the
    constructor's sections, as the site merges them; a dataclass's fields are its
    ``Attributes:``)."""
    docs = [func] + ([owner] if owner is not None else [])
    kinds = ("parameters", "other_parameters")
    if owner is not None and any("dataclass" in str(d.value) for d in owner.decorators):
        kinds += ("attributes",)
    documented = set().union(*(_named(d, kinds) for d in docs))
    params = [p.name for p in func.parameters if p.name not in ("self", "cls")]
    out = [f"argument {p!r} not under Args:" for p in params if p not in documented]
    returns = str(func.returns) if func.returns is not None else "None"
    if (func.name != "__init__" and returns not in ("None", "NoReturn")
            and not any(s.kind.value in ("returns", "yields") for d in docs
                        for s in _sections(d))):
        out.append(f"returns {returns} but has no Returns: section")
    listed = set().union(*(_raises_listed(d) for d in docs))
    out += [f"raises {e} but Raises: does not list it" for e in sorted(_raised(func))
            if not _and_bases(e) & listed]
    return out


def _problems(obj: griffe.Object) -> list[str]:
    if not (obj.docstring and obj.docstring.value.strip()):
        return ["no docstring"]
    if obj.is_function:
        return _problems_of_function(obj)  # type: ignore[arg-type]
    if obj.is_class:
        init = obj.all_members.get("__init__")  # type: ignore[attr-defined]
        init = init.final_target if init is not None and init.is_alias else init
        if isinstance(init, griffe.Function) and init.parent is not None and (
                init.parent.path.startswith("npu_data.")):
            return _problems_of_function(init, owner=obj)
    return []


def _where(obj: griffe.Object) -> str:
    path = Path(str(obj.filepath)).relative_to(ROOT) if obj.filepath else "?"
    return f"{path}:{obj.lineno or 1}: {obj.path}"


def test_every_public_name_has_a_page_entry() -> None:
    documented = _documented()
    missing = [name for name in PUBLIC if _get(name).path not in documented]
    assert PAGES and not missing, (
        f"not in the API reference: {missing} — add `::: name` to a page in docs/api/")


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_has_the_sections_its_signature_needs(name: str) -> None:
    obj = _get(name)
    objects = [obj] + (_members(obj) if obj.is_module else [])  # type: ignore[arg-type]
    bad = [f"{_where(o)}: {p}" for o in objects for p in _problems(o)]
    if bad:
        pytest.fail("docstrings (Google style) lacking what the signature needs:\n"
                    + "\n".join(bad), pytrace=False)


def test_the_checks_find_what_they_must(tmp_path: Path) -> None:
    """Negative control: an argument left out, a missing Returns:, an unlisted raise (one in
    a nested function is not the function's own); then the same, documented."""
    body = ('    if a < 0:\n        raise ValueError("a")\n    def g():\n'
            '        raise KeyError(b)\n    try:\n        pass\n    except OSError as err:\n'
            '        raise err\n    return a + b\n')
    bare = 'def f(a: int, b: int) -> int:\n    """Sum.\n\n    Args:\n        a: one.\n    """\n'
    full = ('def f(a: int, b: int) -> int:\n    """Sum.\n\n    Args:\n        a: one.\n'
            '        b: two.\n\n    Returns:\n        a + b.\n\n    Raises:\n'
            '        ValueError: a is negative.\n    """\n')
    found = []
    for code in (bare + body, full + body):
        path = tmp_path / "m.py"
        path.write_text(code)
        module = griffe.visit("m", path, code, docstring_parser=griffe.Parser.google)
        found.append(_problems_of_function(module["f"]))
    assert found == [["argument 'b' not under Args:", "returns int but has no Returns: section",
                      "raises ValueError but Raises: does not list it"], []]


@pytest.mark.slow
def test_the_site_builds_strict_and_renders_every_entry(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = "".join(p.read_text() for p in site.rglob("*.html"))
    absent = [e for e in sorted(set(_documented().values())) if f'id="{e}"' not in html]
    assert not absent, f"page entries the built site does not render: {absent}"
