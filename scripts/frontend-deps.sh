#!/usr/bin/env bash
# What the frontend checks (e2e/frontend) need: Node 20 or later with npm,
# the npm clients pinned in e2e/frontend/package-lock.json (npm ci), and
# Debian's chromium for the page in a headless browser. Node, npm and
# chromium are installed with apt-get when missing (needs root or sudo);
# a Debian whose nodejs is older than 20 (12 ships 18) stops here, saying
# so. Stops with the reason on the first thing it cannot provide. The test
# command (scripts/test.sh) runs it, then the checks with
# FLASHSALE_FRONTEND=1, under which a missing tool fails the test:
#   FLASHSALE_FRONTEND=1 go test -count=1 -v ./e2e/frontend/
set -euo pipefail
cd "$(dirname "$0")/.."

# apt_install installs Debian packages, as root or through sudo.
apt_install() {
  local sudo
  if [ "$(id -u)" -eq 0 ]; then
    sudo=
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=sudo
  else
    echo "frontend-deps: $* missing, and installing needs root or sudo:" >&2
    echo "frontend-deps:   apt-get install -y --no-install-recommends $*" >&2
    exit 1
  fi
  echo "== installing $* (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "frontend-deps: node $(node --version) is too old: the clients need Node 20 or later (Debian 13's nodejs, or NodeSource's for Debian 12)" >&2; exit 1; }

echo "== npm ci in e2e/frontend (the pinned clients)"
(cd e2e/frontend && npm ci --ignore-scripts --no-audit --no-fund)
