"""npu-data doctor: the host, the kernel path in use, and the torch / torch_npu pairing."""

from __future__ import annotations

import pytest

from npu_data import cli
from npu_data import device as dev
from npu_data.commands.doctor import cpu_name
from npu_data.transforms import _native

KUNPENG = "processor\t: 0\nCPU implementer\t: 0x48\nCPU architecture: 8\nCPU part\t: 0xd01\n"


def test_doctor_reports_the_stack_and_the_kernel_path(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ", 1)[0]: line for line in out.splitlines()}
    for key in ("host", "torch", "torch_npu", "numpy", "compiled kernels", "device 'auto'"):
        assert key in rows, out
    assert _native.ops().simd_paths() in rows["compiled kernels"]
    assert "torch-npu==" in rows["torch_npu"]  # not installed here: how to, for this torch


def test_doctor_refuses_a_device_it_cannot_use_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--device", "npu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: device 'npu' requested but torch_npu is not installed")
    assert "\n" not in err and "torch-npu==" in err


def test_arm_hosts_are_named_from_cpuinfo() -> None:
    assert cpu_name(KUNPENG) == "HiSilicon Kunpeng 920"
    assert cpu_name(KUNPENG.replace("0xd01", "0xfff")) == "ARM implementer 0x48 part 0xfff"
    assert cpu_name("model name\t: AMD EPYC\nflags\t: sse2\n") == "AMD EPYC"


def test_a_torch_npu_built_for_another_torch_is_named_with_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "_torch_npu_version", lambda: "2.1.0.post12")
    monkeypatch.setattr(dev.torch, "__version__", "2.7.1+cpu")
    problem = dev.npu_pairing_problem()
    assert problem is not None and "torch_npu 2.1.0.post12 needs torch 2.1.*" in problem
    assert "pip install 'torch-npu==2.7.*'" in problem
    monkeypatch.setattr(dev.torch, "__version__", "2.1.0")
    assert dev.npu_pairing_problem() is None
