#!/usr/bin/env bash
# Breaks one guard of a promise at a time, on purpose, and runs the
# invariant tests (docs/invariant-tests.tsv) of the chosen packages
# against the broken code, to show which of them notice: a test that
# checks a promise must fail when its guard is gone.
#
#   scripts/mutants.sh [MUTANT...]        (default: every mutant below)
#   MUTANT_PACKAGES="persistence graph" scripts/mutants.sh oversell
#
# Each mutant is a file and a sed expression; the file is restored from a
# copy afterwards (also on Ctrl-C). Prints, per mutant, the listed tests
# that failed and those that passed, and writes the same as TSV to
# artifacts/mutants.tsv. The process tests (e2e) and the fault suite take
# minutes per mutant; name them in MUTANT_PACKAGES to include them.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | file | sed expression (must change the file)
mutants=(
  "requestid|persistence/scripts/grab.lua|s/^  local prev = redis.call('HGET', KEYS\[5\], req)$/  local prev = false/"
  "oversell|persistence/scripts/grab.lua|s/^  elseif stock <= 0 then$/  elseif false then/"
  "limit|persistence/scripts/grab.lua|s/^  elseif tonumber(redis.call('HGET', KEYS\[3\], user) or '0') >= limit then$/  elseif false then/"
  "lost|actors/writer/actor.go|s/^\t\t\t\treturn a.pause(ctx, \"handle\", err)$/\t\t\t\t_ = err/"
  "money|persistence/scripts/grab_red_packet.lua|s/^  local prev = redis.call('HGET', KEYS\[3\], user)$/  local prev = false/"
)
packages=${MUTANT_PACKAGES:-actors actors/writer persistence graph internal/orders internal/redpackets}

want=("$@")
eval "$(scripts/test-services.sh)"
unset FLASHSALE_SERVICE_BIN   # process tests must build the broken code
mkdir -p artifacts
out=artifacts/mutants.tsv
printf 'mutant\tpackage\ttest\tresult\n' > "$out"
backup=$(mktemp)
restore_to=
trap '[ -z "$restore_to" ] || cp "$backup" "$restore_to"; rm -f "$backup"' EXIT

for m in "${mutants[@]}"; do
  IFS='|' read -r name file expr <<< "$m"
  if [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
  cp "$file" "$backup"
  restore_to=$file
  sed -i "$expr" "$file"
  if cmp -s "$file" "$backup"; then
    echo "mutants: $name changed nothing in $file: its expression no longer matches the code" >&2
    exit 1
  fi
  echo "== mutant $name ($file)"
  for pkg in $packages; do
    names=$(awk -F'\t' -v p="$pkg" '!/^#/ && $1 == p { printf "%s%s", sep, $2; sep = "|" }' docs/invariant-tests.tsv)
    [ -n "$names" ] || continue
    json=$(mktemp)
    go test -race -count=1 -timeout 15m -json -run "^($names)\$" "./$pkg" > "$json" 2>&1 || true
    for t in ${names//|/ }; do
      r=$(grep -F "\"Test\":\"$t\"," "$json" | grep -oE '"Action":"(pass|fail|skip)"' | tail -n 1 | cut -d'"' -f4 || true)
      printf '%s\t%s\t%s\t%s\n' "$name" "$pkg" "$t" "${r:-not run}" >> "$out"
      printf '  %-5s %s %s\n' "${r:-none}" "$pkg" "$t"
    done
    rm -f "$json"
  done
  cp "$backup" "$file"
  restore_to=
done
echo "mutants: results in $out (fail = the test noticed the broken guard)"
