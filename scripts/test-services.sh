#!/usr/bin/env bash
# Makes sure the test suite has what it needs, on a fresh Debian machine
# with only Go installed as on a developer's box:
#   - gcc (go test -race links with cgo), git (generated-code check),
#   - redis-server on PATH (tests start private instances on random ports),
#   - a PostgreSQL that allows CREATE DATABASE, reachable at
#     TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres).
# It installs (apt-get) and starts only what is missing, logs to stderr, and
# prints one line for the caller to eval: export TEST_DATABASE_URL=...
set -euo pipefail

log() { echo "test-services: $*" >&2; }
url=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root (or sudo) to run: $*"; exit 1; fi
}

pg_port_open() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }

missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v git >/dev/null || missing+=(git)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ -z "${TEST_DATABASE_URL:-}" ] && ! pg_port_open && ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

if [ -z "${TEST_DATABASE_URL:-}" ] && ! pg_port_open; then
  ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! as_root pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main"; then
    log "creating PostgreSQL $ver cluster"
    as_root pg_createcluster "$ver" main >&2
  fi
  log "starting PostgreSQL $ver"
  as_root pg_ctlcluster "$ver" main start >&2 || true
  for _ in $(seq 1 50); do pg_port_open && break; sleep 0.2; done
  pg_port_open || { log "PostgreSQL did not start"; exit 1; }
  # A fresh Debian cluster asks for a password over TCP; give the
  # postgres role one the tests can use rather than loosening pg_hba.conf.
  if ! psql "$url" -qAtc 'select 1' >/dev/null 2>&1; then
    as_root su postgres -c "psql -qc \"ALTER ROLE postgres PASSWORD 'postgres'\"" >&2
    url="postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable"
  fi
fi
echo "export TEST_DATABASE_URL='$url'"
