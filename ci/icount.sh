#!/usr/bin/env bash
# Instruction counts of GlobalSlub's paths under callgrind: exact and
# repeatable, so this guard cannot be fooled by a noisy machine (the timed
# tables live in mm-bench, never in tests). For each config, size and shape
# it runs benches/examples/pair_count twice (N1 and N2 operations) and
# takes (total2 - total1) / (N2 - N1): the cost of one operation without
# start-up. It fails when a count exceeds its budget in
# ci/icount-budget.txt ("config size shape max-instructions", one per line).
#
#   bash ci/icount.sh            # check against the budgets
#   ICOUNT_PRINT=1 bash ci/icount.sh   # print the counts only
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "callgrind instruction counts per GlobalSlub and mm-malloc operation"

if ! command -v valgrind >/dev/null 2>&1; then
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        as_root=(sudo)
    fi
    step "${as_root[@]}" apt-get update -qq
    step "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind
fi
step valgrind --version

# Without mm-bench's default slub-stats feature: the build users get.
step cargo build --release -p mm-bench --no-default-features --example pair_count
BIN="${CARGO_TARGET_DIR:-target}/release/examples/pair_count"
N1=50000
N2=150000

# count CONFIG SIZE SHAPE: instructions per operation (pair = alloc+free;
# batch64 = per object of 64 allocs then 64 frees).
# mm-malloc's malloc + free (config "malloc" in the budgets): a C
# program under LD_PRELOAD, the library told to count its restartable
# paths as CPU 0 (crates/malloc/scripts/pair_count.c).
step cargo build --profile malloc -p mm-malloc
SO="$(realpath "${CARGO_TARGET_DIR:-target}/malloc/libmm_malloc.so")"
CBIN="$(mktemp -d)/pair_count"
step cc -O2 -o "$CBIN" crates/malloc/scripts/pair_count.c -ldl

# total CONFIG SIZE SHAPE N: callgrind's instruction total of one run.
total() {
    if [[ $1 == malloc ]]; then
        LD_PRELOAD="$SO" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$CBIN" "$3" "$2" "$4" 2>&1
    else
        valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" "$1" "$2" "$3" "$4" 2>&1
    fi | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

count() {
    local t1 t2 n1=$N1 n2=$N2
    if [[ $3 == cycle || $3 == batch* ]]; then
        # whole rounds of up to 16384 objects (4 and 10 of 16384)
        n1=65536 n2=163840
    fi
    t1=$(total "$1" "$2" "$3" $n1)
    t2=$(total "$1" "$2" "$3" $n2)
    echo $(((t2 - t1 + (n2 - n1) / 2) / (n2 - n1)))
}

BUDGET=ci/icount-budget.txt
fail=0
printf '%-20s %6s %-8s %8s %8s\n' config size shape count budget
while read -r cfg size shape max; do
    [[ -z $cfg || $cfg == \#* ]] && continue
    n=$(count "$cfg" "$size" "$shape")
    if [[ ! $max =~ ^[0-9]+$ ]]; then
        # A peer's name: the peer's count of the same size and shape,
        # measured now through the same loops, is the budget.
        max=$(count "$max" "$size" "$shape")
    fi
    verdict=ok
    if [[ -z ${ICOUNT_PRINT:-} && $n -gt $max ]]; then
        verdict="OVER BUDGET"
        fail=1
    fi
    printf '%-20s %6s %-8s %8s %8s  %s\n' "$cfg" "$size" "$shape" "$n" "$max" "$verdict"
done <"$BUDGET"
if [[ $fail -ne 0 ]]; then
    echo "FAIL: an instruction count exceeds its budget in $BUDGET (a fast-path regression)"
    exit 1
fi
ci_pass
