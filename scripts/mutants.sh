#!/usr/bin/env bash
# Breaks one guard of a promise at a time, on purpose, and runs invariant
# tests (docs/invariant-tests.tsv) against the broken code: a test that
# checks a promise must fail when its guard is gone.
#
#   scripts/mutants.sh --own [MUTANT...]   each listed test under its own
#       guard's mutant only (the list's guard column), one go test per
#       mutant and package; exits 1 if any test passed under it (a test
#       that cannot fail), 2 if some did not run (skipped, not built).
#       Every package, process tests included; artifacts/mutants-own.tsv.
#   scripts/mutants.sh [MUTANT...]         every listed test of the chosen
#       packages under each mutant (default: every mutant below), to see
#       which tests notice which guard; artifacts/mutants.tsv.
#   MUTANT_PACKAGES="persistence graph" scripts/mutants.sh oversell
#
# A mutant is a file and a sed expression that must change exactly one
# line of it; the file is restored from a copy afterwards (also on
# Ctrl-C). Tests run without -race: a mutant breaks logic, not memory
# order, and the cluster members' tests exist only without it
# (actors/cluster_members_test.go). The process tests (e2e, the fault
# suite, bench/sale, e2e/frontend) build the service from the broken tree:
# FLASHSALE_SERVICE_BIN is unset, and testenv.BuildService runs go build,
# whose cache is keyed by the sources (embedded Lua and SQL included).
# Each go test's output is kept in artifacts/mutants-logs/.
#
# The whole script is read before it runs (main at the end), so editing
# it during a run changes nothing of that run.

