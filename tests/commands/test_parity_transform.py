"""``npu-data parity --transform MODULE:NAME``: a user's transform against its own reference
(alone, in a pipeline with a crop and a flip, through the DataLoader at read and after read,
its geometry), and one line for each mistake in naming it. In process: ``cli.main``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from npu_data.cli import main
from npu_data.parity import check, check_all

GOOD = '''
import torch

from npu_data.transforms import Trait, Transform


class RandomInvert(Transform):
    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def make_params(self, sizes, rng):
        return {"invert": torch.from_numpy(rng.uniform(1)[:, 0] < self.p)}

    def apply(self, batch, params):
        image = batch["image"]
        invert = params["invert"].to(image.device).view(-1, 1, 1, 1)
        return {**batch, "image": torch.where(invert, 255 - image, image)}

    def reference(self, image, params, index):
        return 255 - image if bool(params["invert"][index]) else image


def strong():
    return RandomInvert(0.9)


def pipeline():  # one that starts with a crop: checked as it is
    from npu_data.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

    return Compose([RandomResizedCrop(32), RandomInvert(), RandomHorizontalFlip()])
'''

# its reference is one level off where it inverts; the other moves boxes it says it keeps
WRONG = GOOD.replace("return 255 - image if", "return (255 - image) | 1 if") + '''

class ShiftsBoxes(Transform):
    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})

    def make_params(self, sizes, rng):
        return {}

    def apply(self, batch, params):
        if "boxes.xyxy" not in batch:  # the suite's batches have no boxes
            return batch
        return {**batch, "boxes.xyxy": batch["boxes.xyxy"] + 1}

    def reference(self, image, params, index):
        return image
'''

# says it commutes with a mirror (PER_PIXEL) but blanks each sample's left column: right
# alone, wrong where Compose folds the flip after it into the crop before it
LEFT_EDGE = '''
from npu_data.transforms import Trait, Transform


class BlankLeftEdge(Transform):
    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})

    def make_params(self, sizes, rng):
        return {}

    def apply(self, batch, params):
        image = batch["image"].clone()
        image[..., 0] = 0
        return {**batch, "image": image}

    def reference(self, image, params, index):
        out = image.copy()
        out[:, 0] = 0
        return out
'''

MISTAKES = '''
from npu_data.transforms import Trait, Transform


class NeedsArgs(Transform):
    def __init__(self, p):
        self.p = p


class NoReference(Transform):
    def make_params(self, sizes, rng):
        return {}

    def apply(self, batch, params):
        return batch


class NoDraws(Transform):  # deterministic, but without make_params
    traits = frozenset({Trait.PER_PIXEL, Trait.SAME_SIZE})

    def apply(self, batch, params):
        return {**batch, "image": batch["image"] // 2}

    def reference(self, image, params, index):
        return image // 2


def fails():
    raise RuntimeError("no transform today")


def number():
    return 3


LIMIT = 5
'''

ARGS = ["--device", "cpu", "--batches", "1", "--batch-size", "4"]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the modules above, the current folder; what it imported forgotten."""
    for name, text in (("good", GOOD), ("wrong", WRONG), ("left_edge", LEFT_EDGE),
                       ("mistakes", MISTAKES),
                       ("raises", "raise ValueError('not today')\n"),
                       ("needs_missing", "import npu_data_no_such_package\n"),
                       ("broken", "def f(:\n")):
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name in ("good", "wrong", "mistakes") or name.startswith("_npu_data_user_"):
            del sys.modules[name]


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by name: the name, then its five cells."""
    rows = {}
    for line in out.splitlines():
        cells = line.rsplit(None, 5)
        if len(cells) == 6 and cells[-1] in ("PASS", "FAIL"):
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_a_good_transform_passes_every_row(folder: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # a module by name (the current folder first) and a file's function
    code = main(["parity", "--transform", "good:RandomInvert",
                 "--transform", f"{folder / 'good.py'}:strong", "--transform", "good:pipeline",
                 *ARGS])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rows = _rows(out)
    for name in ("RandomInvert()", "RandomInvert(p=0.9)"):
        for suffix in ("", " + crop, flip", " loader, crop at read", " loader, after read",
                       " geometry"):
            assert rows[name + suffix] == ["0", "0", "0.000%", "exact", "PASS"], (name, out)
    assert "Compose([RandomResizedCrop(size=64), RandomInvert(), RandomHorizontalFlip()])" in out
    mine = "Compose([RandomResizedCrop(size=32), RandomInvert(), RandomHorizontalFlip()])"
    assert f"good:pipeline: {mine}, a pipeline that starts with a crop, as it is" in out
    assert [name for name in rows if name.startswith(mine)] == [
        mine, f"{mine} loader, crop at read", f"{mine} loader, after read", f"{mine} geometry"]
    assert all(rows[name][-1] == "PASS" and rows[name][0] == "0" for name in rows)
    assert "all 14 rows within tolerance" in out


@pytest.mark.slow
def test_a_wrong_reference_or_geometry_fails_naming_the_transform(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["parity", "--transform", "wrong.py:RandomInvert",
                 "--transform", "wrong.py:ShiftsBoxes", *ARGS])
    out = capsys.readouterr().out
    assert code == 1, out
    rows = _rows(out)
    for suffix in ("", " + crop, flip", " loader, crop at read", " loader, after read"):
        assert rows["RandomInvert()" + suffix][0] == "1" and rows["RandomInvert()" + suffix][
            -1] == "FAIL", out
    assert rows["RandomInvert() geometry"][-1] == "PASS"
    assert rows["ShiftsBoxes() loader, crop at read"][-1] == "PASS"  # its pixels are right
    assert rows["ShiftsBoxes() geometry"][0] == "1" and rows["ShiftsBoxes() geometry"][
        -1] == "FAIL"  # its boxes moved though it moves no pixels
    fail = next(line for line in out.splitlines() if line.startswith("FAIL: "))
    assert "RandomInvert() loader, crop at read" in fail and "ShiftsBoxes() geometry" in fail
    # a tolerance lets the one-level reference pass
    assert main(["parity", "--transform", "wrong.py:RandomInvert", "--tolerance", "1", "1",
                 *ARGS]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(("spec", "says"), [
    ("good.py", "expected MODULE:NAME, e.g. my_transforms:RandomInvert"),
    ("no_such_module:T", "no module named 'no_such_module' — run from the folder that holds "
                         "it, add that folder to PYTHONPATH, or give the path of its .py file"),
    ("missing.py:T", "no file missing.py — give the path of the .py file"),
    ("good:Missing", "good has no 'Missing' (it defines RandomInvert) — name a Transform "
                     "subclass"),
    ("mistakes.py:NeedsArgs", "its constructor needs arguments (p) — give them defaults, or "
                              "name a function of no arguments"),
    ("mistakes.py:LIMIT", "5 (of type int), not an npu_data transform — subclass "
                          "npu_data.transforms.Transform"),
    ("mistakes.py:number", "number() returned 3 (of type int), not an npu_data transform"),
    ("mistakes.py:Trait", "the class Trait, not an npu_data transform"),
    ("mistakes.py:fails", "fails() raised RuntimeError: no transform today ("),
    ("raises.py:T", "importing raises.py raised ValueError: not today ("),
    ("needs_missing:T", "importing needs_missing raised ModuleNotFoundError: No module named "
                        "'npu_data_no_such_package'"),
    ("broken.py:T", "importing broken.py raised SyntaxError: "),
])
def test_each_mistake_is_one_line(folder: Path, capsys: pytest.CaptureFixture[str], spec: str,
                                  says: str) -> None:
    assert main(["parity", "--transform", spec, *ARGS]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --transform {spec}: "), err
    assert says in lines[0], lines[0]


def test_a_missing_contract_name_is_one_line(folder: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "--transform", "mistakes.py:NoReference", *ARGS]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["error: --transform mistakes.py:NoReference: NoReference has no CPU "
                     "reference (reference) — define it (docs/architecture.md, \"Writing a "
                     "transform\")"]
    # right alone and in its pipeline (drawn from a generator), but no crop at read
    assert main(["parity", "--transform", "mistakes.py:NoDraws", *ARGS]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: --transform mistakes.py:NoDraws: NoDraws() draws no keyed parameters (a stage "
        "without make_params)") and "returns {} from make_params" in lines[0], lines


def test_check_all_without_a_dataset(folder: Path) -> None:
    from npu_data.parity.load import load_transform

    good, wrong = load_transform("good.py:strong"), load_transform("wrong.py:RandomInvert")
    rows = check_all(good, batches=1, batch_size=4)
    assert [r.kernel for r in rows] == ["RandomInvert(p=0.9)", "RandomInvert(p=0.9) + crop, flip"]
    assert all(r.passed and r.max == 0 for r in rows)
    assert rows[0] == check(good, batches=1, batch_size=4)
    assert [r.passed for r in check_all(wrong, batches=1, batch_size=4)] == [False, False]
    alone, fused = check_all(load_transform("left_edge.py:BlankLeftEdge"), batch_size=4)
    assert alone.passed and alone.max == 0  # right alone: its traits are what is wrong
    assert not fused.passed and fused.kernel == "BlankLeftEdge() + crop, flip"


def test_a_negative_tolerance_is_one_line(folder: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "--transform", "good:RandomInvert", "--tolerance", "-1", "0",
                 *ARGS]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --tolerance must be two numbers >= 0, got -1 0"]
