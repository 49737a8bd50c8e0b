#!/usr/bin/env bash
# One prepared run for a lent GPU machine: parity on CUDA, then the benchmarks on CUDA.
#   OUT=/some/dir bash scripts/gpu_check.sh        # results land in $OUT (default ./gpu-results)
#   DEVICE=cpu QUICK=1 bash scripts/gpu_check.sh   # a dry run of the same steps, small, on the CPU
# Installs the package into .venv with the platform's default torch (a CUDA build) unless a
# torch is already importable. Budget: about 6-8 minutes on one H200 (mostly installing and
# generating the 2,000-image dataset); each step is time-limited so a slow one cannot eat the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
device="${DEVICE:-cuda}"
quick="${QUICK:-}"
mkdir -p "$out"
venv="${VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1 NPU_DATA_QUIET=1
python -c "import torch" 2>/dev/null || python -m pip install -q "${TORCH_SPEC:-torch}"
# the bench extra brings torchvision (the suite's baseline) matched to that torch
python -m pip install -q -e '.[bench]' || python -m pip install -q -e . || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  python -c "import torch; print(torch.__version__, torch.version.cuda)"
  npu-data parity --help > /dev/null && python -c "from npu_data.device import describe, resolve_device; print(describe(resolve_device('$device')))"
} > "$out/machine.txt" 2>&1
step() {  # name, seconds, command...
  local name="$1" limit="$2"; shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "   exit $? ($name)"; tail -n 25 "$out/$name.log"
}
# parity's rows "<kernel> (torch, tf32/hf32 | bf16 matmul | bf16 autocast)" run the device
# kernels with those switches really on (they act on CUDA) and emulated: all must be 0 levels
if [ -n "$quick" ]; then
  step "parity-$device" 180 npu-data parity --device "$device" --batches 1
  step "kernels-$device" 120 python -m benches.kernels --device "$device" --batch 8 --repeats 1
  step "bench-$device" 120 npu-data bench --quick --device "$device" --out "$out/bench-$device"
  exit 0
fi
step "parity-$device" 180 npu-data parity --device "$device" --batches 4
step "kernels-$device" 120 python -m benches.kernels --device "$device" --batch 256 --repeats 5 \
  --out "$out/kernels-$device.json"
step "kernels-$device-64" 120 python -m benches.kernels --device "$device" --batch 64 --repeats 5
step "bench-$device" 420 npu-data bench --device "$device" --workers 8 --out "$out/bench-$device" \
  --data-dir /tmp/npu-data-bench