# name | file | sed expression (must change exactly one line)
mutants=(
  # grab.lua, the voucher's batch script
  "requestid|persistence/scripts/grab.lua|s/^  local prev = redis.call('HGET', KEYS\[5\], req)$/  local prev = false/"
  "oversell|persistence/scripts/grab.lua|s/^  elseif stock <= 0 then$/  elseif false then/"
  "limit|persistence/scripts/grab.lua|s/^  elseif tonumber(redis.call('HGET', KEYS\[3\], user) or '0') >= limit then$/  elseif false then/"
  "fence|persistence/scripts/grab.lua|s/^if redis.call('GET', KEYS\[4\]) ~= ARGV\[1\] then$/if false then/"
  "run|persistence/scripts/grab.lua|s/^if not status or m\[9\] ~= run then$/if not status then/"
  # the token a load is verified under (scripts.go): evictions, an evicting policy
  "evicted|persistence/scripts.go|s/^\t\`if e and e ~= '0' then return run .. '\\/' .. e end \` +$/\t\`\` +/"
  "evicting|persistence/scripts.go|s/^\t\`if p and p ~= 'noeviction' then return '!' .. p end \` +$/\t\`\` +/"
  # a reload's hold ends early only when no order writer can hold an order of the lost load
  "hold-rows|usecase/catalog/holds.go|s/!clean.Before(l.since)/clean.After(time.Time{})/"
  "writer-clean|actors/writer/actor.go|s/a.w.opts.Consumer, a.held == nil)/a.w.opts.Consumer, true)/"
  # the selling node's copy of OK'd orders no writer read yet (SoldShadow), and the hold's wait for it
  "shadow|persistence/grab.go|s/^\tif len(sold) > 0 {$/\tif len(sold) > 0 \&\& false {/"
  "shadow-rows|persistence/writerlease.go|s/^\treturn NewWriterLeases(db, OrdersFamily).With(SellersFamily)$/\treturn NewWriterLeases(db, OrdersFamily)/"
  "hold|persistence/scripts/grab.lua|s/^elseif m\[7\] and now < tonumber(m\[7\]) then verdict = 7/elseif false then verdict = 7/"
  "decr|persistence/scripts/grab.lua|s/^  redis.call('DECRBY', KEYS\[2\], sold)$/  local _ = sold/"
  "only-sales|persistence/scripts/grab.lua|s/^  elseif verdict ~= 0 then$/  elseif verdict ~= 0 and redis.call('HSET', KEYS[5], req, '0') then/"
  # loads: preheat.lua and the Go around it, the writer's adoption
  "keep-load|persistence/scripts/preheat.lua|s/^if verified and ARGV\[11\] ~= 'resync' then$/if false then/"
  "reload-users|persistence/scripts/preheat.lua|s/^  redis.call('HSET', KEYS\[3\], ARGV\[i\], ARGV\[i + 1\])$/  local _ = i/"
  "inflight|persistence/stock.go|s/^\t\t\tstock := snap.Voucher.Seckill.Stock - len(inflight)$/\t\t\tstock := snap.Voucher.Seckill.Stock/"
  "resync|persistence/stock.go|s/ && prev != o.id {$/ \&\& prev != o.id \&\& false {/"
  "row-lock|persistence/vouchers.go|s/^\t\tq = q.For(\"UPDATE\")$/\t\t_ = q/"
  "adopt-hold|persistence/scripts/adopt_orders.lua|s/^if now >= tonumber(redis.call('HGET', KEYS\[1\], 'hold') or '0') then$/if false then/"
  # stock changes after the sale: cancellations, timeouts, restocks
  "returns|persistence/scripts/apply_pending.lua|s/^  redis.call('INCRBY', KEYS\[2\], total)$/  total = 0/"
  "return-once|persistence/scripts/apply_pending.lua|s/ or redis.call('SISMEMBER', KEYS\[4\], member) == 1 then$/ then/"
  "return-stamp|persistence/scripts/apply_pending.lua|s/^  if (not life) or life ~= stamp or /  if /"
  "cancel-once|persistence/orders_store.go|s/^\t\t\tWhere(\"id IN (?) AND voucher_id = ? AND status = ?\", bun.In(ids), voucherID, domain.OrderUnpaid).$/\t\t\tWhere(\"id IN (?) AND voucher_id = ?\", bun.In(ids), voucherID)./"
  "pay-once|persistence/orders_store.go|s/^\t\t\tWhere(\"id = ? AND user_id = ? AND status = ?\", id, userID, domain.OrderUnpaid).$/\t\t\tWhere(\"id = ? AND user_id = ?\", id, userID)./"
  "restock-once|persistence/orders_store.go|s/^\t\tif err == nil { \/\/ a retry: finish what may be left for Redis$/\t\tif false {/"
  "repair-inflight|usecase/orders/reconcile.go|s/^\tif rec.InFlight > 0 || rec.Pending > 0 {$/\tif false {/"
  "balanced|domain/reconcile.go|s/^\treturn r.Loaded && r.Drift() == 0 && r.UsersOff == 0$/\treturn r.Loaded/"
  # Postgres, the last guard
  "db-limit|persistence/migrations/20261122000003_guards.tx.up.sql|s/^    CHECK (live <= per_user_limit)$/    CHECK (live >= 0)/"
  "db-stock|persistence/migrations/20261122000001_schema.tx.up.sql|s/^    stock          INT NOT NULL CHECK (stock >= 0),$/    stock          INT NOT NULL,/"
  "collision|persistence/orderlog_handler.go|s/^\t\t\tif !sameOrder(e.order, st) {$/\t\t\tif false {/"
  "ids|persistence/orderids.go|s/^\t\t\tstart := max(c.ReservedUntilSec+1, o.second())$/\t\t\tstart := o.second()/"
  # availability: a cluster client follows a failover at once
  "slot-map|persistence/redisclient.go|s/^\t\tcc.OnNewNode(func(node \*redis.Client) { node.AddHook(slotMapRefresh{cc}) })$/\t\t_ = slotMapRefresh{cc}/"
  # acknowledged writes (WAIT, WAITAOF)
  "wait|persistence/acks.go|s/^\tcase n < int64(r.acks.Replicas):$/\tcase false:/"
  "waitaof|persistence/acks.go|s/^\tcase n\[0\] < 1 || n\[1\] < int64(r.acks.Replicas):$/\tcase false:/"
  # the database fallback and the node ledger that feeds it
  "fallback|persistence/fallback.go|s/^\tif sk.Stock != view.Remaining {$/\tif false {/"
  "fallback-nodes|persistence/fallback.go|s/^\treturn end.Add(fallbackSlack).Before(seen), nil$/\treturn end.Add(fallbackSlack).Before(seen) || true, nil/"
  "fallback-limit|persistence/fallback.go|s/^\tif live >= sk.PerUserLimit {$/\tif false {/"
  "ledger|actors/ledger.go|s/^\t\tif c.holds(g) {$/\t\tif false {/"
  "ledger-stale|actors/ledger.go|s/^\tunknown := v.undecidedOf(c.seg) || mayHaveSold$/\tunknown := false/"
  # the voucher actor: callers who gave up, memory, the record of sales
  "gaveup|actors/voucher.go|s/^\treturn g.state.CompareAndSwap(grabWaiting, grabTaken) || g.state.Load() == grabTaken$/\treturn g.state.CompareAndSwap(grabWaiting, grabTaken) || true/"
  "handoff|actors/voucher.go|s/^\treturn g.state.CompareAndSwap(grabWaiting, grabForwarded) || g.state.Load() == grabTaken$/\treturn g.state.CompareAndSwap(grabWaiting, grabForwarded) || true/"
  "memory|actors/voucher.go|s/^\tcase st.Remaining <= 0:$/\tcase false:/"
  "keyed|actors/voucher.go|s/^\tif ok && g.keyed && (code == domain.SeckillSoldOut || code == domain.SeckillPaused) {$/\tif false {/"
  "sent|actors/voucher.go|/^func (a \*voucherActor) decided(/,/^}/s/^\tif g.sent() {$/\tif false {/"
  "record|actors/memory.go|s/^\tif id, sold := m.keyed\[g.req\]; sold {$/\tif id, sold := m.keyed[g.req]; sold \&\& false {/"
  "record-key|actors/memory.go|s/^\t\t\t\tif id != res\[i\].OrderID {$/\t\t\t\tif id != res[i].OrderID \&\& false {/"
  "tally|actors/memory.go|s/ && t.Requests == int64(len(m.keyed))+m.unkeyed$//"
  "claim|actors/memory.go|s/ && t.Claim == m.claim && / \&\& /"
  "req-user|actors/router.go|s/^\t\treturn \"u\" + strconv.FormatInt(req.UserID, 10) + \":\" + req.RequestID$/\t\treturn \"u:\" + req.RequestID/"
  # the order writer (actors/writer drives persistence.OrderLogHandler)
  "lost|actors/writer/actor.go|s/^\t\t\t\treturn a.pause(ctx, \"handle\", err)$/\t\t\t\t_ = err/"
  "ack|actors/writer/actor.go|s/^\t\tif len(live) > 0 {$/\t\tif false {/"
  "dead-letter|actors/writer/actor.go|s/^\tif len(h.refused) == 0 {$/\tif true {/"
  "reclaim|actors/writer/actor.go|s/^\tcase time.Since(a.lastClaim) > o.ClaimEvery:$/\tcase false:/"
  "reclaim-lease|actors/writer/actor.go|s/^\tif o.Reclaim == nil {$/\tif true {/"
  "own-pending|actors/writer/actor.go|/a.logs, a.lastList = logs, time.Now()/,/a.ownPending = true/s/^\t\ta.ownPending = true$/\t\ta.ownPending = false/"
  "attempt|persistence/orderlog_handler.go|s/^\t\tactx, cancel := context.WithTimeout(ctx, h.attempt)$/\t\tactx, cancel := context.WithCancel(ctx)/"
  "dead-consumer|persistence/scripts/remove_dead_consumer.lua|s/ and tonumber(f\['pending'\]) == 0 and / and /"
  "finished|persistence/scripts/log_finished.lua|s/^if redis.call('EXISTS', KEYS\[2\]) == 1 and redis.call('XLEN', KEYS\[2\]) > 0 then return 0 end$/if false then return 0 end/"
  "prune|persistence/scripts/unregister_log.lua|s/^if g ~= ARGV\[2\] then return 0 end$/if false then return 0 end/"
  # red packets
  "money|persistence/scripts/grab_red_packet.lua|s/^  local prev = redis.call('HGET', KEYS\[3\], user)$/  local prev = false/"
  "rp-expired|persistence/scripts/grab_red_packet.lua|s/^  elseif now >= expire then$/  elseif false then/"
  "rp-hold|persistence/scripts/grab_red_packet.lua|s/^  elseif now < hold then$/  elseif false then/"
  "rp-run|persistence/scripts/grab_red_packet.lua|s/^if not expire or m\[3\] ~= run then return {1, 0, 0} end$/if not expire then return {1, 0, 0} end/"
  "rp-reload|persistence/redpacket.go|s/^\t\t\tif len(users) > 0 {$/\t\t\tif false {/"
  "rp-load-once|persistence/redpacket.go|s/s.rdb.Watch(ctx, load, keys\[0\]);/s.rdb.Watch(ctx, load);/"
  "rp-lost|persistence/scripts/adopt_grabs.lua|s/^    lost\[#lost + 1\] = n$/    n = n/"
  "rp-return|persistence/scripts/return_packet.lua|s/^if redis.call('EXISTS', KEYS\[1\]) == 0 then return 0 end$/if true then return 0 end/"
  "rp-holders|persistence/scripts/settle_red_packet.lua|s/^if redis.call('ZCOUNT', KEYS\[4\], .*) > 0 then return 0 end$/-- holders not counted/"
  "rp-wipe|persistence/scripts/settle_red_packet.lua|s/^  if now < wait then return 0 end$/  -- no wait/"
  "rp-refunded|persistence/redpacketlog_handler.go|s/^\t\tif p.RefundTime == nil {$/\t\tif true {/"
  "rp-lock|persistence/redpacketlog_handler.go|s/^\t\tq = q.For(\"SHARE\")$/\t\t_ = q/"
  "refund-lock|persistence/redpacket_store.go|/^func (s \*RedPacketStore) Refund(/,/^}/s/^\t\t\tq = q.For(\"UPDATE\")$/\t\t\t_ = q/"
  "rp-forget|persistence/redpacket_store.go|s/^\tif err := s.redis.Forget(ctx, id); err != nil {$/\tif err := error(nil); err != nil {/"
  "prune-cutoff|persistence/redpacket_store.go|s/^const settledBefore = \"refund_time IS NOT NULL AND refund_time < ?\"$/const settledBefore = \"refund_time IS NOT NULL OR refund_time < ?\"/"
  "open-log|persistence/redpacketlog_handler.go|s/^\t\tif err != nil || open {$/\t\tif err != nil || open \&\& false {/"
  "split|domain/redpacket.go|s/^\t\thi := min(2\*left\/packets, left-(packets-1))$/\t\thi := 2 * left \/ packets/"
  # the edge and the node
  "segments-paused|persistence/vouchers.go|s/^\t\tcase status != domain.StatusPaused:$/\t\tcase false:/"
  "ticket-user|usecase/gate/ticket.go|s/^\tif int64(binary.BigEndian.Uint64(raw\[1:\])) != user || /\tif /"
  "breaker|internal/breaker/breaker.go|s/{ return c.ConsecutiveFailures >= uint32(opts.Failures) },$/{ return false },/"
  "shutdown|node/app.go|s/^\terr := a.http.Shutdown(shutCtx)$/\terr, _ := a.http.Close(), shutCtx/"
  # the judges: the fault suite's and the load tool's
  "judge-oversell|testkit/chaos/check.go|s/^\tif n := o.okAnswers - excused; n > p.stock {$/\tif n := o.okAnswers - excused; false {/"
  "judge-split|testkit/chaos/redpacket.go|s/^\t\tif a < 1 {$/\t\tif false {/"
  "check-oversell|bench/sale/check.go|s/^\tif ok > exp.Stock {$/\tif false {/"
  "check-packets|bench/sale/check.go|s/^\t\tif ok == exp.Stock && undecided == 0 && cents != exp.TotalCents {$/\t\tif false {/"
)
packages=${MUTANT_PACKAGES:-actors actors/writer persistence graph usecase/orders usecase/redpackets}
list=docs/invariant-tests.tsv

