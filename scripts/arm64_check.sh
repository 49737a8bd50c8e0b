#!/usr/bin/env bash
# Prove npu-data's compiled kernels on aarch64 (Kunpeng-class hosts) without an ARM machine:
# a Debian arm64 root run under qemu-user emulation builds them there (the NEON paths,
# -march=native as on a Kunpeng 920) and proves
#   1. the same output bytes as this x86-64 machine's build, kernel by kernel
#      (npu_data.parity.kernel_digest), for the native, portable and scalar builds;
#   2. `npu-data parity --device cpu --no-precision`: 0 levels against Pillow (running on
#      aarch64 too; the reduced-precision modes change only matmul, convolution and autocast's
#      ops, which no kernel uses (tests/transforms/test_device_ops.py holds the op list), so
#      their rows (123 of 207) rerun the same ops: the x86-64 leg runs them);
#   3. the kernel and codec tests (tests/transforms/test_native.py, test_native_augment.py,
#      test_simd_builds.py, tests/codecs).
# Nothing global is touched: the root lives in the cache, qemu is registered in a private
# binfmt_misc of a private user+mount+pid namespace (Linux >= 6.7), /proc/cpuinfo and the CPU's
# sysfs ID register are a Kunpeng 920's. Emulated timings mean nothing; instruction counts per
# image are `bash scripts/arm64_check.sh insns` (docs/benchmarks.md, "aarch64").
#
#   bash scripts/arm64_check.sh            # set up (cached) and check
#   bash scripts/arm64_check.sh wheels DIR # only download the aarch64 wheel set less torch
#   ARM64_TORCH="torch==2.9.1" bash scripts/arm64_check.sh   # another torch (default: the
#                                          # seed's torch 2.1.2 with numpy < 2)
# Environment: NPU_DATA_ARM64_CACHE (default ~/.cache/npu-data/arm64), PYTHON (the host's
# python with npu-data installed, default `python`), ARM64_STEPS (default "digest parity tests"),
# ARM64_BUILDS (the NPU_DATA_SIMD builds the digests cover, default "native portable scalar").
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
self="$repo/scripts/arm64_check.sh"
cache="${NPU_DATA_ARM64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/npu-data/arm64}"
root="$cache/root"
torch_spec="${ARM64_TORCH:-torch==2.1.2 numpy<2}"
# torch's dependencies named, not followed: pip judges environment markers by the host, so
# torch's CUDA packages and triton (platform_machine == "x86_64") would come along
torch_deps="filelock typing-extensions sympy mpmath networkx jinja2 markupsafe fsspec"
# the rest with their dependencies followed (pytest's pygments, iniconfig, pluggy, packaging)
site_packages="pillow orjson tqdm psutil ninja pytest setuptools"
steps="${ARM64_STEPS:-digest parity tests}"
builds="${ARM64_BUILDS:-native portable scalar}"
python="${PYTHON:-python}"
mode="${1:-check}"
t_all=$(date +%s)

step() {  # step NAME COMMAND...: run it, print how long it took
  local name=$1 t0
  shift
  t0=$(date +%s)
  echo "== arm64: $name"
  "$@"
  echo "== arm64: $name took $(( $(date +%s) - t0 )) s"
}

host_tools() {
  local missing=()
  command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [ "$mode" = insns ]; then command -v qemu-aarch64 >/dev/null || missing+=(qemu-user); fi
  command -v gcc >/dev/null || missing+=(gcc)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
      echo "arm64_check: install ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
      exit 1
    fi
  fi
}

# Run "$@" as root of a private user+mount+pid namespace with uids/gids 0-65535 mapped to
# themselves (dpkg chowns to several), writing the maps from outside as newuidmap would.
in_namespace() {
  unshare --user --mount --pid --fork --kill-child bash -c '
    while [ "$(awk "{print \$3}" /proc/self/uid_map)" != 65536 ]; do sleep 0.05; done
    exec "$@"' in_namespace "$@" &
  local p=$!
  while [ "$(readlink /proc/$p/ns/user)" = "$(readlink /proc/self/ns/user)" ]; do sleep 0.05; done
  echo "0 0 65536" > /proc/$p/uid_map
  echo "0 0 65536" > /proc/$p/gid_map
  wait $p
}

