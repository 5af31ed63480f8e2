#!/usr/bin/env bash
# What the frontend checks (e2e/frontend) need: Node 20 or later with npm,
# the npm clients pinned in e2e/frontend/package-lock.json (npm ci), and
# Debian's chromium for the page in a headless browser, installed with
# apt-get when missing (needs root or sudo). Stops with the reason on the
# first thing it cannot provide. Then run the checks with
#   FLASHSALE_FRONTEND=1 go test -count=1 -v ./e2e/frontend/
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null && command -v npm >/dev/null || { echo "frontend-deps: no node or npm on PATH: install Node 20 or later first" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "frontend-deps: node $(node --version) is too old: the clients need Node 20 or later" >&2; exit 1; }

if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=sudo
  else
    echo "frontend-deps: chromium is missing, and installing it needs root or sudo:" >&2
    echo "frontend-deps:   apt-get install -y --no-install-recommends chromium" >&2
    exit 1
  fi
  echo "== installing chromium (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

echo "== npm ci in e2e/frontend (the pinned clients)"
(cd e2e/frontend && npm ci --ignore-scripts --no-audit --no-fund)
