"""The tests' own layout: laid out like the package (the tests of ``npu_data/<part>/`` in
``tests/<part>/``), and no test module (nor conftest.py) is imported by another file of the
suite; what tests share lives in tests/support/ (plain modules) or the nearest conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "npu_data"
# folders of the suite that mirror no room: shared helpers; tests against a live Label Studio
NOT_ROOMS = {"support", "integration"}


def _is_test_module(name: str) -> bool:
    return name == "conftest" or name.startswith("test_")


def _test_module_imports(path: Path) -> list[str]:
    """``line: module`` of each import in ``path`` that names a test module or a conftest:
    by package (``tests.loaders.test_crop_read``), by bare name (``test_crop_read``, what
    pytest's rootdir on ``sys.path`` would resolve) or relatively (``.test_crop_read``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            # ``from . import test_x`` / ``from tests.x import test_y`` name modules too
            names = [base] + [f"{base}.{a.name}" for a in node.names if _is_test_module(a.name)]
        else:
            continue
        for name in names:
            if any(_is_test_module(part) for part in name.split(".") if part):
                out.append(f"{node.lineno}: {name}")
    return out


def test_no_test_module_imports_another() -> None:
    bad = [f"{path.relative_to(TESTS.parent)}:{hit}" for path in sorted(TESTS.rglob("*.py"))
           for hit in _test_module_imports(path)]
    assert not bad, ("these import a test module or a conftest (move what they share to "
                     "tests/support/ or the nearest conftest.py):\n" + "\n".join(bad))


def test_the_check_sees_every_form(tmp_path: Path) -> None:
    forms = ["from tests.loaders.test_crop_read import _batches",
             "from test_device_rules import CASES", "import tests.shards.test_remote",
             "from .test_wds import x", "from tests.latents.conftest import encode_kwargs",
             "from tests.latents import conftest"]
    path = tmp_path / "test_example.py"
    path.write_text("\n".join([*forms, "from tests.support.compare import same_batch",
                               "import torch.testing", "from npu_data.shards import reader"]))
    assert [hit.split(": ", 1)[0] for hit in _test_module_imports(path)] == [
        str(i) for i in range(1, len(forms) + 1)]


def _stray_folders(tests: Path, package: Path) -> list[str]:
    """The folders of ``tests`` holding test modules that name no folder of ``package``."""
    folders = sorted({p.parent.relative_to(tests) for p in tests.rglob("test_*.py")})
    return [str(f) for f in folders if f.parts and f.parts[0] not in NOT_ROOMS
            and not (package / f / "__init__.py").is_file()]


def test_test_folders_mirror_the_rooms() -> None:
    stray = _stray_folders(TESTS, PACKAGE)
    assert not stray, (f"{stray}: test folders that name no package of npu_data — the tests "
                       "of npu_data/<part>/ live in tests/<part>/ (docs/architecture.md, Tests)")
    # the readers' room has its tests beside the rooms it sits between
    assert (TESTS / "readers" / "test_read_crop.py").is_file()


def test_the_mirror_check_sees_a_stray_folder(tmp_path: Path) -> None:
    (tmp_path / "npu_data" / "readers").mkdir(parents=True)
    (tmp_path / "npu_data" / "readers" / "__init__.py").write_text("")
    for folder in ("readers", "reader", "support", "integration"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / "test_x.py").write_text("")
    (tmp_path / "tests" / "test_top.py").write_text("")
    assert _stray_folders(tmp_path / "tests", tmp_path / "npu_data") == ["reader"]
