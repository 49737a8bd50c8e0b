"""User errors for two audiences: the options that fix a mistake are data, spelled as flags
by the CLI and as keywords for Python callers; argument mistakes are the built-ins Python
callers catch."""

from __future__ import annotations

import pickle

import pytest

from npu_data.errors import (
    DataCorruption,
    UserError,
    UserFileNotFoundError,
    UserTypeError,
    UserValueError,
    flag,
    flags,
    keyword,
    render,
    spelled_as,
)


def test_options_are_spelled_for_the_audience() -> None:
    e = UserValueError("d/: not empty — pass {resume} or choose another {out} (a {b} {c})",
                       option=("resume", "out"))
    assert e.options == ("resume", "out") and "{resume}" in e.template
    assert str(e) == "d/: not empty — pass resume= or choose another out= (a {b} {c})"
    with spelled_as(flag):
        assert str(e) == "d/: not empty — pass --resume or choose another --out (a {b} {c})"
    assert str(e) == e.render(keyword)  # the spelling ends with its block
    assert e.render(flag).startswith("d/: not empty — pass --resume")


def test_values_and_aliases() -> None:
    cli = flags({"timeout": "--download-timeout", "restart_markers=False": "--keep-jpeg-bytes"})
    text = "{shard_size=0} {timeout=-1} {restart_markers=False} {strict=True} {timeout}"
    names = ("shard_size", "timeout", "restart_markers", "strict")
    assert render(text, names, keyword) == (
        "shard_size=0 timeout=-1 restart_markers=False strict=True timeout=")
    assert render(text, names, cli) == (
        "--shard-size 0 --download-timeout -1 --keep-jpeg-bytes --strict --download-timeout")
    # an option not listed, or a value with braces, stays as written
    assert render("{x} {shard_size={1}}", ("shard_size",), cli) == "{x} {shard_size={1}}"


@pytest.mark.parametrize(("cls", "builtin"), [(UserValueError, ValueError),
                                              (UserTypeError, TypeError),
                                              (UserFileNotFoundError, FileNotFoundError),
                                              (DataCorruption, UserError)])
def test_argument_errors_are_the_builtins_and_survive_pickling(cls: type, builtin: type) -> None:
    e = cls("x: {max_side=0} must be at least 1", 2, option="max_side")
    assert isinstance(e, UserError) and isinstance(e, builtin) and e.exit_code == 2
    back = pickle.loads(pickle.dumps(e))  # raised in a worker process, shown in the parent
    assert type(back) is cls and back.options == ("max_side",) and back.exit_code == 2
    with spelled_as(flag):
        assert str(back) == "x: --max-side 0 must be at least 1"


def test_rejection_reasons_name_the_option_for_the_audience() -> None:
    """Reasons are strings written as they are made (rejected.jsonl): spelled then."""
    import numpy as np

    from npu_data.annotations import results as R

    def reason(spelling: object | None) -> str:
        ctx = R.Context(lambda c, n: 0, lambda cs, ns: [], clip=False)
        b = R.Batch(*([np.zeros(1, np.int64)] * 5), ["r1"], [{}], [{}], [None])
        if spelling is None:
            R.in_range(ctx, np.array([[150.0]]), ("x",), "rectangle", b)
        else:
            with spelled_as(spelling):  # type: ignore[arg-type]
                R.in_range(ctx, np.array([[150.0]]), ("x",), "rectangle", b)
        return ctx.bad[0]

    assert reason(None).endswith("x=150 is outside 0..100 (clipped with "
                                 "reject_out_of_range=False)")
    assert reason(flag).endswith("(clipped with no --reject-out-of-range)")
    assert flags({"restart_markers=False": "--keep-jpeg-bytes"})(
        "restart_markers", "False") == "--keep-jpeg-bytes"
