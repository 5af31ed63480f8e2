#!/usr/bin/env bash
# A sale through Redis Sentinel on 127.0.0.1, and what a buyer sees when
# the primary dies mid-sale:
#   - a primary (AOF, appendfsync always) and two replicas, private
#     redis-server processes on BASE_PORT+400..402, watched by three
#     sentinels on BASE_PORT+410..412 (down-after-milliseconds DOWN_AFTER_MS,
#     1000 by default; quorum 2);
#   - a database of its own, as scripts/cluster-demo.sh makes it, dropped at
#     exit;
#   - one node, REDIS_MODE=sentinel, REDIS_ACK_REPLICAS=1 (an order is
#     answered OK only once a replica holds it), HTTP on 127.0.0.1:BASE_PORT+1;
#   - a voucher of 100,000 units, and a buyer who grabs 100 ms after each
#     answer, a new user each time.
# After 5 s it kills the primary (SIGKILL) and prints, a line a second, what
# the buyer was answered, when the sentinels named the new primary, when
# the first grab sent after that was answered OK and when the last one
# refused was sent; then it waits (Ctrl-C stops it all). With --once it
# exits after that report.
#
# Nothing outside the repository and one temporary directory is written or
# changed (scripts/demo-lib.sh). It needs go, redis-server, redis-cli, psql
# and curl on PATH, and a PostgreSQL role that may CREATE DATABASE:
#
#   scripts/sentinel-demo.sh            # or: make sentinel-demo
#   DOWN_AFTER_MS=5000 BASE_PORT=9000 scripts/sentinel-demo.sh --once
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/demo-lib.sh

base=${BASE_PORT:-8080}
down_after=${DOWN_AFTER_MS:-1000}
once=
[ "${1:-}" = --once ] && once=1
demo_init sentinel-demo redis-cli

primary=$((base + 400))
server() { # server PORT [REPLICA_OF]
  local dir=$work/redis-$1
  mkdir -p "$dir"
  redis-server --port "$1" --bind 127.0.0.1 --dir "$dir" --appendonly yes --appendfsync always --save "" \
    ${2:+--replicaof 127.0.0.1 "$2"} >"$dir/log" 2>&1 &
  pids+=($!)
}
server $primary
primary_pid=${pids[-1]}
server $((base + 401)) $primary
server $((base + 402)) $primary
addrs=()
for i in 0 1 2; do
  port=$((base + 410 + i))
  mkdir -p "$work/sentinel-$port"
  cat >"$work/sentinel-$port/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
dir $work/sentinel-$port
sentinel monitor demo 127.0.0.1 $primary 2
sentinel down-after-milliseconds demo $down_after
sentinel failover-timeout demo 10000
CONF
  redis-server "$work/sentinel-$port/sentinel.conf" --sentinel >"$work/sentinel-$port/log" 2>&1 &
  pids+=($!)
  addrs+=("127.0.0.1:$port")
done
for _ in $(seq 1 50); do
  [ "$(redis-cli -p $primary info replication 2>/dev/null | tr -d '\r' | sed -n 's/^connected_slaves://p')" = 2 ] && break
  sleep 0.2
done
# Every sentinel must know both replicas and the other sentinels before
# the kill, as in a deployment that has run a while: a sentinel learns the
# replicas from the primary's INFO every 10 s, and a leader that does not
# know a replica leaves it following the dead primary until another
# sentinel fixes it (and until then no replica acknowledges a grab).
knows() { # knows PORT: the sentinel sees 2 replicas and 2 other sentinels
  redis-cli -p "$1" sentinel master demo 2>/dev/null | tr -d '\r' |
    awk 'p == "num-slaves" && $0 != 2 { bad = 1 } p == "num-other-sentinels" && $0 != 2 { bad = 1 }
         { p = $0 } END { exit bad }' && [ -n "$(redis-cli -p "$1" sentinel master demo 2>/dev/null)" ]
}
for _ in $(seq 1 150); do
  ok=1
  for a in "${addrs[@]}"; do knows "${a##*:}" || ok=; done
  [ -n "$ok" ] && break
  sleep 0.2
