#!/usr/bin/env bash
# The whole test suite, the README's test command (`make test` is the same
# where make exists): services, vet, generated code is committed and
# current, then every test with the race detector against real Redis and
# Postgres (the public contract in docs/contract/ among them:
# graph/contract_test.go), then each fuzz target for a few seconds.
# Stops at the first failed step.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test: no go on PATH: install the Go toolchain named in go.mod first" >&2; exit 1; }
echo "== services"
services=$(scripts/test-services.sh) || { echo "test: setting up the services failed (reason above)" >&2; exit 1; }
eval "$services"
export CGO_ENABLED=1

echo "== go vet"
go vet ./...

echo "== generated code is current"
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

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...

echo "== fuzz targets, 3s each (make fuzz runs them longer)"
scripts/fuzz.sh 3s