kunpeng_cpuinfo() {  # what a 2-core Kunpeng 920 shows (gcc -march=native and torch read it)
  local n
  for n in 0 1; do
    printf 'processor\t: %s\nBogoMIPS\t: 200.00\n' "$n"
    printf 'Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm\n'
    printf 'CPU implementer\t: 0x48\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd01\nCPU revision\t: 0\n\n'
  done
}

# Inside the namespace: qemu for aarch64 ELF files (F: opened now, so it works in the chroot),
# /proc, /dev and a Kunpeng's cpuinfo and sysfs ID registers under the root.
prepare_root_mounts() {
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  echo ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
    > /proc/sys/fs/binfmt_misc/register
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  kunpeng_cpuinfo > "$cache/cpuinfo"
  mount --bind "$cache/cpuinfo" "$root/proc/cpuinfo"
  mount -t tmpfs sysfs "$root/sys"
  local cpu="$root/sys/devices/system/cpu" n
  mkdir -p "$cpu"
  for f in possible present online; do echo 0-1 > "$cpu/$f"; done
  for n in 0 1; do
    mkdir -p "$cpu/cpu$n/regs/identification"
    echo 0x00000000481fd010 > "$cpu/cpu$n/regs/identification/midr_el1"
  done
  mount -t tmpfs tmp "$root/tmp"
}

guest_env() {  # what the emulated processes see
  export QEMU_CPU=neoverse-n1 HOME=/root LANG=C.UTF-8 NPU_DATA_QUIET=1 CC=gcc CXX=g++
  export PATH=/opt/site/bin:/usr/bin:/bin PYTHONPATH=/work/npu-data:/opt/site  # bin/ninja: the wheel's binary
}

chrooted() {  # chrooted COMMAND...: inside the mounts, as a child (qemu hangs as PID 1)
  local chroot_bin
  chroot_bin=$(command -v chroot)  # before the guest's PATH
  (guest_env && "$chroot_bin" "$root" "$@")
}

inside() {  # the namespace's entry: inside FUNCTION ARGS...
  prepare_root_mounts
  "$@"
}

# The root: debootstrap only downloads (and unpacks the essential set); every package is then
# unpacked on the host with dpkg-deb, natively — no maintainer script runs, which a root used
# only to build and run the kernels does not need (the compiler is named by CC/CXX, ld.so
# searches its default folders). Emulating dpkg's configure took 5-15 min.
# the links Debian's maintainer scripts would make (update-alternatives) that builds use
root_links() {
  [ -e "$root/usr/bin/which" ] || ln -s which.debianutils "$root/usr/bin/which"
}

