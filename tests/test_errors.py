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
