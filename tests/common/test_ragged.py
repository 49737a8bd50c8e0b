"""Ragged columns (``npu_data.common.ragged``): the one ``(values, offsets)`` convention."""

from __future__ import annotations

import numpy as np
import pytest

from npu_data.annotations.table import TextColumnBuilder
from npu_data.common.ragged import (
    concat_runs,
    encode_texts,
    offsets_of,
    offsets_problem,
    ranges_index,
    take_runs,
)


def test_offsets_of_lengths() -> None:
    assert offsets_of(np.array([2, 0, 3])).tolist() == [0, 2, 2, 5]
    assert offsets_of([]).tolist() == [0] and offsets_of([]).dtype == np.int64


@pytest.mark.parametrize("strings", [["ab", "", "c"], ["é", "日本", ""], [], ["x\ud800y"]])
def test_encode_texts_is_utf8_bytes_and_offsets(strings: list[str]) -> None:
    data, off = encode_texts(strings)
    assert data.dtype == np.uint8 and off.dtype == np.int64 and len(off) == len(strings) + 1
    raw = data.tobytes()
    assert [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(off[:-1], off[1:],
                                                                       strict=True)] == strings
    tb = TextColumnBuilder()  # the table's incremental builder: the same column, writable
    for s in strings:
        tb.append(s)
    got, got_off = tb.finish()
    assert got.tobytes() == raw and got_off.tolist() == off.tolist() and got.flags.writeable


def test_ranges_index_take_and_concat() -> None:
    assert ranges_index(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert ranges_index(np.array([3]), np.array([0])).tolist() == []
    values = np.array([10, 11, 20, 30, 31, 32])
    off = offsets_of([2, 1, 0, 3])
    v, o = take_runs(values, off, np.array([3, 0, 2]))
    assert v.tolist() == [30, 31, 32, 10, 11] and o.tolist() == [0, 3, 5, 5]
    v, o = concat_runs([(values, off), (np.array([7]), offsets_of([0, 1]))])
    assert v.tolist() == [*values.tolist(), 7] and o.tolist() == [0, 2, 3, 3, 6, 6, 7]
    assert offsets_problem(o, 6, 7) is None


def test_offsets_problem_names_what_is_wrong() -> None:
    assert "1-D" in offsets_problem(np.zeros((2, 2), np.int64), 3, 0)
    assert "3 expected" in offsets_problem(np.array([0, 1]), 2, 1)
    assert "not 0" in offsets_problem(np.array([1, 1]), 1, 1)
    assert "the values hold 4" in offsets_problem(np.array([0, 3]), 1, 4)
    assert "decrease at run 1 (3 -> 2)" in offsets_problem(np.array([0, 3, 2, 4]), 3, 4)