done

demo_build
redis_url="redis://${addrs[0]}?master_name=demo&addr=${addrs[1]}&addr=${addrs[2]}"
env REDIS_MODE=sentinel REDIS_URL="$redis_url" REDIS_ACK_REPLICAS=1 DATABASE_URL="$database_url" \
  JWT_SECRET="$secret" HTTP_ADDR="127.0.0.1:$((base + 1))" LOG_FORMAT=text \
  "$work/flashsale" >"$work/node.log" 2>&1 &
pids+=($!)
node=http://127.0.0.1:$((base + 1))
demo_ready "$node" "${pids[-1]}" node
demo_voucher "$node" "Sentinel demo" 100000 1

# The buyer: a new user every 100 ms, each answer on a line of its own
# (milliseconds since the epoch when it came, the code, when it was sent).
now_ms() { date +%s%3N; }
(
  u=1000
  while :; do
    u=$((u + 1))
    t=$(token --user "$u")
    sent=$(now_ms)
    a=$(curl -s --max-time 6 "$node/query" -H 'Content-Type: application/json' -H "Authorization: Bearer $t" \
      -d "{\"query\":\"mutation { seckillVoucher(voucherId: \\\"$voucher\\\") { code } }\"}" |
      sed -n 's/.*"code":"\([A-Z_]*\)".*/\1/p')
    echo "$(now_ms) ${a:-NO_ANSWER} $sent"
    sleep 0.1
  done
) >"$work/buyer.log" 2>/dev/null &
pids+=($!)

sleep 5
killed=$(now_ms)
{ kill -9 "$primary_pid" && wait "$primary_pid"; } 2>/dev/null || true
log "killed the primary (127.0.0.1:$primary); the sentinels have down-after-milliseconds $down_after"
named=
for _ in $(seq 1 300); do
  p=$(redis-cli -p $((base + 410)) sentinel get-master-addr-by-name demo 2>/dev/null | sed -n 2p)
  if [ -n "$p" ] && [ "$p" != "$primary" ]; then named=$(now_ms); break; fi
  sleep 0.1
done
[ -n "$named" ] || fail "the sentinels named no new primary in 30 s"
# The first OK of a grab sent once the new primary was named: an OK
# answered after the kill may come from a grab the old primary took.
first_ok=
for _ in $(seq 1 300); do
  first_ok=$(awk -v n="$named" '$3 >= n && $2 == "OK" { print $1; exit }' "$work/buyer.log")
  [ -n "$first_ok" ] && break
  sleep 0.1
done
sleep 1

echo
echo "What the buyer saw, second by second from the kill (answers a second):"
awk -v k="$killed" '$1 > k - 2000 { s = int(($1 - k) / 1000); if ($1 < k) s = "-" int((k - $1) / 1000 + 1); n[s " " $2]++; if (!(s in seen)) { order[++m] = s; seen[s] = 1 } }
  END { for (i = 1; i <= m; i++) { s = order[i]; line = ""; for (key in n) { split(key, f, " "); if (f[1] == s) line = line " " f[2] "=" n[key] } printf "  %+3ss:%s\n", s, line } }' "$work/buyer.log"
echo "The sentinels named the new primary $(( named - killed )) ms after the kill."
if [ -n "$first_ok" ]; then
  echo "The first OK of a grab sent after that came $(( first_ok - named )) ms after the new primary was named ($(( first_ok - killed )) ms after the kill)."
  last_refused=$(awk -v n="$named" '$3 >= n && $2 == "UNAVAILABLE" { l = $3 } END { print l }' "$work/buyer.log")
  [ -z "$last_refused" ] || echo "The last grab refused (UNAVAILABLE) was sent $(( last_refused - named )) ms after the new primary was named."
else
  echo "No OK within 30 s of the kill (the node's log: $work/node.log)."
fi
[ -n "$once" ] && exit 0
echo
echo "The node, the sentinels and the buyer go on (buyer's answers: $work/buyer.log); Ctrl-C stops it all."
wait
