#!/usr/bin/env bash
# What the frontend checks (e2e/frontend) need: Node 20 or later with npm,
# the npm clients pinned in e2e/frontend/package-lock.json (npm ci), and
# Debian's chromium for the page in a headless browser. Node and npm are
# installed with apt-get when missing and this Debian's nodejs is 20 or
# later; chromium then too (root or sudo). Exit status:
#   0  everything is here: run the checks with FLASHSALE_FRONTEND=1
#      (under which a missing tool fails the test):
#        FLASHSALE_FRONTEND=1 go test -count=1 -v ./e2e/frontend/
#   3  no Node 20 on this machine nor in its Debian (12 ships 18): the
#      checks cannot run here; said on stderr, nothing installed
#   other: something it should have provided failed (the reason above)
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

# node_major prints the major version of the node on PATH (nothing without one).
node_major() { command -v node >/dev/null && node -p 'process.versions.node.split(".")[0]' || true; }
too_old() {
  echo "frontend-deps: no Node 20 here ($1): the npm clients need Node 20 or later (Debian 13's nodejs, or NodeSource's for Debian 12); the frontend checks are skipped on this machine" >&2
  exit 3
}

major=$(node_major)
if [ -z "$major" ]; then
  # Only worth installing when this Debian's nodejs is recent enough.
  candidate=$( (apt-cache policy nodejs 2>/dev/null || true) | awk '/Candidate:/ { print $2 }' | sed -E 's/^[0-9]+://; s/[.~+-].*//')
  case "$candidate" in
    ''|'(none)') too_old "no node on PATH and no nodejs package" ;;
  esac
  [ "$candidate" -ge 20 ] 2>/dev/null || too_old "no node on PATH; this Debian's nodejs is $candidate"
fi
missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

major=$(node_major)
[ "${major:-0}" -ge 20 ] || too_old "node $(node --version)"

# npm ci wipes node_modules and installs again (10-20 s); a stamp of the
# lock file it installed from skips that while the lock is unchanged.
stamp=e2e/frontend/node_modules/.flashsale-lock.sha256
want=$(sha256sum e2e/frontend/package-lock.json | cut -d' ' -f1)
if [ -r "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "== npm clients in e2e/frontend already installed from this package-lock.json"
else
  echo "== npm ci in e2e/frontend (the pinned clients)"
  (cd e2e/frontend && npm ci --ignore-scripts --no-audit --no-fund)
  echo "$want" > "$stamp"
fi
