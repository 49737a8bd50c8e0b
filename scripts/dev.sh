#!/usr/bin/env bash
# Set up a fresh machine and run npu-data's main job or its tests.
#   bash scripts/dev.sh demo   # install, then run the demo on built-in sample data
#   bash scripts/dev.sh test   # install with the dev extra, then lint, type-check and test
#   bash scripts/dev.sh test-fast     # the edit loop, after `test` made the venv: ruff and the
#                                     # tests not marked slow (pytest -m "not slow"), no installs
#   bash scripts/dev.sh bench [ARGS]  # install with the bench extra (torchvision), run the suite
#   bash scripts/dev.sh test-oldest   # the oldest supported stack (torch 2.1.2, numpy < 2, the
#                                     # newest setuptools) in ~/.cache/npu-data/venv-torch2.1:
#                                     # the demo, the transforms/loaders/codecs tests (parity
#                                     # among them), shards' not slow
#   bash scripts/dev.sh test-arm64    # scripts/arm64_check.sh: the kernels on aarch64 (emulated)
# Environment: VENV (default .venv), TORCH_SPEC (default torch==2.13.0, the tested CPU build;
# set it to e.g. "torch" for your platform's default build; the bench needs a torch that a
# torchvision wheel matches, e.g. TORCH_SPEC="torch==2.14.1 torchvision==0.29.1" VENV=.venv-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-test}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/npu-data"
if [ "$mode" = test-oldest ]; then  # its own venv, cached outside the checkout (as the Label
  # Studio server's is): torch 2.1.2 is a CUDA build of several GB, downloaded once per machine
  venv="${VENV:-$cache/venv-torch2.1}"
  torch_spec="${TORCH_SPEC:-torch==2.1.2 numpy<2}"
else
  venv="${VENV:-.venv}"
  torch_spec="${TORCH_SPEC:-torch==2.13.0}"
fi
# The Label Studio server (integration tests) lives in its own venv, cached outside the checkout.
export LABEL_STUDIO_VENV="${LABEL_STUDIO_VENV:-$cache/venv-labelstudio}"

if [ "$mode" = test-fast ]; then  # installs nothing: `test` made the venv and filled it
  if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$venv/bin/ruff" ]; then
    echo "error: no test environment in $venv: run 'bash scripts/dev.sh test' once first" >&2
    exit 1
  fi
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  echo "== ruff"; ruff check npu_data tests
  echo "== pytest (not slow)"
  exec python -m pytest -o addopts="" -q -p no:cacheprovider -m "not slow" "${@:2}"
fi
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
    # with the import sources' test packages (dev-formats; the oldest leg leaves them out), in
    # one pip run: each run builds the package's metadata again
    python -m pip install -q -e '.[dev,dev-formats]'
    echo "== ruff"; ruff check npu_data
    echo "== mypy"; mypy npu_data
    if [ -f .ci/labelstudio-server.sh ]; then
      echo "== label-studio server environment"; bash .ci/labelstudio-server.sh ensure-venv
    fi
    echo "== parity (cpu)"; NPU_DATA_QUIET=1 npu-data parity --device cpu
    echo "== bench --quick"; NPU_DATA_QUIET=1 npu-data bench --quick --out "${TMPDIR:-/tmp}/npu-data-bench-quick"
    # the API reference from the docstrings (mkdocs.yml), warnings as errors, built outside
    # the checkout (and its check: every public name rendered, with the sections it needs)
    echo "== api docs"; NPU_DATA_QUIET=1 mkdocs build --strict --quiet \
      --site-dir "${TMPDIR:-/tmp}/npu-data-api-site"
    # a worker per core (pytest-xdist; --dist loadfile: a file's tests share one process, so a
    # module's server starts once); PYTEST_WORKERS=0 runs them in this process
    echo "== pytest"; python -m pytest -o addopts="" -q -p no:cacheprovider \
      -n "${PYTEST_WORKERS:-auto}" --dist loadfile
    ;;
  test-oldest)
    versions() { python -c "import numpy, torch; print(f'torch {torch.__version__}, numpy {numpy.__version__}')"; }
    before=$(versions)
    # what an Ascend user runs: npu-data and its npu extra must leave torch and numpy as they are
    python -m pip install -q -e '.[npu]'
    after=$(versions)
    if [ "$before" != "$after" ]; then
      echo "error: installing npu-data[npu] changed $before to $after" >&2
      exit 1
    fi
    # the test tools, with torch and numpy held where they are (newer accelerate releases ask
    # for torch >= 2.6: unconstrained, pip would replace torch rather than pick an older one)
    python -c "from importlib.metadata import version as v; print(f'torch=={v(\"torch\")}'); print(f'numpy=={v(\"numpy\")}')" > "$venv/held.txt"
    python -m pip install -q -c "$venv/held.txt" -e '.[dev,npu]'
    python -m pip install -q -c "$venv/held.txt" -U setuptools  # >= 81: no pkg_resources, which torch 2.1 wants
    echo "== $(versions)"
    # (parity: tests/transforms/test_parity.py runs the suite and the command below, every
    # kernel and precision mode; the main leg runs the command at its full size)
    demo_out=$(mktemp -d "${TMPDIR:-/tmp}/npu-data-demo-oldest.XXXXXX")  # the demo wants an empty folder
    echo "== demo"; NPU_DATA_QUIET=1 npu-data demo --out "$demo_out"
    rm -rf "$demo_out"
    echo "== pytest (transforms, loaders, codecs; shards not slow)"
    # -m: torch.compile tracing the kernels whole and the aten op table are the newest torch's
    python -m pytest -o addopts="" -q -p no:cacheprovider -m "not newest_torch" \
      -n "${PYTEST_WORKERS:-auto}" --dist loadfile \
      tests/transforms tests/loaders tests/codecs tests/common/test_compat.py tests/test_buffers.py \
      tests/commands/test_doctor.py
    # the stores' slow tests (S3 servers, leases, ranks in subprocesses) exercise storage code
    # that torch does not reach; the main leg runs them
    python -m pytest -o addopts="" -q -p no:cacheprovider -m "not newest_torch and not slow" \
      -n "${PYTEST_WORKERS:-auto}" --dist loadfile tests/shards tests/bench/test_remote_bench.py
    ;;
  test-arm64)
    python -m pip install -q -e .
    PYTHON=python bash scripts/arm64_check.sh
    ;;
  *)
    echo "usage: bash scripts/dev.sh demo|test|test-fast|test-oldest|test-arm64|bench" >&2
    exit 2
    ;;
esac
