"""The kernel cache loads only what this user built (issue 36, bugs 3 and 4): a library in a
folder others can write or another user owns is never loaded, a truncated or damaged one is
rebuilt, and a read-only cache says so. Each load runs in its own process (``dlopen`` is once
per process); the probe library's constructor appends a line to ``$KERNEL_CACHE_MARK``, so a
library that was loaded leaves a trace."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from npu_data.common import compiled

pytestmark = pytest.mark.slow  # builds small native libraries with the C++ compiler, test by test

PROBE = r"""
#include <cstdio>
#include <cstdlib>
__attribute__((constructor)) static void npu_data_probe_mark() {
  const char* path = std::getenv("KERNEL_CACHE_MARK");
  if (path == nullptr) return;
  std::FILE* fh = std::fopen(path, "a");
  if (fh != nullptr) { std::fputs("loaded\n", fh); std::fclose(fh); }
}
"""
LOADER = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from npu_data.common.compiled import Library
lib = Library("kc_probe", "kc_probe", [Path(sys.argv[1])], [], "probe", "probe unavailable",
              "using the fallback.", "Install a C++ compiler to enable it.")
print("ops" if lib.get() is not None else "none")
"""


def _source(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    src = where / "probe.cpp"
    src.write_text(PROBE)
    return src


def _load(src: Path, cache: Path, mark: Path,
          prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NPU_DATA_CACHE": str(cache), "KERNEL_CACHE_MARK": str(mark),
           "NPU_DATA_NATIVE": "1", "HOME": str(cache.parent)}
    return subprocess.run([*prefix, sys.executable, "-c", LOADER, str(src)], env=env,
                          text=True, capture_output=True, timeout=300,
                          cwd=Path(__file__).parents[2])


def _marks(mark: Path) -> int:
    return len(mark.read_text().splitlines()) if mark.exists() else 0


def _key_folder(cache: Path, src: Path) -> Path:
    return cache / "probe" / compiled.build_key([src])


def test_a_built_library_is_recorded_and_a_truncated_or_damaged_one_rebuilt(
        tmp_path: Path) -> None:
    src, cache, mark = _source(tmp_path / "src"), tmp_path / "cache", tmp_path / "mark"
    cache.mkdir()
    cache.chmod(0o1777)  # a shared sticky folder (as /tmp): used as it is, never changed
    got = _load(src, cache, mark)
    assert got.stdout.strip() == "ops", got.stderr[-2000:]
    assert _marks(mark) == 1
    folder = _key_folder(cache, src)
    lib, record = folder / "kc_probe.so", orjson.loads((folder / "built").read_bytes())
    assert record["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o1777
    for level in (cache / "probe", folder):
        assert (level.stat().st_mode & 0o077) == 0
    link = tmp_path / "link"
    link.symlink_to(cache)  # a cache root the user pointed elsewhere: followed
    assert _load(src, link, mark).stdout.strip() == "ops" and _marks(mark) == 2  # reused
    assert stat.S_IMODE(cache.stat().st_mode) == 0o1777
    whole = lib.read_bytes()
    lib.write_bytes(whole[: len(whole) // 2])  # truncated (a full disk, a killed copy)
    got = _load(src, cache, mark)
    assert got.returncode == 0 and got.stdout.strip() == "ops", got.stderr[-2000:]
    assert "rebuilding" in got.stderr and _marks(mark) == 3
    assert lib.read_bytes() == whole or hashlib.sha256(lib.read_bytes()).hexdigest() == \
        orjson.loads((folder / "built").read_bytes())["sha256"]
    damaged = bytearray(lib.read_bytes())
    damaged[len(damaged) // 3] ^= 0xFF  # same size, one byte changed
    lib.write_bytes(bytes(damaged))
    got = _load(src, cache, mark)
    assert got.stdout.strip() == "ops" and "rebuilding" in got.stderr and _marks(mark) == 4
    assert hashlib.sha256(lib.read_bytes()).hexdigest() == \
        orjson.loads((folder / "built").read_bytes())["sha256"]


def test_two_processes_building_into_an_empty_cache_both_get_the_library(tmp_path: Path
                                                                         ) -> None:
    """Two processes start together on an empty cache: one builds, the other waits for it
    (the build lock), both load the library, and it is built once (the kernels and the codecs
    are ``Library`` objects as this probe is)."""
    src, cache, mark = _source(tmp_path / "src"), tmp_path / "cache", tmp_path / "mark"
    env = {**os.environ, "NPU_DATA_CACHE": str(cache), "KERNEL_CACHE_MARK": str(mark),
           "NPU_DATA_NATIVE": "1", "HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", LOADER, str(src)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=Path(__file__).parents[2]) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:  # never left running: a later test counts this process's children
        for p in procs:
            p.kill()
            p.wait()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "ops", err[-2000:]
    assert _marks(mark) == 2  # loaded by each
    assert [f.name for f in (cache / "probe").iterdir()] == [compiled.build_key([src])]
    assert (_key_folder(cache, src) / "built").is_file()


def _plant(folder: Path, src: Path, mark_dir: Path) -> None:
    """A library whose constructor writes the mark, with a ``built`` record that matches it
    (the worst case: a planter who knows the format)."""
    folder.mkdir(parents=True)
    lib = folder / "kc_probe.so"
    subprocess.run(["c++", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                   timeout=120)
    (folder / "built").write_bytes(orjson.dumps(
        {"library": lib.name, "sha256": hashlib.sha256(lib.read_bytes()).hexdigest()}))
    mark_dir.mkdir(exist_ok=True)


@pytest.mark.parametrize("how", ["world-writable", "another user's"])
def test_a_planted_library_is_not_loaded(tmp_path: Path, how: str) -> None:
    src, cache, mark = _source(tmp_path / "src"), tmp_path / "cache", tmp_path / "m" / "mark"
    folder = _key_folder(cache, src)
    _plant(folder, src, mark.parent)
    if how == "world-writable":
        folder.chmod(0o777)
        expect = "writable by others"
    elif os.getuid() == 0:
        os.chown(folder, 65534, 65534)
        expect = "belongs to another user"
    else:  # only root can give a folder away: the cache root is then the other user's
        folder.parent.parent.chmod(0o700)
        cache = Path("/")
        expect = "belongs to another user"
    got = _load(src, cache, mark)
    assert got.returncode == 0 and got.stdout.strip() == "none", got.stderr[-2000:]
    warning = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(warning) == 1 and expect in warning[0] and "refused" in warning[0], got.stderr
    assert "C++ compiler" not in warning[0] and "using the fallback." in warning[0]
    assert not mark.exists()  # its constructor never ran


def test_a_read_only_cache_says_so(tmp_path: Path) -> None:
    src, cache = _source(tmp_path / "src"), tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o500)
    # root writes anywhere: where the tests run as root, the load runs without that right
    prefix = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--") \
        if os.getuid() == 0 else ()
    try:
        got = _load(src, cache, tmp_path / "mark", prefix)
    finally:
        cache.chmod(0o700)
    assert got.returncode == 0 and got.stdout.strip() == "none", got.stderr[-2000:]
    warning = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(warning) == 1 and "read-only" in warning[0], got.stderr
    assert "NPU_DATA_CACHE" in warning[0] and "C++ compiler" not in warning[0]
    assert list(cache.iterdir()) == []


def _one_warning(got: subprocess.CompletedProcess[str]) -> str:
    assert got.returncode == 0 and got.stdout.strip() == "none", got.stderr[-2000:]
    warning = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(warning) == 1, got.stderr
    assert "C++ compiler" not in warning[0] and "using the fallback." in warning[0]
    return warning[0]


def test_a_cache_root_open_to_others_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    src, shared = _source(tmp_path / "src"), tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: others could rename what the cache makes in it
    link = tmp_path / "link"
    link.symlink_to(shared)
    warning = _one_warning(_load(src, link, tmp_path / "mark"))
    assert "writable by others (mode 777)" in warning and "left as it is" in warning
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777 and list(shared.iterdir()) == []


@pytest.mark.parametrize("plant", ["ninja", "kc_probe.so", "built", "ninja/build.ninja"])
def test_a_planted_entry_is_named_not_blamed_on_the_compiler(tmp_path: Path, plant: str) -> None:
    src, cache = _source(tmp_path / "src"), tmp_path / "cache"
    folder = _key_folder(cache, src)
    where = folder / plant
    if plant == "ninja":
        folder.mkdir(parents=True)
        where.write_text("a file where the build folder goes")
    else:
        where.mkdir(parents=True)  # a folder where a file goes
    for level in (cache, cache / "probe", folder):
        level.chmod(0o700)
    warning = _one_warning(_load(src, cache, tmp_path / "mark"))
    assert f"{where}: the kernel cache holds something npu-data did not write" in warning
    assert f"delete {folder}" in warning


def test_a_failed_build_with_a_compiler_names_the_build_not_a_missing_compiler(
        tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    src.write_text("this is not C++;\n")
    warning = _one_warning(_load(src, tmp_path / "cache", tmp_path / "mark"))
    assert "failed with the compiler" in warning and "present" in warning
    assert f"delete {_key_folder(tmp_path / 'cache', src)}" in warning
