"""npu_data.common.compat: what differs between torch 2.1 and the newest, detected once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from npu_data.common import compat
from npu_data.errors import UserError


def test_release_reads_major_and_minor_of_every_spelling() -> None:
    assert compat.release("2.1.0.post12") == (2, 1)
    assert compat.release("2.7.1+cpu") == (2, 7)
    assert compat.release("2.14.0a0+git123") == (2, 14)
    assert compat.TORCH >= compat.OLDEST


def test_dataloader_arguments_newer_than_torch_are_dropped_or_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without = {k: v for k, v in compat.DATALOADER_ARGS.items() if k != "in_order"}
    monkeypatch.setattr(compat, "DATALOADER_ARGS", without)  # as torch < 2.6 has them
    assert compat.dataloader_kwargs(in_order=True, timeout=3) == {"timeout": 3}
    with pytest.raises(UserError, match=r"^DataLoader: in_order=False needs a newer torch "
                                        r"than the installed .*; leave in_order out$"):
        compat.dataloader_kwargs(in_order=False)
    with pytest.raises(UserError, match="snapshot_every=5"):
        compat.dataloader_kwargs(snapshot_every=5)


def test_autocast_is_seen_on_and_off() -> None:
    assert compat.autocast_available("cpu")
    assert not compat.autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compat.autocast_enabled("cpu")
    assert not compat.autocast_available("no-such-device")


def test_is_compiling_is_true_only_in_a_trace() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + (1 if compat.is_compiling() else 0)

    assert f(torch.zeros(1)).item() == 0
    assert torch.compile(f, fullgraph=True, backend="eager")(torch.zeros(1)).item() == 1


def test_storage_use_count_sees_every_owner() -> None:
    if not compat.has_storage_use_count():  # the aarch64 torch 2.7 wheel: reuse is off
        assert compat.storage_use_count(torch.empty(1).untyped_storage()) is None
        return
    t = torch.empty(8)
    storage = t.untyped_storage()
    before = compat.storage_use_count(storage)
    view = t[2:]
    assert compat.storage_use_count(storage) == before + 1
    del view
    assert compat.storage_use_count(storage) == before


def test_a_module_that_wants_pkg_resources_imports_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch < 2.4's extension builder under setuptools >= 81 (no pkg_resources)."""
    (tmp_path / "old_builder.py").write_text(
        "from pkg_resources import packaging\nV = packaging.version.parse('11.2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class NoPkgResources:
        def find_spec(self, name: str, *args: object) -> None:
            if name == "pkg_resources":
                raise ModuleNotFoundError("No module named 'pkg_resources'", name=name)

    monkeypatch.setattr(sys, "meta_path", [NoPkgResources(), *sys.meta_path])
    monkeypatch.delitem(sys.modules, "pkg_resources", raising=False)
    module = compat.import_without_pkg_resources("old_builder")
    assert str(module.V) == "11.2"
    assert "pkg_resources" not in sys.modules  # lent for the import only
