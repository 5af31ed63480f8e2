#!/usr/bin/env bash
# Makes sure the test suite has what it needs, on any Debian machine with
# only Go installed, whatever state its PostgreSQL is in:
#   - gcc (go test -race links with cgo), git (go build stamps the version),
#     CA certificates (go fetches modules over TLS),
#   - redis-server on PATH (tests start private instances on random ports;
#     no system Redis is needed or started; the same binary runs the
#     sentinels, --sentinel) and redis-cli (it creates the Redis Cluster
#     of the replicated tests), and etcd likewise (the cluster test over
#     the etcd provider), and ip (iproute2: network namespaces for the
#     test of the per-address limits over IPv6),
#   - a PostgreSQL role that may CREATE DATABASE, reachable over TCP.
#
# Database access, first that works:
#   1. TEST_DATABASE_URL, when set (checked, never changed);
#   2. the URL remembered by an earlier run (STATE_FILE below);
#   3. a dedicated role `flashsale_test` with a random password, created or
#      re-passworded over the local socket as the `postgres` system user
#      (Debian's peer rule); PostgreSQL is installed when absent and started
#      when not running. The `postgres` role is never changed.
#
# Installs use --no-install-recommends, and no package starts a service of
# its own while we install (policy-rc.d): we start only PostgreSQL, and only
# when it is not running. Every step stops the script at its first failure
# with the step's name and reason. Logs go to stderr; stdout is one line for
# the caller to eval: export TEST_DATABASE_URL=...
set -euo pipefail

log() { echo "test-services: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

role=flashsale_test
state_dir=${XDG_STATE_HOME:-${HOME:-/root}/.local/state}/flashsale
state_file=$state_dir/test-database-url
did=()   # what this run installed or started, for the closing line

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else fail "need root (or password-less sudo) to run: $*"; fi
}

# as_postgres runs a command as the postgres system user (peer auth on the
# local socket).
as_postgres() {
  if [ "$(id -un)" = postgres ]; then "$@"
  elif [ "$(id -u)" -eq 0 ]; then
    if command -v runuser >/dev/null; then runuser -u postgres -- "$@"; else su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; fi
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n -u postgres "$@"
  else fail "need root (or password-less sudo) to create the test role as the postgres user"; fi
}

can_connect() { PGCONNECT_TIMEOUT=5 psql "$1" -qAtc 'select 1' >/dev/null 2>&1; }
why_not() { PGCONNECT_TIMEOUT=5 psql "$1" -qAtc 'select 1' 2>&1 >/dev/null | head -n 1; }
pg_port_open() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
have_server() { compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; }

# install PKG... with Recommends left out and service starts denied while
# apt runs (only when no policy-rc.d exists already; removed afterwards).
install() {
  log "installing $*"
  local policy=/usr/sbin/policy-rc.d ours=
  if [ ! -e $policy ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" || fail "write $policy"
    ours=1
  fi
  local rc=0
  { as_root apt-get update -qq >&2 &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2; } || rc=$?
  [ -z "$ours" ] || as_root rm -f $policy
  [ $rc -eq 0 ] || fail "apt-get install $* (exit $rc): is the package archive reachable, and are we root?"
  did+=("installed $*")
}

# 1. Tools.
missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v git >/dev/null || missing+=(git)
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)   # Go fetches modules over TLS
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)   # redis-cli --cluster create
command -v etcd >/dev/null || missing+=(etcd-server)   # the etcd cluster test starts its own
command -v ip >/dev/null || missing+=(iproute2)   # ip netns: the IPv6 /64 test of the per-address limits
command -v psql >/dev/null || missing+=(postgresql-client)
if [ -z "${TEST_DATABASE_URL:-}" ] && ! have_server && ! pg_port_open; then missing+=(postgresql); fi
[ ${#missing[@]} -eq 0 ] || install "${missing[@]}"

finish() {
  if [ ${#did[@]} -gt 0 ]; then
    local line; line=$(printf '%s; ' "${did[@]}"); log "done: ${line%; }"
  else log "done: nothing installed or started"; fi
  echo "export TEST_DATABASE_URL='$1'"
  exit 0
}

# 2. Given URL.
if [ -n "${TEST_DATABASE_URL:-}" ]; then
  can_connect "$TEST_DATABASE_URL" || fail "TEST_DATABASE_URL does not connect: $(why_not "$TEST_DATABASE_URL")"
  finish "$TEST_DATABASE_URL"
fi

# 3. Remembered URL.
if [ -r "$state_file" ]; then
  url=$(cat "$state_file")
  if can_connect "$url"; then log "using the test role remembered in $state_file"; finish "$url"; fi
  log "remembered test role does not connect ($(why_not "$url")); setting it up again"
fi

# 4. A running server; started by us when it is not.
if ! pg_port_open; then
  have_server || install postgresql
  ver=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! as_root pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main"; then
    log "creating PostgreSQL $ver cluster main"
    as_root pg_createcluster "$ver" main >&2 || fail "pg_createcluster $ver main"
  fi
  log "starting PostgreSQL $ver"
  as_root pg_ctlcluster "$ver" main start >&2 || fail "pg_ctlcluster $ver main start"
  for _ in $(seq 1 100); do pg_port_open && break; sleep 0.1; done
  pg_port_open || fail "PostgreSQL $ver started but nothing listens on 127.0.0.1:5432"
  did+=("started PostgreSQL $ver")
fi

# 5. The dedicated role, over the local socket as the postgres system user.
pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
sql="DO \$\$ BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = '$role') THEN
    ALTER ROLE $role LOGIN CREATEDB PASSWORD '$pw';
  ELSE
    CREATE ROLE $role LOGIN CREATEDB PASSWORD '$pw';
  END IF;
END \$\$;"
out=$(cd / && as_postgres psql -X -q -v ON_ERROR_STOP=1 -c "$sql" 2>&1) ||
  fail "create role $role over the local socket as the postgres user: ${out:-no output}
  (a PostgreSQL that is not Debian's own? set TEST_DATABASE_URL to a role that may CREATE DATABASE)"
url="postgres://$role:$pw@127.0.0.1:5432/postgres?sslmode=disable"
can_connect "$url" || fail "role $role does not connect over TCP: $(why_not "$url")"
mkdir -p "$state_dir" && (umask 077 && printf '%s\n' "$url" > "$state_file") || fail "remember the test role in $state_file"
did+=("set up role $role (remembered in $state_file)")
finish "$url"
