"""Arguments out of range are refused where they are given (``__init__``), in one line
naming the transform and the range — not a traceback, a singular map or a memory error at
the first batch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from npu_data import transforms as T
from npu_data.errors import UserError

CASES: dict[str, tuple[Callable[[], object], str]] = {
    "GaussianBlur float size": (lambda: T.GaussianBlur(3.0),  # type: ignore[arg-type]
                                "kernel_size must be an int or"),
    "RandomAffine shear 90": (lambda: T.RandomAffine(0, shear=90), "strictly between -90"),
    "RandomAffine shear -90 on y": (lambda: T.RandomAffine(0, shear=(0, 0, -90, 0)),
                                    "strictly between -90"),
    "RandomIoUCrop trials": (lambda: T.RandomIoUCrop(trials=10**7), "at most 4096"),
    "RandomZoomOut side_range": (lambda: T.RandomZoomOut(side_range=(1e6, 1e6)), "max <= 16"),
    "ScaleJitter target": (lambda: T.ScaleJitter(10**6), "over 32768 pixels a side"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_out_of_range_arguments_are_one_line_at_construction(case: str) -> None:
    make, expect = CASES[case]
    with pytest.raises(UserError, match=expect) as err:
        make()
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(case.split()[0] + ":")  # names the transform


def test_the_ranges_keep_what_torchvision_allows() -> None:
    T.RandomAffine(0, shear=89.0)
    T.RandomZoomOut(side_range=(1.0, 4.0))
    T.ScaleJitter((1024, 1024), scale_range=(0.1, 2.0))
    T.RandomIoUCrop(trials=40, rounds=8)
    T.GaussianBlur((5, 3))
