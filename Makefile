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
