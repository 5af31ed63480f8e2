#!/usr/bin/env bash
# The playground and the console in a real browser (`make e2e` is the same
# where make exists): installs Debian's chromium and chromium-driver with
# apt-get when either is missing (needs root or sudo), then runs the
# browser tests (e2e/playground_browser_test.go,
# e2e/console_browser_test.go) once, with FLASHSALE_E2E=1 so that a
# missing browser fails instead of skipping. Their screenshots land in
# artifacts/ (ignored by git), or in $FLASHSALE_ARTIFACTS.
# Then what deploy/ ships: promtool (Debian's prometheus) on the alert
# rules and their unit tests, and the image built with podman, its binary
# run from the exported filesystem (deploy/*_test.go); both installed when
# missing, and neither may skip.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "e2e: no go on PATH: install the Go toolchain named in go.mod first" >&2; exit 1; }
# The Debian packages whose commands are missing, installed in one apt-get
# (chromium chromium-driver: the browser; prometheus: promtool; podman).
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v promtool >/dev/null || missing+=(prometheus)
command -v podman >/dev/null || missing+=(podman)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=sudo
  else
    echo "e2e: ${missing[*]} missing, and installing them needs root or sudo:" >&2
    echo "e2e:   apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  echo "== installing ${missing[*]} (apt-get)"
  $sudo apt-get update -qq
  # Only promtool of the prometheus package is used: where systemd runs,
  # the package also starts a server on :9090 (systemctl disable --now
  # prometheus stops it); in a container without an init system it does not.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "== the playground and the console in headless Chromium"
export FLASHSALE_E2E=1
export FLASHSALE_ARTIFACTS=${FLASHSALE_ARTIFACTS:-$PWD/artifacts}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
tests=(TestPlaygroundInChromiumShowsALiveUpdate TestConsoleInChromiumSignsInAndSteersASale)
go test -count=1 -run "^($(IFS='|'; echo "${tests[*]}"))\$" -v ./e2e/ 2>&1 | tee "$log"
# A renamed test would match nothing, and go test passes on that.
for t in "${tests[@]}"; do
  grep -q "^--- PASS: $t" "$log" || { echo "e2e: the browser test $t did not pass" >&2; exit 1; }
done

echo "== deploy/: the alert rules under promtool, the image built with podman"
go test -count=1 -run '^(TestPromtoolAcceptsTheRulesAndTheirTests|TestImageBinaryAnswersVersionWithTheRevision)$' -v ./deploy/ 2>&1 | tee "$log"
for t in TestPromtoolAcceptsTheRulesAndTheirTests TestImageBinaryAnswersVersionWithTheRevision; do
  grep -q "^--- PASS: $t" "$log" || { echo "e2e: $t did not pass" >&2; exit 1; }
done
# The image's own subtest (the binary built here) must have run, not skipped.
grep -q -- '--- PASS: TestImageBinaryAnswersVersionWithTheRevision/prebuilt_binary' "$log" || { echo "e2e: the image was not built and checked" >&2; exit 1; }
