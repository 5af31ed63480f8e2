#!/usr/bin/env bash
# Runs the README's test command (./scripts/test.sh) on a fresh, minimal
# Debian with only the Go toolchain added, so a missing install step cannot
# hide behind the services of the machine it runs on.
#
#   scripts/fresh-check.sh [--states LIST] [--runs N] [--later services|full]
#
# STATES (comma-separated; default: absent,apt):
#   absent   PostgreSQL not installed;
#   apt      PostgreSQL installed with apt's defaults (recommends, peer on the
#            socket, scram on TCP) and running, as apt leaves it;
#   reboot   after the runs of `absent`, every process of that machine is
#            stopped (services down, state on disk kept) and it runs again.
# Each state runs the command N times in a row (default 2) in one machine,
# so the later runs check "after an earlier run". With --later services
# (what CI runs) a later run is the services step again and one package
# that needs both stores (actors/writer): it proves that the set-up runs
# twice and leaves the stores usable, without the whole suite again.
#
# The machine: debootstrap --variant=minbase (the root is cached as a tarball
# in FRESH_CACHE, default /var/cache/flashsale-fresh, and re-made when older
# than a week), the host's Go toolchain copied in, the working tree (tracked
# and untracked, not ignored, with .git) copied in; its own network
# namespace behind NAT (veth) so only the outside is reachable and none of
# the host's services; its own mount and PID namespaces, so everything it
# mounted or started disappears with it. Needs root; one run at a time
# (flock). Cleans up everything on exit, also on failure or Ctrl-C.
set -euo pipefail

states=absent,apt
runs=2
later=full
while [ $# -gt 0 ]; do
  case $1 in
    --states) states=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --later) later=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-check: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "fresh-check: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }
case $later in full|services) ;; *) fail "--later takes services or full, not $later" ;; esac
[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, namespaces, NAT)"
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${FRESH_CACHE:-/var/cache/flashsale-fresh}
suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
suite=${suite:-bookworm}
mirror=${FRESH_MIRROR:-http://deb.debian.org/debian}
goroot=$(go env GOROOT) || fail "no go on PATH"

# Host tools.
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v nft >/dev/null || need+=(nftables)
command -v unshare >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  log "installing on the host: ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
    fail "apt-get install ${need[*]}"
fi

mkdir -p "$cache"
exec 9>"$cache/lock"
flock -w 3600 9 || fail "another fresh check holds $cache/lock"

ns=flashsale-fresh
host_if=fcf-host
sub=10.213.77
work=
machine_pid=
forward_was=$(cat /proc/sys/net/ipv4/ip_forward)

cleanup() {
  local rc=$?
  set +e
  stop_machine
  nft delete table ip flashsale_fresh 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  ip link del "$host_if" 2>/dev/null
  echo "$forward_was" > /proc/sys/net/ipv4/ip_forward
  if [ -n "$work" ] && [ -d "$work" ]; then
    if [ -n "$(findmnt -rn -o TARGET | grep -F "$work" || true)" ]; then
      log "leaving $work: something is still mounted under it"
    else
      rm -rf "$work"
    fi
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A stale namespace from a run that was killed hard.
ip netns del "$ns" 2>/dev/null || true
ip link del "$host_if" 2>/dev/null || true
nft delete table ip flashsale_fresh 2>/dev/null || true

# 1. A minimal Debian root, cached as a tarball.
tarball=$cache/$suite-minbase.tar
if [ ! -s "$tarball" ] || [ -n "$(find "$tarball" -mtime +7)" ]; then
  log "debootstrap --variant=minbase $suite (once a week; cached in $tarball)"
  tmp=$(mktemp -d /var/tmp/flashsale-debootstrap.XXXXXX)
  chmod 755 "$tmp"   # it becomes the machine's /
  if ! debootstrap --variant=minbase "$suite" "$tmp" "$mirror" > "$cache/debootstrap.log" 2>&1; then
    tail -n 20 "$cache/debootstrap.log" >&2; rm -rf "$tmp"; fail "debootstrap $suite (log: $cache/debootstrap.log)"
  fi
  tar -C "$tmp" -cf "$tarball.new" . && mv "$tarball.new" "$tarball"
  rm -rf "$tmp"
fi

# 2. The network: a namespace behind NAT that sees nothing of the host.
ip netns add "$ns"
ip link add "$host_if" type veth peer name eth0 netns "$ns"
ip addr add "$sub.1/30" dev "$host_if"
ip link set "$host_if" up
ip -n "$ns" addr add "$sub.2/30" dev eth0
ip -n "$ns" link set eth0 up
ip -n "$ns" link set lo up
ip -n "$ns" route add default via "$sub.1"
echo 1 > /proc/sys/net/ipv4/ip_forward
nft -f - <<EOF
table ip flashsale_fresh {
  chain post { type nat hook postrouting priority 100; ip saddr $sub.0/30 masquerade; }
  chain in { type filter hook input priority 0; ip saddr $sub.0/30 drop; }
}
EOF

resolv() {
  # The host's resolver, unless it is a loopback stub the namespace cannot reach.
  local f=/etc/resolv.conf
  if grep -qE '^nameserver\s+127\.' $f && [ -r /run/systemd/resolve/resolv.conf ]; then f=/run/systemd/resolve/resolv.conf; fi
  grep -E '^(nameserver|search|options)' $f
}

# 3. The machine: root, toolchain, source, namespaces.
new_machine() {
  work=$(mktemp -d /var/tmp/flashsale-fresh.XXXXXX)
  root=$work/root
  mkdir "$root"
  tar -C "$root" -xf "$tarball"
  chmod 755 "$root"
  resolv > "$root/etc/resolv.conf"
  # Trust anchors the host added to Debian's own (a network that inspects
  # TLS hands each machine its CA): placed where an administrator would,
  # so they count once the machine installs ca-certificates, not before.
  mkdir -p "$root/usr/local/share/ca-certificates"
  find /etc/ssl/certs /usr/local/share/ca-certificates -maxdepth 1 -type f \( -name '*.pem' -o -name '*.crt' \) \
    ! -name ca-certificates.crt -exec sh -c 'for f; do cp "$f" "$0/$(basename "${f%.*}").crt"; done' \
    "$root/usr/local/share/ca-certificates" {} +
  mkdir -p "$root/usr/local"
  cp -a "$goroot" "$root/usr/local/go"
  mkdir -p "$root/root/flashsale"
  (cd "$top" && { git ls-files -z --cached --others --exclude-standard; printf '.git\0'; } |
    tar --null -T - -cf - | tar -C "$root/root/flashsale" -xf -)
  [ -d "$top/../shared" ] && cp -a "$top/../shared" "$root/root/shared"
  boot_machine
}

boot_machine() {
  # PID 1 of the machine mounts its file systems and then waits; everything
  # started inside is its descendant and dies with it.
  ip netns exec "$ns" unshare --mount --pid --fork --propagation private bash -c '
    r=$1
    mount -t proc proc "$r/proc"
    mount -t sysfs sys "$r/sys"
    mount -t tmpfs -o mode=755 dev "$r/dev"
    for d in null zero full random urandom tty; do touch "$r/dev/$d"; mount --bind "/dev/$d" "$r/dev/$d"; done
    mkdir -p "$r/dev/pts" "$r/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"
    ln -s pts/ptmx "$r/dev/ptmx"
    ln -s /proc/self/fd "$r/dev/fd"
    mount -t tmpfs -o mode=1777 shm "$r/dev/shm"
    mount -t tmpfs -o mode=755 run "$r/run"
    exec sleep infinity' fresh "$root" 2>>"$work/machine.log" &
  local unshare_pid=$!
  for _ in $(seq 1 50); do
    machine_pid=$(pgrep -P "$unshare_pid" || true)
    [ -n "$machine_pid" ] && [ "$(readlink "/proc/$machine_pid/exe" 2>/dev/null)" = "$(readlink -f "$(command -v sleep)")" ] && break
    sleep 0.1
  done
  [ -n "$machine_pid" ] || fail "the machine did not start"
  machine_unshare=$unshare_pid
}

stop_machine() {
  [ -n "${machine_unshare:-}" ] || return 0
  kill -KILL "$machine_pid" 2>/dev/null || true   # PID 1: the whole machine goes
  wait "$machine_unshare" 2>/dev/null || true
  machine_unshare= machine_pid=
}

in_machine() {
  nsenter -t "$machine_pid" -m -p -n chroot "$root" /usr/bin/env -i \
    HOME=/root TERM=dumb LANG=C.UTF-8 CI=true \
    PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "$1"
}

results=()
run_suite() { # state, run number
  local t0=$SECONDS rc=0 cmd='./scripts/test.sh'
  if [ "$2" -gt 1 ] && [ "$later" = services ]; then
    cmd='eval "$(scripts/test-services.sh)" && go test -race -count=1 ./actors/writer/'
  fi
  log "== $1, run $2: $cmd"
  in_machine "cd /root/flashsale && $cmd" > "$work/$1-$2.log" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  results+=("$1 run $2: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in ${took}s")
  grep -E '^(ok|FAIL|---|test-services:|test:|==)' "$work/$1-$2.log" | tail -n 40 >&2 || true
  if [ $rc -ne 0 ]; then
    tail -n 60 "$work/$1-$2.log" >&2
    cp "$work/$1-$2.log" "$cache/last-failure.log"
    fail "$1 run $2 (exit $rc); its whole log is in $cache/last-failure.log"
  fi
}

IFS=, read -ra list <<< "$states"
for state in "${list[@]}"; do
  case $state in
    absent|apt)
      [ -z "${machine_unshare:-}" ] || { stop_machine; rm -rf "$work"; }
      new_machine
      if [ "$state" = apt ]; then
        log "== apt: installing PostgreSQL with apt's defaults"
        in_machine 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null &&
          { pg_lsclusters -h | grep -q online || pg_ctlcluster $(ls /usr/lib/postgresql) main start; } && pg_lsclusters' >&2 ||
          fail "apt: install and start PostgreSQL"
      fi
      for i in $(seq 1 "$runs"); do run_suite "$state" "$i"; done
      ;;
    reboot)
      [ -n "${machine_unshare:-}" ] || fail "reboot needs an earlier state in --states"
      log "== reboot: stopping every process of the machine"
      stop_machine
      boot_machine
      for i in $(seq 1 "$runs"); do run_suite reboot "$i"; done
      ;;
    *) fail "unknown state $state" ;;
  esac
done

log "all passed:"
printf '  %s\n' "${results[@]}" >&2