make_root() {
  local marker="$root/.npu-data-root-unpacked"
  if [ -f "$marker" ]; then root_links; echo "cached: $root"; return; fi
  rm -rf "$root"
  mkdir -p "$cache"
  debootstrap --arch=arm64 --foreign --variant=minbase \
    --include=python3,python3-dev,g++,libjpeg62-turbo-dev \
    bookworm "$root" http://deb.debian.org/debian > "$cache/debootstrap.log"
  local deb
  for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -f "$root"/var/cache/apt/archives/*.deb
  root_links
  touch "$marker"
}

# The Python packages: aarch64 wheels downloaded for the target (pip download --platform),
# then installed on the host (pip --target --no-deps) into /opt/site, read through PYTHONPATH;
# the project copy is on PYTHONPATH too.
platform_args=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311
  --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64
  --platform manylinux_2_28_aarch64 --platform manylinux_2_34_aarch64)

wheel_set() {  # wheel_set DIR: the aarch64 wheels, dependencies resolved, into DIR
  local dest=$1
  rm -rf "$dest"
  mkdir -p "$dest"
  if [ -n "$torch_spec$torch_deps" ]; then
    # shellcheck disable=SC2086  # the specs name several packages
    "$python" -m pip download -q -d "$dest" --no-deps "${platform_args[@]}" $torch_spec $torch_deps
  fi
  # shellcheck disable=SC2086
  "$python" -m pip download -q -d "$dest" "${platform_args[@]}" $site_packages
}

make_site() {
  local marker="$root/opt/.npu-data-site" want="$torch_spec $torch_deps | $site_packages"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then echo "cached: $want"; return; fi
  rm -rf "$root/opt/site"
  wheel_set "$cache/wheels"
  # the wheels are aarch64's: pip judges their tags by the platform named, not the host's
  "$python" -m pip install -q --target "$root/opt/site" --no-deps --no-index \
    "${platform_args[@]}" "$cache"/wheels/*.whl
  echo "$want" > "$marker"
}

copy_project() {  # the working tree as git sees it (tracked and new files), nothing built
  rm -rf "$root/work/npu-data"
  mkdir -p "$root/work/npu-data"
  git ls-files -z --cached --others --exclude-standard | tar -c --null -T - | tar -x -C "$root/work/npu-data"
}

digests_inside() {
  local build
  for build in $builds; do
    chrooted env NPU_DATA_SIMD=$build python3 -m npu_data.parity.kernel_digest \
      > "$cache/digests-arm64-$build.json"
  done
}

parity_inside() {
  chrooted sh -c 'cd /work/npu-data && python3 -m npu_data.cli parity --device cpu --no-precision'
}

tests_inside() {
  chrooted sh -c 'cd /work/npu-data && python3 -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/transforms/test_native.py tests/transforms/test_native_augment.py \
    tests/transforms/test_simd_builds.py tests/codecs'
}

# Instructions per image of each kernel, by build: the root's python run by the dynamic
# qemu-aarch64 (the static one cannot load plugins) with the root as its prefix (-L), a plugin
# counting between the markers npu_data/bench/kernel_insns.py makes.
insns_inside() {
  gcc -shared -fPIC -O2 -o "$cache/insn_count.so" "$repo/scripts/arm64/insn_count.c"
  local build
  for build in native portable scalar; do
    (cd "$root/work/npu-data" && guest_env && NPU_DATA_SIMD=$build \
      qemu-aarch64 -L "$root" -cpu neoverse-n1 -plugin "$cache/insn_count.so" -d plugin \
      "$root/usr/bin/python3.11" -m npu_data.bench.kernel_insns 2> "$cache/insns-$build.log")
  done
}

host_digests() { "$python" -m npu_data.parity.kernel_digest > "$cache/digests-x86.json"; }

compare_digests() {
  "$python" - "$cache" "$builds" <<'EOF'
import json, pathlib, sys
cache = pathlib.Path(sys.argv[1])
x86 = json.loads((cache / "digests-x86.json").read_text())
bad = 0
for build in sys.argv[2].split():
    arm = json.loads((cache / f"digests-arm64-{build}.json").read_text())
    diff = [k for k in x86["digests"] if arm["digests"].get(k) != x86["digests"][k]]
    print(f"aarch64 {arm['build']}: {len(x86['digests']) - len(diff)} of {len(x86['digests'])} "
          f"kernel outputs byte-identical to x86-64 ({x86['build']})")
    for k in diff:
        print(f"  DIFFERS: {k}")
    bad += len(diff)
sys.exit(1 if bad else 0)
EOF
}

if [ "$mode" = __inside ]; then
  shift
  inside "$@"
  exit
fi

if [ "$mode" = wheels ]; then  # only the wheel set (no torch: quick), into $2, and list it
  dest="${2:-$cache/wheels-check}"
  torch_spec="" torch_deps=""
  wheel_set "$dest"
  ls "$dest"
  exit
fi

if [ "$mode" = insns ]; then
  steps="digest insns" builds="native portable scalar"  # the counts load all three builds
elif [ "$mode" != check ]; then
  echo "usage: bash scripts/arm64_check.sh [check|insns|wheels [DIR]]" >&2
  exit 2
fi
step "host tools" host_tools
step "arm64 root (debootstrap's downloads unpacked on the host; cached)" make_root
step "aarch64 wheels ($torch_spec; cached)" make_site
step "copy the working tree" copy_project
for s in $steps; do
  case "$s" in
    digest)
      step "kernel digests on x86-64" host_digests
      step "kernel builds and digests on aarch64 ($builds)" \
        in_namespace bash "$self" __inside digests_inside
      step "compare" compare_digests ;;
    insns)
      step "instructions per image on aarch64 (native, portable, scalar)" \
        in_namespace bash "$self" __inside insns_inside
      "$python" scripts/arm64/insns_table.py "$cache" ;;
    parity) step "npu-data parity --device cpu on aarch64" in_namespace bash "$self" __inside parity_inside ;;
    tests) step "kernel and codec tests on aarch64" in_namespace bash "$self" __inside tests_inside ;;
    *) echo "arm64_check: unknown step $s (digest, parity, tests)" >&2; exit 2 ;;
  esac
done
echo "arm64 check passed in $(( $(date +%s) - t_all )) s"
