"""The device layer: auto choice, clear errors for unusable devices, per-device policies."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from npu_data import device
from npu_data.errors import UserError


def test_auto_falls_back_to_cpu_without_accelerators() -> None:
    assert device.resolve_device("auto") == torch.device("cpu")
    assert device.resolve_device(None) == torch.device("cpu")
    assert device.best_device_type() == "cpu"


def test_explicit_npu_without_torch_npu_names_the_extra() -> None:
    with pytest.raises(UserError) as err:
        device.resolve_device("npu")
    msg = str(err.value)
    assert "npu-data[npu]" in msg and "CANN" in msg and "\n" not in msg


def test_explicit_cuda_without_gpu_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="no CUDA device"):
        device.resolve_device("cuda")


@pytest.mark.parametrize("spec", ["tpu", "gpu0", "cuda:x"])
def test_unknown_device_strings(spec: str) -> None:
    with pytest.raises(UserError, match="auto, cpu, cuda"):
        device.resolve_device(spec)


def test_policies_per_device_type() -> None:
    assert device.start_method("npu") == "spawn"
    assert device.start_method("cpu") is None
    assert device.dist_backend("npu") == "hccl"
    assert device.dist_backend("cuda") == "nccl"
    assert device.dist_backend("cpu") == "gloo"
    assert not device.is_accelerator("cpu") and device.is_accelerator("cuda")


def test_cpu_streams_are_noops_and_pinning_is_skipped() -> None:
    assert device.new_stream("cpu") is None
    assert device.current_stream("cpu") is None
    with device.stream_context(None):
        x = torch.ones(3)
    assert device.pin(x, "cpu") is x
    assert not device.empty_pinned((2, 2), torch.uint8, "cpu").is_pinned()
    g = device.manual_seed(7, "cpu")
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=device.manual_seed(7, "cpu")))
    # the seed must matter: an ignored seed would make these equal too (same default start)
    assert not torch.equal(torch.rand(3, generator=device.manual_seed(7, "cpu")),
                           torch.rand(3, generator=device.manual_seed(8, "cpu")))
    assert device.manual_seed(7, "cpu").initial_seed() == 7
    assert device.describe("cpu").startswith("cpu (")


def test_broken_torch_npu_install_is_detected_and_explained(tmp_path: Path) -> None:
    # A torch_npu that is installed but cannot find CANN raises at import, like the real wheel.
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"
    )
    code = textwrap.dedent(
        """
        import sys
        from npu_data import device
        from npu_data.errors import UserError
        assert device.resolve_device('auto').type == 'cpu'
        try:
            device.resolve_device('npu')
        except UserError as exc:
            print(exc)
        else:
            sys.exit('no error')
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path), "PATH": ""},
                         capture_output=True, text=True, check=True).stdout
    assert "cannot load Ascend's CANN libraries" in out and "libhccl.so" in out
