#!/usr/bin/env bash
# The whole test suite, the README's test command (`make test` is the same
# where make exists): services, vet, generated code is committed and
# current, then every test with the race detector against real Redis and
# Postgres (the public contract in docs/contract/ among them:
# graph/contract_test.go; the npm clients and headless Chromium against
# the service: e2e/frontend; every fuzz target's corpus), then a table of
# where the time went. Stops at the first failed step. Fuzzing itself is
# a search, not a check: `make fuzz`, and CI runs each target briefly.
#
# FLASHSALE_TEST_SERVICES names the service set-up command (default
# scripts/test-services.sh); the script's own test stubs it
# (e2e/scripts_test.go).
set -euo pipefail
cd "$(dirname "$0")/.."

# Every step is announced; the first that fails ends the run with one last
# line naming it and its exit code (its own reason is printed above).
# Each announcement says how long the run has taken so far (docs/
# OPERATIONS.md, "The tests", has the usual figures).
current=
step() { current=$1; echo "== $1 (at ${SECONDS}s)"; }
trap 'rc=$?; [ $rc -eq 0 ] || [ -z "$current" ] || echo "test: FAILED at step \"$current\" (exit $rc); later steps were not run" >&2' EXIT

command -v go >/dev/null || { echo "test: no go on PATH: install the Go toolchain named in go.mod first" >&2; exit 1; }
step services
services=$(${FLASHSALE_TEST_SERVICES:-scripts/test-services.sh})
eval "$services"
export CGO_ENABLED=1

step "go vet"
go vet ./...

step "generated code is current"
# Regenerating must change nothing (works in a dirty tree too: it compares
# the files before and after, not against the last commit).
snapshot() { find graph persistence actors -type f \( -name '*.go' -o -name '*.graphqls' \) 2>/dev/null | sort | xargs sha256sum; }
before=$(snapshot)
go generate ./...
if [ "$before" != "$(snapshot)" ]; then
  git diff --stat >&2 || true
  echo "go generate changed files: run it and commit the generated code" >&2
  exit 1
fi

# Node 20+, the pinned npm clients and chromium, for e2e/frontend: the
# browser-facing checks (graphql-http's audit, CORS, a page in headless
# Chromium). Installed here, once the cheap steps passed; with
# FLASHSALE_FRONTEND=1 a missing one fails that test instead of skipping.
# Where neither the machine nor its Debian has Node 20 (Debian 12 ships
# 18), the step says so and e2e/frontend skips, saying why.
step "frontend tools (node, npm ci, chromium)"
rc=0
scripts/frontend-deps.sh || rc=$?
case $rc in
  0) export FLASHSALE_FRONTEND=1 ;;
  3) echo "test: e2e/frontend skipped: no Node 20 on this machine (see above)" ;;
  *) exit "$rc" ;;
esac

# gotestsum runs go test and keeps its event stream, from which the last
# step prints where the time went (docs/OPERATIONS.md, "The tests").
mkdir -p artifacts
# The service binary the process tests run (e2e, the fault suite, the
# load tool's checks), built once here rather than once per package.
step "build the service for the process tests"
# Static and path-trimmed, as the image's binary (deploy/image_test.go,
# which scripts/e2e.sh runs after it in CI) is built: that build then finds
# every package compiled here and only links.
CGO_ENABLED=0 go build -trimpath -o artifacts/flashsale-test .
export FLASHSALE_SERVICE_BIN=$PWD/artifacts/flashsale-test
# Several cluster members in one process trip a data race inside
# protoactor-go (remote.Start sets grpc's process-wide logger on every
# start): those tests are built without -race only (actors/
# cluster_members_test.go says so). They mostly wait for members to find
# each other, so they run beside the -race run; their output follows it.
# So do graph's allocation bound per request and its bound on a node's
# memory per waiting user: the race detector's instrumentation allocates
# two to three times as much.
step "go test -race, and beside it the cluster members in one process and the allocation bound (without -race)"
go tool gotestsum --format pkgname --jsonfile artifacts/test-members.json -- -count=1 -timeout 10m -run 'Members|Duplicate|^TestNoRequestAllocatesMoreThan1MiB$|^TestANodeHoldsNoMemoryPerWaitingUser$' ./actors/ ./graph/ > artifacts/test-members.log 2>&1 &
members=$!
race_rc=0
# The slowest packages first, so that none of them starts last and the
# run waits on it alone; two test binaries at a time: with three, on a
# slow day, Redis calls of the nodes under test timed out (each binary
# runs its own tests in parallel, and the members' run is beside them).
slow=(./testkit/chaos ./e2e ./graph ./httpapi ./persistence)
rest=$(go list ./... | sed 's|^flashsale|.|' | grep -vxF -f <(printf '%s\n' "${slow[@]}"))
go tool gotestsum --format pkgname --jsonfile artifacts/test-race.json -- -race -count=1 -p 2 -timeout 20m "${slow[@]}" $rest || race_rc=$?
members_rc=0
wait $members || members_rc=$?
[ $race_rc -eq 0 ] || { cat artifacts/test-members.log; exit $race_rc; }
step "cluster members in one process and the allocation bound (without -race)"
cat artifacts/test-members.log
[ $members_rc -eq 0 ] || exit $members_rc

step "test times (slowest first)"
go run ./cmd/testtimes -min 10s artifacts/test-race.json artifacts/test-members.json
echo "test: passed in ${SECONDS}s"