# apply_mutant NAME: breaks NAME's guard, after copying its file to
# $backup; fails unless exactly one line changed.
apply_mutant() {
  local m name file expr
  for m in "${mutants[@]}"; do
    IFS='|' read -r name file expr <<< "$m"
    [ "$name" = "$1" ] && break
    name=
  done
  [ -n "$name" ] || { echo "mutants: no mutant named $1" >&2; exit 1; }
  cp "$file" "$backup"
  restore_to=$file
  sed -i "$expr" "$file"
  local changed
  changed=$(diff "$backup" "$file" | grep -c '^[<>]' || true)
  if [ "$changed" -ne 2 ]; then
    echo "mutants: $name changed $changed lines in $file (old and new), want 2: its expression no longer matches the code exactly once" >&2
    exit 1
  fi
  echo "== mutant $name ($file)"
}

restore() {
  [ -z "$restore_to" ] || cp "$backup" "$restore_to"
  restore_to=
}

# run_tests MUTANT PKG NAMES OUT: runs the tests NAMES (A|B|...) of PKG
# and appends "MUTANT PKG TEST RESULT" to OUT per test; RESULT is fail,
# pass, skip or "not run" (the package did not build, the run ended).
run_tests() {
  local mutant=$1 pkg=$2 names=$3 out=$4 t r log
  log=artifacts/mutants-logs/$mutant-${pkg//\//_}.json
  # In a process group of its own, waited for in the background: a
  # signal to the script ends the run at once (see main), and the group
  # with go test, its test binary and what that started.
  # shellcheck disable=SC2086 # MUTANT_TEST_FLAGS is a list of flags
  setsid go test -count=1 -p 1 -timeout "${MUTANT_TIMEOUT:-30m}" ${MUTANT_TEST_FLAGS:-} -json -run "^($names)\$" "./$pkg" > "$log" 2>&1 &
  child=$!
  wait "$child" || true
  child=
  if ! grep -q '"Action":"run"' "$log"; then
    echo "  (no test ran in $pkg; the end of its output:)"
    tail -n 20 "$log" | sed 's/^/    /'
  fi
  for t in ${names//|/ }; do
    r=$(grep -F "\"Test\":\"$t\"," "$log" | grep -oE '"Action":"(pass|fail|skip)"' | tail -n 1 | cut -d'"' -f4 || true)
    printf '%s\t%s\t%s\t%s\n' "$mutant" "$pkg" "$t" "${r:-not run}" >> "$out"
    printf '  %-7s %s %s\n' "${r:-not run}" "$pkg" "$t"
  done
}

# own runs each listed test under its own guard's mutant.
own() {
  local want=("$@") out=artifacts/mutants-own.tsv m name pkgs pkg names
  printf 'mutant\tpackage\ttest\tresult\n' > "$out"
  for m in "${mutants[@]}"; do
    name=${m%%|*}
    if [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
    pkgs=$(awk -F'\t' -v g="$name" '!/^#/ && $5 == g && !seen[$1]++ { print $1 }' <<< "$rows")
    [ -n "$pkgs" ] || { echo "== mutant $name: no listed test names it"; continue; }
    apply_mutant "$name"
    for pkg in $pkgs; do
      names=$(awk -F'\t' -v g="$name" -v p="$pkg" '!/^#/ && $5 == g && $1 == p { printf "%s%s", sep, $2; sep = "|" }' <<< "$rows")
      run_tests "$name" "$pkg" "$names" "$out"
    done
    restore
  done
  local total failed passed
  total=$(($(wc -l < "$out") - 1))
  failed=$(awk -F'\t' 'NR > 1 && $4 == "fail"' "$out" | wc -l)
  passed=$(awk -F'\t' 'NR > 1 && $4 == "pass"' "$out" | wc -l)
  echo "mutants: $failed of $total listed tests failed under their own guard's mutant (in ${SECONDS}s); results in $out"
  if [ "$failed" -ne "$total" ]; then
    echo "mutants: not seen failing:" >&2
    awk -F'\t' 'NR > 1 && $4 != "fail" { printf "  %s under %s: %s %s\n", $4, $1, $2, $3 }' "$out" >&2
  fi
  [ "$passed" -eq 0 ] || return 1
  [ "$failed" -eq "$total" ] || return 2
}

# cross runs every listed test of $packages under each chosen mutant.
cross() {
  local want=("$@") out=artifacts/mutants.tsv m name pkg names
  printf 'mutant\tpackage\ttest\tresult\n' > "$out"
  for m in "${mutants[@]}"; do
    name=${m%%|*}
    if [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
    apply_mutant "$name"
    for pkg in $packages; do
      names=$(awk -F'\t' -v p="$pkg" '!/^#/ && $1 == p { printf "%s%s", sep, $2; sep = "|" }' <<< "$rows")
      [ -n "$names" ] || continue
      run_tests "$name" "$pkg" "$names" "$out"
    done
    restore
  done
  echo "mutants: results in $out (fail = the test noticed the broken guard)"
}

main() {
  set -euo pipefail
  cd "$(dirname "$0")/.."
  local mode=cross
  if [ "${1:-}" = --own ]; then
    mode=own
    shift
  fi
  rows=$(cat "$list") # read once: the list may change during a run
  local m name names undefined
  names=$(for m in "${mutants[@]}"; do echo "${m%%|*}"; done)
  for m in "$@"; do
    grep -qxF -- "$m" <<< "$names" || { echo "mutants: no mutant named $m" >&2; exit 1; }
  done
  undefined=$(awk -F'\t' '!/^#/ && NF { print ($5 == "" ? "(none)" : $5) }' <<< "$rows" | sort -u | while read -r name; do
    grep -qxF -- "$name" <<< "$names" || echo "$name"
  done)
  [ -z "$undefined" ] || { echo "mutants: $list names guards no mutant breaks: $undefined" >&2; exit 1; }

  eval "$(scripts/test-services.sh)"
  unset FLASHSALE_SERVICE_BIN # process tests must build the broken code
  mkdir -p artifacts/mutants-logs
  backup=$(mktemp)
  restore_to=
  trap 'restore; rm -f "$backup"' EXIT
  child=
  trap '[ -z "$child" ] || kill -TERM -- "-$child" 2>/dev/null; exit 130' INT TERM
  "$mode" "$@"
}

main "$@"
exit
