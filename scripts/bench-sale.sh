#!/usr/bin/env bash
# One measured comparison on this machine (docs/BENCHMARKS.md, "Load tool
# and reference designs"): a private redis-server on a random loopback
# port, a fresh Postgres database for the service, the service built and
# started, then seckill-bench runs each scenario against the service, the
# seeds' reference design and the plain-HTTP ceiling in turn, checks every
# sale and prints the table, the ratios and a plot. Everything it started
# or created is removed at the end.
#
# Settings (environment): USERS (20000), CONCURRENCY (64), SCENARIOS
# (sold-out,in-stock), TARGETS (service,reference,ceiling), GQLGEN (1: also
# start the same build with GRAPHQL_COMPILED_GRABS=false on the same Redis
# and database and measure it as target "gqlgen"; 0: not), PLOT
# (artifacts/bench-sale.png, which git ignores, so a run leaves the tree
# clean; empty for none), BENCH_FLAGS (more flags, e.g.
# --json or --rate 5000), SERVICE_ENV (settings for the service, e.g.
# "GOGC=200 GOMEMLIMIT=150MiB"), ALT_ENV (settings: also start the same
# build with these on the same Redis and database and measure it as target
# "alt", to compare settings in one run), SAMPLE (a file: every SAMPLE_EVERY
# seconds, 30 by default, the service's goroutines, RSS and live heap are
# appended to it, for the fixed-rate growth run; see docs/BENCHMARKS.md),
# PROFILE (a path prefix: the service serves
# PPROF_ADDR and each service attack's CPU profile is written to
# <prefix>-<scenario>.pprof), REDIS_STATS (a file: the bench Redis's
# INFO commandstats after the run, to see which commands its CPU went to),
# METRICS (a file: the service's /metrics after the run, e.g. the order
# writer's batch sizes).
# Postgres comes from TEST_DATABASE_URL, else
# scripts/test-services.sh finds or sets one up.
set -euo pipefail
cd "$(dirname "$0")/.."

USERS=${USERS:-20000}
CONCURRENCY=${CONCURRENCY:-64}
SCENARIOS=${SCENARIOS:-sold-out,in-stock}
TARGETS=${TARGETS:-service,reference,ceiling}
PLOT=${PLOT-artifacts/bench-sale.png}

if [ -z "${TEST_DATABASE_URL:-}" ]; then
	eval "$(scripts/test-services.sh)"
fi
admin=$TEST_DATABASE_URL

work=$(mktemp -d)
pids=()
db=""
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	if [ -n "$db" ]; then psql -q "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

echo "bench-sale: building" >&2
go build -o "$work/flashsale" .
go build -o "$work/seckill-bench" ./cmd/seckill-bench

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --dir "$work" \
	--appendonly yes --appendfsync everysec --loglevel warning >"$work/redis.log" 2>&1 &
pids+=($!)
redis_url="redis://127.0.0.1:$rport/0"

db="seckill_bench_$(date +%s)_$$"
psql -q "$admin" -c "CREATE DATABASE $db" >/dev/null
db_url=$(python3 -c 'import sys, urllib.parse as u; p=u.urlparse(sys.argv[1]); print(p._replace(path="/"+sys.argv[2]).geturl())' "$admin" "$db")

secret=$(head -c 24 /dev/urandom | base64)

# start_service NAME PORT [VAR=VALUE...]: the service on the bench's Redis
# and database, waited for until ready. The load tool is one address
# standing for every user, so the per-address limit is off (SERVICE_ENV
# may set it).
start_service() {
	local name=$1 port=$2
	shift 2
	env REDIS_URL="$redis_url" DATABASE_URL="$db_url" JWT_SECRET="$secret" HTTP_ADDR="127.0.0.1:$port" LOG_LEVEL=warn \
		SHED_IP_PER_SEC=0 "$@" "$work/flashsale" >"$work/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	cat "$work/$name.log" >&2
	exit 1
}

sport=$(free_port)
profile_flags=()
if [ -n "${PROFILE:-}" ]; then
	pport=$(free_port)
	# shellcheck disable=SC2086 # SERVICE_ENV is a list of settings
	start_service service "$sport" PPROF_ADDR="127.0.0.1:$pport" ${SERVICE_ENV:-}
	profile_flags=(--profile-url "http://127.0.0.1:$pport" --profile "$PROFILE")
else
	# shellcheck disable=SC2086
	start_service service "$sport" ${SERVICE_ENV:-}
fi
if [ "${GQLGEN:-1}" = 1 ]; then
	gport=$(free_port)
	# shellcheck disable=SC2086
	start_service gqlgen "$gport" GRAPHQL_COMPILED_GRABS=false ${SERVICE_ENV:-}
	TARGETS="$TARGETS,gqlgen=http://127.0.0.1:$gport"
fi

if [ -n "${ALT_ENV:-}" ]; then
	aport=$(free_port)
	# shellcheck disable=SC2086
	start_service alt "$aport" ${SERVICE_ENV:-} $ALT_ENV
	TARGETS="$TARGETS,alt=http://127.0.0.1:$aport"
fi

if [ -n "${SAMPLE:-}" ]; then
	# One line per sample: seconds since the start, goroutines, RSS bytes,
	# live heap bytes (the service's own Prometheus metrics).
	(
		t0=$(date +%s)
		while sleep "${SAMPLE_EVERY:-30}"; do
			m=$(curl -fsS "http://127.0.0.1:$sport/metrics" 2>/dev/null) || continue
			printf '%s %s %s %s\n' "$(($(date +%s) - t0))" \
				"$(awk '$1 == "go_goroutines" {print $2}' <<<"$m")" \
				"$(awk '$1 == "process_resident_memory_bytes" {printf "%.0f", $2}' <<<"$m")" \
				"$(awk '$1 == "go_memstats_heap_inuse_bytes" {printf "%.0f", $2}' <<<"$m")"
		done
	) >>"$SAMPLE" &
	pids+=($!)
fi

echo "bench-sale: $(nproc) cores, $(uname -sr), load generator on the same machine" >&2
plot_flag=()
if [ -n "$PLOT" ]; then mkdir -p "$(dirname "$PLOT")" && plot_flag=(--plot "$PLOT"); fi
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
"$work/seckill-bench" --target "$TARGETS" --scenario "$SCENARIOS" \
	--url "http://127.0.0.1:$sport" --users "$USERS" --concurrency "$CONCURRENCY" \
	--jwt-secret "$secret" --redis-url "$redis_url" --database-url "$db_url" \
	"${plot_flag[@]}" "${profile_flags[@]}" ${BENCH_FLAGS:-}
if [ -n "${REDIS_STATS:-}" ]; then
	redis-cli -p "$rport" INFO commandstats | tr -d '\r' >"$REDIS_STATS"
fi
if [ -n "${METRICS:-}" ]; then
	curl -fsS "http://127.0.0.1:$sport/metrics" >"$METRICS"
fi
