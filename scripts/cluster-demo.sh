#!/usr/bin/env bash
# A local cluster of three members on 127.0.0.1, to try a sale whose
# segments are spread over several processes:
#   - one stock Redis with AOF (appendfsync always) and three lock Redis
#     nodes for Redlock, private redis-server processes on BASE_PORT+300..303;
#   - a database of its own, flashsale_demo_<random>, created on an existing
#     PostgreSQL and dropped at exit (KEEP_DATABASE=1 keeps it, and says so);
#   - three service processes found by protoactor's automanaged provider,
#     HTTP on 127.0.0.1:BASE_PORT+1..3;
#   - one seckill voucher of 4 segments and 1,000 units.
# It prints each member's URL and pid, the JWT secret and the command that
# mints a token for any user, and helpers: grabs (through the members in
# turn), where (the segments each member hosts) and kill-host (kills the
# member hosting the most); then it waits. Kill a member to watch the
# others go on; Ctrl-C stops everything it started.
#
# Nothing outside the repository and one temporary directory is written or
# changed: no package is installed, no PostgreSQL role is created or
# altered, nothing goes to the home directory (besides Go's own build cache,
# as for any go build), and the temporary directory and the database are
# removed at exit. It needs go, redis-server, psql and curl on PATH, and a
# PostgreSQL role that may CREATE DATABASE:
#
#   scripts/cluster-demo.sh            # or: make cluster-demo
#   DEMO_POSTGRES_URL='postgres://me@127.0.0.1:5432/postgres?sslmode=disable' scripts/cluster-demo.sh
#   BASE_PORT=9000 KEEP_DATABASE=1 scripts/cluster-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh

base=${BASE_PORT:-8080}
demo_init cluster-demo

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

demo_build
seeds="127.0.0.1:$((base + 201)),127.0.0.1:$((base + 202)),127.0.0.1:$((base + 203))"
lock_urls=$(IFS=,; echo "${locks[*]}")
members=()
for i in 1 2 3; do
  env REDIS_URL="redis://127.0.0.1:$stock_port/0" LOCK_REDIS_URLS="$lock_urls" DATABASE_URL="$database_url" \
    JWT_SECRET="$secret" HTTP_ADDR="127.0.0.1:$((base + i))" NODE_ID="member-$i" LOG_FORMAT=text \
    CLUSTER_PROVIDER=automanaged CLUSTER_SEEDS="$seeds" CLUSTER_AUTOMANAGED_PORT=$((base + 200 + i)) \
    "$work/flashsale" >"$work/member-$i.log" 2>&1 &
  pids+=($!)
  members+=($!)
done
for i in 1 2 3; do demo_ready "http://127.0.0.1:$((base + i))" "${members[$((i - 1))]}" "member-$i"; done
admin=$(token --user 1 --role admin)
demo_voucher "http://127.0.0.1:$((base + 1))" "Cluster demo" 1000 4

# grabs FIRST LAST: users FIRST..LAST each grab once, through members 1, 2,
# 3 in turn; a member that is down answers nothing, and the line says so.
cat >"$work/grabs" <<EOF
#!/usr/bin/env bash
for u in \$(seq "\${1:-100}" "\${2:-\${1:-100}}"); do
  m=\$(( u % 3 + 1 ))
  t=\$(JWT_SECRET='$secret' '$work/flashsale' token --user "\$u")
  a=\$(curl -s --max-time 10 "http://127.0.0.1:\$(( $base + m ))/query" -H 'Content-Type: application/json' \\
    -H "Authorization: Bearer \$t" \\
    -d '{"query":"mutation { seckillVoucher(voucherId: \"$voucher\") { code orderId } }"}') || a="(member \$m is down)"
  echo "user \$u via member \$m: \$a"
done
EOF
chmod +x "$work/grabs"

# where: how many of the voucher's segments each member hosts now (a
# segment is activated by its first grab, on the member the placement
# names). kill-host: kills the member hosting the most of them, so that
# the kill moves segments (a member hosting none would show nothing).
cat >"$work/where" <<EOF
#!/usr/bin/env bash
pids=(${members[*]})
for m in 1 2 3; do
  n=\$(curl -s --max-time 2 "http://127.0.0.1:\$(( $base + m ))/metrics" | awk '/^flashsale_cluster_segments_hosted /{print \$2}') || true
  echo "member \$m (pid \${pids[\$((m - 1))]}): \${n:+\$n segments hosted}\${n:-down}"
done
EOF
cat >"$work/kill-host" <<EOF
#!/usr/bin/env bash
pids=(${members[*]})
best=0 most=0
for m in 1 2 3; do
  n=\$(curl -s --max-time 2 "http://127.0.0.1:\$(( $base + m ))/metrics" | awk '/^flashsale_cluster_segments_hosted /{print int(\$2)}') || true
  if [ "\${n:-0}" -gt "\$most" ]; then best=\$m most=\$n; fi
done
if [ "\$best" = 0 ]; then echo "no member hosts a segment yet: grab first ($work/grabs 100 129)"; exit 1; fi
kill "\${pids[\$((best - 1))]}"
echo "killed member \$best (pid \${pids[\$((best - 1))]}), which hosted \$most segments; they move within SEGMENT_LEASE_TTL (3s)"
EOF
chmod +x "$work/where" "$work/kill-host"

cat <<EOF

A cluster of three members is running (Ctrl-C stops it all):
  member 1  http://127.0.0.1:$((base + 1))/   pid ${members[0]}   (playground; /metrics, /readyz)
  member 2  http://127.0.0.1:$((base + 2))/   pid ${members[1]}
  member 3  http://127.0.0.1:$((base + 3))/   pid ${members[2]}
Stock Redis (AOF) 127.0.0.1:$stock_port, lock Redis ${locks[*]}, database $db (dropped at exit$( [ "${KEEP_DATABASE:-}" = 1 ] && echo ": no, KEEP_DATABASE=1 keeps it")).
Voucher $voucher: 1,000 units in 4 segments, on sale now.

JWT secret: $secret
A token for any user (admin: add --role admin), while the demo runs:
  JWT_SECRET=$secret $work/flashsale token --user 42
or from the repository at any time:
  JWT_SECRET=$secret go run . token --user 42
Admin token: $admin

Grab as users 100 to 129, through members 1, 2, 3 in turn, and see where the
voucher's segments live (each is activated by its first grab):
  $work/grabs 100 129
  $work/where
Kill the member hosting the most segments, then grab again: the other two go on,
and its segments move to them within SEGMENT_LEASE_TTL (3s):
  $work/kill-host
  $work/grabs 130 159
  $work/where
Logs: $work/member-*.log
EOF
wait
