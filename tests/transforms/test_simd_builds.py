"""The compiled kernels give the same bytes whichever SIMD paths a build has: the portable
build (no hand-written SSE2 / AVX-512 / NEON code — what a CPU without them runs) against the
native one that parity proves Pillow-exact. scripts/arm64_check.sh does the same on aarch64."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npu_data.common import compiled
from npu_data.errors import UserError
from npu_data.parity.kernel_digest import digests
from npu_data.transforms import _native

pytestmark = pytest.mark.slow  # builds the native kernels in several SIMD configurations


def _digests_of(build: str) -> dict:
    env = {**os.environ, "NPU_DATA_SIMD": build, "NPU_DATA_QUIET": "1"}
    done = subprocess.run([sys.executable, "-m", "npu_data.parity.kernel_digest"], env=env,
                          capture_output=True, text=True, timeout=900, check=True)
    return json.loads(done.stdout)


def test_the_portable_build_gives_the_native_builds_bytes() -> None:
    native = digests()
    portable = _digests_of("portable")
    assert "build=portable" in portable["build"]
    assert "build=native" in _native.ops().simd_paths()
    assert len(native) >= 20
    assert portable["digests"] == native


def test_a_variant_changes_the_flags_and_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [compiled.INCLUDE / "parallel.h"]
    keys = {}
    for build in compiled.VARIANTS:
        monkeypatch.setenv("NPU_DATA_SIMD", build)
        keys[build] = compiled.build_key(files)
    assert len(set(keys.values())) == len(compiled.VARIANTS)
    monkeypatch.setenv("NPU_DATA_SIMD", "scalar")
    assert "-fno-tree-vectorize" in compiled.flags() and "-fopenmp-simd" not in compiled.flags()
    monkeypatch.setenv("NPU_DATA_SIMD", "neon")
    with pytest.raises(UserError, match="NPU_DATA_SIMD='neon': use one of native, portable"):
        compiled.flags()


KUNPENG = """processor\t: 0
BogoMIPS\t: 200.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm
CPU implementer\t: 0x48
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd01
CPU revision\t: 0

processor\t: 1
Features\t: fp asimd
"""


def test_the_cache_key_tells_arm_cpus_apart() -> None:
    """-march=native builds are keyed by the CPU: on aarch64 /proc/cpuinfo has no x86 "model
    name"/"flags", so the implementer, part and features must count (the first of each)."""
    kunpeng = compiled.cpu_signature(KUNPENG.splitlines())
    neoverse = compiled.cpu_signature(KUNPENG.replace("0x48", "0x41").replace("0xd01", "0xd0c")
                                      .splitlines())
    assert "CPU part\t: 0xd01" in kunpeng and "asimddp" in kunpeng
    assert kunpeng != neoverse and kunpeng.count("Features") == 1
    assert compiled.cpu_signature(["model name\t: Xeon\n", "flags\t: sse2 avx2\n"]) != ""
