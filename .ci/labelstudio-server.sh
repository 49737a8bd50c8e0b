#!/usr/bin/env bash
# A real Label Studio server for the integration tests, in its own virtual environment
# (its pins clash with ours).
#   bash .ci/labelstudio-server.sh ensure-venv        create/reuse the venv and its migrated
#                                                     database, print the venv path
#   bash .ci/labelstudio-server.sh venv-path          print the venv path (no install)
#   bash .ci/labelstudio-server.sh run PORT DATA_DIR  run the server in the foreground
#   bash .ci/labelstudio-server.sh start PORT DATA_DIR  start it in the background; writes
#                                                     DATA_DIR/server.pid, waits for /health
#   bash .ci/labelstudio-server.sh stop DATA_DIR      stop a server started with `start`
# Environment: LABEL_STUDIO_VENV (default .venv-labelstudio in the repository root),
# LABEL_STUDIO_VERSION (default 1.23.2); LABEL_STUDIO_USERNAME / _PASSWORD / _USER_TOKEN
# create the first user (defaults: test@example.com / npu-data-test / a fixed test token).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${LABEL_STUDIO_VENV:-$root/.venv-labelstudio}"
version="${LABEL_STUDIO_VERSION:-1.23.2}"

# a database with every migration applied, made once per venv: a fresh server copies it instead
# of migrating (about 70 s of Django migrations; with the copy a start takes seconds)
template="$venv/npu-data-migrated.sqlite3"

venv_ok() {
  [ -x "$venv/bin/label-studio" ] && "$venv/bin/python" -c "import label_studio" 2>/dev/null
}

ensure_venv() {
  if venv_ok; then
    echo "$venv"
    return 0
  fi
  echo "creating the Label Studio venv at $venv (label-studio==$version, about 1 GB)" >&2
  python3 -m venv "$venv"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/pip" install -q "label-studio==$version" >&2
  venv_ok || { echo "error: label-studio did not install into $venv" >&2; exit 1; }
  echo "$venv"
}

server_env() {
  local data_dir="$1"
  export LABEL_STUDIO_BASE_DATA_DIR="$data_dir"
  export LABEL_STUDIO_USERNAME="${LABEL_STUDIO_USERNAME:-test@example.com}"
  export LABEL_STUDIO_PASSWORD="${LABEL_STUDIO_PASSWORD:-npu-data-test}"
  export LABEL_STUDIO_USER_TOKEN="${LABEL_STUDIO_USER_TOKEN:-npudatatesttoken0123456789}"
  export LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true
  export LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED=true
  export LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT="${LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT:-$data_dir}"
  export SENTRY_DSN= FRONTEND_SENTRY_DSN= COLLECT_ANALYTICS=false
  export LATEST_VERSION_CHECK=false  # no version check against pypi.org: 127.0.0.1 only
  export LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK=false
  mkdir -p "$data_dir"
}

ensure_template() {  # the migrated database (above), written atomically
  [ -f "$template" ] && return 0
  local tmp
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/npu-data-ls-template.XXXXXX")"
  ( server_env "$tmp" && "$venv/bin/label-studio" version --data-dir "$tmp" >/dev/null 2>&1 ) \
    || { echo "error: Label Studio could not migrate a new database (in $tmp)" >&2; exit 1; }
  cp "$tmp/label_studio.sqlite3" "$template.part"
  mv "$template.part" "$template"
  rm -rf "$tmp"
}

cmd="${1:-}"
case "$cmd" in
  ensure-venv) ensure_venv && ensure_template ;;
  venv-path) echo "$venv" ;;
  run)
    [ $# -eq 3 ] || { echo "usage: $0 run PORT DATA_DIR" >&2; exit 2; }
    venv_ok || { echo "error: no Label Studio venv at $venv — run: bash .ci/labelstudio-server.sh ensure-venv" >&2; exit 1; }
    server_env "$3"
    if [ -f "$template" ] && [ ! -e "$3/label_studio.sqlite3" ]; then
      cp "$template" "$3/label_studio.sqlite3"
    fi
    exec "$venv/bin/label-studio" start --no-browser --internal-host 127.0.0.1 \
      --host "http://127.0.0.1:$2" --port "$2" --data-dir "$3"
    ;;
  start)
    [ $# -eq 3 ] || { echo "usage: $0 start PORT DATA_DIR" >&2; exit 2; }
    mkdir -p "$3"
    setsid bash "$0" run "$2" "$3" >"$3/server.log" 2>&1 &
    echo $! >"$3/server.pid"
    for _ in $(seq 1 300); do
      if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$2/health', timeout=2)" 2>/dev/null; then
        echo "Label Studio is up on http://127.0.0.1:$2 (pid $(cat "$3/server.pid"))"
        exit 0
      fi
      kill -0 "$(cat "$3/server.pid")" 2>/dev/null || { tail -20 "$3/server.log" >&2; exit 1; }
      sleep 1
    done
    echo "error: Label Studio did not answer /health within 300 s (log: $3/server.log)" >&2
    exit 1
    ;;
  stop)
    [ $# -eq 2 ] || { echo "usage: $0 stop DATA_DIR" >&2; exit 2; }
    pid="$(cat "$2/server.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true
    rm -f "$2/server.pid"
    ;;
  *)
    echo "usage: $0 ensure-venv|venv-path|run PORT DATA_DIR|start PORT DATA_DIR|stop DATA_DIR" >&2
    exit 2
    ;;
esac
