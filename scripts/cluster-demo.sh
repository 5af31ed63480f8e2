#!/usr/bin/env bash
# A local cluster of three members on 127.0.0.1, to try a sale whose
# segments are spread over several processes:
#   - one stock Redis with AOF (appendfsync always), three lock Redis
#     nodes for Redlock, and PostgreSQL (installed and started if missing,
#     as the test command does: scripts/test-services.sh);
#   - three service processes found by protoactor's automanaged provider,
#     HTTP on 127.0.0.1:8081..8083;
#   - one seckill voucher of 4 segments and 1,000 units.
# It prints each member's URL, an admin and a user token, and a grab to try,
# then waits; Ctrl-C stops everything it started and removes its files.
#
#   scripts/cluster-demo.sh            # or: make cluster-demo
#   BASE_PORT=9000 scripts/cluster-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

base=${BASE_PORT:-8080}
log() { echo "cluster-demo: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

command -v go >/dev/null || fail "go is not on PATH"
eval "$(scripts/test-services.sh)" || fail "PostgreSQL and redis-server (scripts/test-services.sh)"

work=$(mktemp -d)
pids=()
cleanup() {
  trap - INT TERM EXIT
  log "stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup INT TERM EXIT

# A database of its own, created from the test role's URL.
db=flashsale_cluster_demo
admin_url=${TEST_DATABASE_URL%/*}/postgres
psql "$admin_url" -qAtc "select 1 from pg_database where datname = '$db'" | grep -q 1 ||
  psql "$admin_url" -qc "create database $db" || fail "create database $db"
database_url=${TEST_DATABASE_URL%/*}/$db
database_url=${database_url%%\?*}
case $TEST_DATABASE_URL in *\?*) database_url="$database_url?${TEST_DATABASE_URL#*\?}" ;; esac

redis() { # redis PORT [AOF]
  local dir=$work/redis-$1
  mkdir -p "$dir"
  if [ "${2:-}" = aof ]; then
    redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --appendonly yes --appendfsync always --save "" >"$dir/log" 2>&1 &
  else
    redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --appendonly no --save "" >"$dir/log" 2>&1 &
  fi
  pids+=($!)
}
stock_port=$((base + 300)); redis $stock_port aof
locks=()
for i in 1 2 3; do redis $((base + 300 + i)); locks+=("redis://127.0.0.1:$((base + 300 + i))/0"); done
sleep 0.3

log "building"
go build -o "$work/flashsale" . || fail "go build"
secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
seeds="127.0.0.1:$((base + 201)),127.0.0.1:$((base + 202)),127.0.0.1:$((base + 203))"
lock_urls=$(IFS=,; echo "${locks[*]}")
for i in 1 2 3; do
  env REDIS_URL="redis://127.0.0.1:$stock_port/0" LOCK_REDIS_URLS="$lock_urls" DATABASE_URL="$database_url" \
    JWT_SECRET="$secret" HTTP_ADDR="127.0.0.1:$((base + i))" NODE_ID="member-$i" \
    CLUSTER_PROVIDER=automanaged CLUSTER_SEEDS="$seeds" CLUSTER_AUTOMANAGED_PORT=$((base + 200 + i)) \
    "$work/flashsale" >"$work/member-$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 1 150); do
    curl -fs "http://127.0.0.1:$((base + i))/readyz" >/dev/null 2>&1 && break
    kill -0 "${pids[-1]}" 2>/dev/null || true
    sleep 0.2
  done
  curl -fs "http://127.0.0.1:$((base + i))/readyz" >/dev/null || { tail -20 "$work/member-$i.log" >&2; fail "member $i did not become ready"; }
done

admin=$(JWT_SECRET="$secret" "$work/flashsale" token --user 1 --role admin)
user=$(JWT_SECRET="$secret" "$work/flashsale" token --user 42 --role user)
created=$(curl -fs "http://127.0.0.1:$((base + 1))/query" -H 'Content-Type: application/json' -H "Authorization: Bearer $admin" \
  -d '{"query":"mutation { createVoucher(input: {shopId: \"1\", title: \"Cluster demo\", payValue: 100, actualValue: 500, type: SECKILL, stock: 1000, segments: 4, beginAt: \"2020-01-01T00:00:00Z\", endAt: \"2099-01-01T00:00:00Z\"}) { id } }"}') ||
  fail "create the demo voucher"
voucher=$(echo "$created" | sed -n 's/.*"id":"\([0-9]*\)".*/\1/p')
[ -n "$voucher" ] || fail "create the demo voucher: $created"

cat <<EOF

A cluster of three members is running (Ctrl-C stops it all):
  member 1  http://127.0.0.1:$((base + 1))/   (playground; /metrics, /readyz)
  member 2  http://127.0.0.1:$((base + 2))/
  member 3  http://127.0.0.1:$((base + 3))/
Stock Redis (AOF) 127.0.0.1:$stock_port, lock Redis ${locks[*]}, database $db.
Voucher $voucher: 1,000 units in 4 segments, on sale now.

Admin token: $admin
User 42:     $user

Grab through any member:
  curl -s http://127.0.0.1:$((base + 2))/query -H 'Content-Type: application/json' \\
    -H 'Authorization: Bearer $user' \\
    -d '{"query":"mutation { seckillVoucher(voucherId: \"$voucher\") { code orderId } }"}'
Where segments live: curl -s http://127.0.0.1:$((base + 1))/metrics | grep flashsale_cluster_
Logs: $work/member-*.log
EOF
wait
