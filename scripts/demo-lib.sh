# Shared by the local demos (scripts/cluster-demo.sh, scripts/sentinel-demo.sh),
# sourced, never run: the PostgreSQL database of a demo, its temporary
# directory, the build of the service, and the cleanup of everything a demo
# started. Nothing outside the repository and one temporary directory is
# written or changed: no package is installed, no PostgreSQL role is created
# or altered, nothing goes to the home directory (besides Go's own build
# cache), and the temporary directory and the database are removed at exit
# (KEEP_DATABASE=1 keeps the database, and says so).
#
# demo_init NAME TOOL... checks the tools, creates the database and the
# directory and sets: work, db, database_url, pids (add each process
# started), secret, and the trap that cleans up.

log() { echo "$demo_name: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

demo_init() {
  demo_name=$1
  shift
  for tool in go redis-server psql curl "$@"; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH (this script installs nothing)"
  done
  # The PostgreSQL to create the demo's database on: DEMO_POSTGRES_URL, else
  # the test command's TEST_DATABASE_URL, else the local postgres role.
  pg_url=${DEMO_POSTGRES_URL:-${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}}
  pg_shown=$(echo "$pg_url" | sed 's|//\([^:@/]*\):[^@/]*@|//\1:***@|; s|password=[^&]*|password=***|g')
  PGCONNECT_TIMEOUT=5 psql "$pg_url" -qAtc 'select 1' >/dev/null 2>&1 ||
    fail "cannot connect to PostgreSQL at $pg_shown; set DEMO_POSTGRES_URL to a role that may CREATE DATABASE"

  work=$(mktemp -d "${TMPDIR:-/tmp}/flashsale-$demo_name.XXXXXX")
  db=flashsale_demo_$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
  db_created=
  pids=()
  trap cleanup INT TERM EXIT

  psql "$pg_url" -qc "create database $db" >/dev/null || fail "create database $db"
  db_created=1
  # The same server and role, the demo's database, the URL's parameters kept.
  database_url=${pg_url%%\?*}
  database_url=${database_url%/*}/$db
  case $pg_url in *\?*) database_url="$database_url?${pg_url#*\?}" ;; esac
  secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
}

cleanup() {
  trap - INT TERM EXIT
  log "stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "$db_created" ]; then
    if [ "${KEEP_DATABASE:-}" = 1 ]; then
      log "kept database $db (KEEP_DATABASE=1); drop it with: psql '$pg_shown' -c 'drop database $db'"
    else
      psql "$pg_url" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 ||
        log "could not drop database $db; drop it with: psql '$pg_shown' -c 'drop database $db'"
    fi
  fi
  rm -rf "$work"
}

# demo_build builds the service into $work/flashsale.
demo_build() {
  log "building"
  local rev
  rev=$(git rev-parse HEAD 2>/dev/null || true)
  [ -z "$rev" ] || git diff --quiet HEAD 2>/dev/null || rev=$rev+dirty
  go build -ldflags "-X main.linkedRevision=$rev" -o "$work/flashsale" . || fail "go build"
}

# token ARGS... mints a token with the demo's secret (flashsale token).
token() { JWT_SECRET="$secret" "$work/flashsale" token "$@"; }

# demo_ready URL PID NAME waits until URL/readyz answers, while PID lives.
demo_ready() {
  for _ in $(seq 1 150); do
    curl -fs "$1/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.2
  done
  curl -fs "$1/readyz" >/dev/null || fail "$3 did not become ready (its log: $work/$3.log)"
}

# demo_voucher URL TITLE STOCK SEGMENTS creates a seckill voucher on sale
# now and sets voucher to its id.
demo_voucher() {
  local admin created
  admin=$(token --user 1 --role admin)
  created=$(curl -fs "$1/query" -H 'Content-Type: application/json' -H "Authorization: Bearer $admin" \
    -d "{\"query\":\"mutation { createVoucher(input: {shopId: \\\"1\\\", title: \\\"$2\\\", payValue: 100, actualValue: 500, type: SECKILL, stock: $3, segments: $4, beginAt: \\\"2020-01-01T00:00:00Z\\\", endAt: \\\"2099-01-01T00:00:00Z\\\"}) { id } }\"}") ||
    fail "create the demo voucher"
  voucher=$(echo "$created" | sed -n 's/.*"id":"\([0-9]*\)".*/\1/p')
  [ -n "$voucher" ] || fail "create the demo voucher: $created"
}
