"""The tests' own layout: no test module (nor conftest.py) is imported by another file of the
suite; what tests share lives in tests/support/ (plain modules) or the nearest conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


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
