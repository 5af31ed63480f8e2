# `make test` is the one test command (README, CI). It installs and starts
# what it needs on a fresh Debian machine with only Go.
.PHONY: test run build generate

test:
	./scripts/test.sh

run:
	go run .

build:
	go build -o bin/flashsale .

generate:
	go generate ./...

# The seeded fault-injection suite (docs/RELIABILITY.md): make chaos
# SEED=42 ROUNDS=200 [CHAOS_FLAGS="-kinds redis-empty -v"]. Without SEED the
# seed comes from the clock (printed).
SEED ?= 0
ROUNDS ?= 200
.PHONY: chaos
chaos:
	eval "$$(scripts/test-services.sh)" && go run ./cmd/chaos -seed $(SEED) -rounds $(ROUNDS) $(CHAOS_FLAGS)
