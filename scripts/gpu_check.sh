#!/usr/bin/env bash
# One prepared run for a lent GPU machine: parity on CUDA, then the benchmarks on CUDA.
#   OUT=/some/dir bash scripts/gpu_check.sh        # results land in $OUT (default ./gpu-results)
#   DEVICE=cpu QUICK=1 bash scripts/gpu_check.sh   # a dry run of the same steps, small, on the CPU
#   STEPS="rules bench" bash scripts/gpu_check.sh  # only those steps (parity rules kernels bench
#                                                   # latents)
# Installs the package into .venv with the platform's default torch (a CUDA build) unless a
# torch is already importable. Budget: about 6-8 minutes on one H200 (mostly installing and
# generating the 2,000-image dataset); each step is time-limited so a slow one cannot eat the rest.
#
# A machine with no package index (an image that already holds torch and torchvision):
#   PYTHON=python3 BUNDLE=dir bash scripts/gpu_check.sh
# runs that python as it is, with this checkout on PYTHONPATH, the wheels in dir/wheels installed
# (no index, no dependencies) into a scratch folder, and libjpeg's headers and library from
# dir/jpeg (include/, lib/) for the JPEG region decoder. scripts/offline_bundle.sh dir makes it.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
device="${DEVICE:-cuda}"
quick="${QUICK:-}"
mkdir -p "$out"
export PIP_DISABLE_PIP_VERSION_CHECK=1 NPU_DATA_QUIET=1
if [ -n "${PYTHON:-}" ]; then
  py="$PYTHON"
  bundle="${BUNDLE:-}"
  site="${TMPDIR:-/tmp}/npu-data-site"
  if [ -n "$bundle" ] && ls "$bundle"/wheels/*.whl > /dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$bundle"/wheels/*.whl || exit 1
  fi
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
  if [ -n "$bundle" ] && [ -d "$bundle/jpeg" ]; then
    jp="$(cd "$bundle/jpeg" && pwd)"
    export CPATH="$jp/include${CPATH:+:$CPATH}" LIBRARY_PATH="$jp/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$jp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
else
  venv="${VENV:-.venv}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  py=python
  python -c "import torch" 2>/dev/null || python -m pip install -q "${TORCH_SPEC:-torch}"
  # the bench extra brings torchvision (the suite's baseline) matched to that torch
  # (and the latents extra: diffusers + transformers for the SDXL-sized VAE row)
  python -m pip install -q -e '.[bench,latents]' || python -m pip install -q -e '.[bench]' \
    || python -m pip install -q -e . || exit 1
fi
cli=("$py" -m npu_data.cli)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  nproc
  "$py" -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__)"
  "$py" -c "from npu_data.device import describe, resolve_device; print(describe(resolve_device('$device')))"
  "$py" -c "from npu_data.transforms import _native; from npu_data.codecs import jpeg_ops; print('native kernels', _native.available(), 'jpeg regions', jpeg_ops() is not None)"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
step() {  # name, seconds, command...  (STEPS="rules bench": only the steps named so)
  local name="$1" limit="$2"; shift 2
  [ -z "${STEPS:-}" ] || [[ " $STEPS " == *" ${name%%-*} "* ]] || return 0
  echo "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "   exit $? ($name, $((SECONDS - t0)) s)"; tail -n "${TAIL:-25}" "$out/$name.log"
}
# parity's rows "<kernel> (torch, tf32/hf32 | bf16 matmul | bf16 autocast)" run the device
# kernels with those switches really on (they act on CUDA) and emulated: all must be 0 levels
if [ -n "$quick" ]; then
  step "parity-$device" 180 "${cli[@]}" parity --device "$device" --batches 1
  step "rules-$device" 120 "$py" -m npu_data.bench.device_rules --device "$device" --images 64 --batches 2
  step "kernels-$device" 120 "$py" -m npu_data.bench.kernels --device "$device" --batch 8 --repeats 1
  step "kernels-costs" 120 "$py" -m npu_data.bench.kernels --costs --out "$out/kernel-costs.json"
  step "bench-$device" 240 "${cli[@]}" bench --quick --device "$device" --out "$out/bench-$device"
  step "latents-$device" 180 "${cli[@]}" bench sdxl-vae --quick --device "$device"
  exit 0
fi
step "parity-$device" "${PARITY_S:-180}" "${cli[@]}" parity --device "$device" --batches 4
# the hardware's word on the rules: CUDA's sync debugging and every op's dtype, whole pipeline
step "rules-$device" "${RULES_S:-120}" "$py" -m npu_data.bench.device_rules --device "$device"
step "kernels-$device" "${KERNELS_S:-120}" "$py" -m npu_data.bench.kernels --device "$device" \
  --batch 256 --repeats 5 --out "$out/kernels-$device.json"
step "kernels-$device-64" "${KERNELS_S:-120}" "$py" -m npu_data.bench.kernels --device "$device" \
  --batch 64 --repeats 5
# device ops per batch and peak device memory (counted on the host: the same figures anywhere)
step "kernels-costs" 120 "$py" -m npu_data.bench.kernels --costs --out "$out/kernel-costs.json"
step "bench-$device" "${BENCH_S:-420}" "${cli[@]}" bench --device "$device" \
  --workers "${WORKERS:-8}" --out "$out/bench-$device" --data-dir "${DATA_DIR:-/tmp/npu-data-bench}"
# docs/benchmarks.md's SDXL-sized VAE row on the device: pixels + VAE against the latents store
step "latents-$device" "${LATENTS_S:-240}" "${cli[@]}" bench sdxl-vae --device "$device" \
  --images 8 --size 1024 --batch-size 4 --runs 3
