# Shorthands where make exists; the commands themselves are the scripts
# (a fresh Debian has no make: `./scripts/test.sh` is the test command).
.PHONY: test fresh-check run build generate e2e

# The whole test suite (README, CI).
test:
	./scripts/test.sh

# The playground in headless Chromium, then promtool on the alert rules
# and the image built with podman (deploy/); installs chromium,
# chromium-driver, prometheus and podman with apt-get when missing (root
# or sudo), fails rather than skips without them. `make test` runs the
# browser and promtool tests where their tools exist.
e2e:
	./scripts/e2e.sh

# The test command on fresh minimal Debian machines, in every state of
# PostgreSQL: absent, installed and started by apt, and after a reboot
# (each twice in a row). Needs root.
fresh-check:
	./scripts/fresh-check.sh --states absent,reboot,apt --runs 2

run:
	go run .

# The VCS revision is linked in as well (with +dirty for local changes): the
# toolchain stamps none from a git worktree or with GOFLAGS=-buildvcs=false.
build:
	go build -ldflags "-X main.linkedRevision=$$(git rev-parse HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo +dirty)" -o bin/flashsale .

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

# The soak-length versions of the tests that have one (the three-member
# cluster's 60,000 grabs, a member joining and dying in a 12,000-grab
# sale): the test command runs their short versions.
.PHONY: long
long:
	eval "$$(scripts/test-services.sh)" && FLASHSALE_LONG=1 go test -race -count=1 -timeout 30m -run 'TestClusterOfThreeProcessesSellsExactly|TestClusterMembersJoinAndDieMidSale' ./e2e/

# Guards broken on purpose (scripts/mutants.sh, docs/RELIABILITY.md):
# make mutants-own [MUTANTS="fence hold"] runs each listed invariant test
# under the mutant of its own guard (docs/invariant-tests.tsv's guard
# column) and fails if one passes; make mutants [MUTANTS=...] runs every
# listed test of some packages under each mutant (MUTANT_PACKAGES widens
# them), to see which tests notice which guard.
.PHONY: mutants mutants-own
mutants:
	./scripts/mutants.sh $(MUTANTS)
mutants-own:
	./scripts/mutants.sh --own $(MUTANTS)

# Every fuzz target (docs/RELIABILITY.md) for FUZZTIME each: make fuzz
# FUZZTIME=30m. The test command runs them 3s each.
FUZZTIME ?= 10m
.PHONY: fuzz
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# A local 3-member cluster on 127.0.0.1 (docs/OPERATIONS.md, "A cluster"); Ctrl-C stops it.
.PHONY: cluster-demo sentinel-demo
cluster-demo:
	scripts/cluster-demo.sh
sentinel-demo:
	scripts/sentinel-demo.sh

# One measured flash sale on this machine: the service, the seeds'
# reference design and the plain-HTTP ceiling, same run, checked
# (docs/BENCHMARKS.md). make bench-sale USERS=20000 SCENARIOS=sold-out,in-stock
.PHONY: bench-sale
bench-sale:
	./scripts/bench-sale.sh

# A sale through a waiting room at the size of its promises: 5,000 users
# join early and 15,000 later, 1,000 units at 200 admissions a second
# with at most 300 tickets open, every user waiting and grabbing; checked,
# the plot in artifacts/bench-queue.png (docs/BENCHMARKS.md).
.PHONY: bench-queue
bench-queue:
	TARGETS=service SCENARIOS=queue GQLGEN=0 PLOT=$${PLOT-artifacts/bench-queue.png} \
		SERVICE_ENV="TICKET_RELEASE_BEFORE=5s CONN_PER_IP_PER_SEC=0 $${SERVICE_ENV:-}" \
		BENCH_FLAGS="--early 5000 --late 15000 --stock 1000 --admit-per-second 200 --max-active 300 --release-before 5s $${BENCH_FLAGS:-}" \
		./scripts/bench-sale.sh

# The fixed-rate growth run, which shows whether a long sale leaks: one sale
# at RATE grabs/s for ten minutes against the service alone, its
# goroutines, RSS and live heap sampled every 30 s into SAMPLE
# (docs/BENCHMARKS.md).
SOAK_RATE ?= 500
.PHONY: soak
soak:
	USERS=$$(( $(SOAK_RATE) * 600 )) SCENARIOS=sold-out TARGETS=service GQLGEN=0 PLOT= \
		SAMPLE=$${SAMPLE:-soak-samples.txt} BENCH_FLAGS="--rate $(SOAK_RATE) --max-duration 10m" \
		./scripts/bench-sale.sh
