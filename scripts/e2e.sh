#!/usr/bin/env bash
# The playground and the console in a real browser (`make e2e` is the same
# where make exists): installs Debian's chromium and chromium-driver with
# apt-get when either is missing (needs root or sudo), then runs the
# browser tests (e2e/playground_browser_test.go,
# e2e/console_browser_test.go) once, with FLASHSALE_E2E=1 so that a
# missing browser fails instead of skipping. Their screenshots land in
# artifacts/ (ignored by git), or in $FLASHSALE_ARTIFACTS.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "e2e: no go on PATH: install the Go toolchain named in go.mod first" >&2; exit 1; }
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=sudo
  else
    echo "e2e: chromium and chromium-driver are missing, and installing them needs root or sudo:" >&2
    echo "e2e:   apt-get install -y --no-install-recommends chromium chromium-driver" >&2
    exit 1
  fi
  echo "== installing chromium and chromium-driver (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
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
