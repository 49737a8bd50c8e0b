#!/usr/bin/env bash
# Set up a fresh machine and run npu-data's main job or its tests.
#   bash scripts/dev.sh demo   # install, then run the demo on built-in sample data
#   bash scripts/dev.sh test   # install with the dev extra, then lint, type-check and test
#   bash scripts/dev.sh bench [ARGS]  # install with the bench extra (torchvision), run the suite
# Environment: VENV (default .venv), TORCH_SPEC (default torch==2.13.0, the tested CPU build;
# set it to e.g. "torch" for your platform's default build; the bench needs a torch that a
# torchvision wheel matches, e.g. TORCH_SPEC="torch==2.14.1 torchvision==0.29.1" VENV=.venv-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-test}"
venv="${VENV:-.venv}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
# The Label Studio server (integration tests) lives in its own venv, cached outside the checkout.
export LABEL_STUDIO_VENV="${LABEL_STUDIO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/npu-data/venv-labelstudio}"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck disable=SC2086  # TORCH_SPEC may name several packages
python -c "import torch" 2>/dev/null || python -m pip install -q $torch_spec

case "$mode" in
  demo)
    python -m pip install -q -e .
    shift || true
    npu-data demo "$@"
    ;;
  bench)
    python -m pip install -q -e '.[bench]'
    shift || true
    npu-data bench "$@"
    ;;
  test)
    python -m pip install -q -e '.[dev]'
    echo "== ruff"; ruff check npu_data benches
    echo "== mypy"; mypy npu_data benches
    if [ -f .ci/labelstudio-server.sh ]; then
      echo "== label-studio server environment"; bash .ci/labelstudio-server.sh ensure-venv
    fi
    echo "== parity (cpu)"; NPU_DATA_QUIET=1 npu-data parity --device cpu
    echo "== bench --quick"; NPU_DATA_QUIET=1 npu-data bench --quick --out "${TMPDIR:-/tmp}/npu-data-bench-quick"
    echo "== pytest"; python -m pytest -o addopts="" -q -p no:cacheprovider
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test|bench" >&2
    exit 2
    ;;
esac
