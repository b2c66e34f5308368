#!/usr/bin/env bash
# cargo-fuzz: every target in fuzz/fuzz_targets/ for a bounded time
# (FUZZ_SECONDS, default 30, per target), printing libFuzzer's executions.
set -euo pipefail
source "$(dirname "$0")/common.sh"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
ci_header "cargo +nightly fuzz, ${FUZZ_SECONDS} s per target"

if [[ ! -f fuzz/Cargo.toml ]]; then
    echo "no fuzz/Cargo.toml yet: nothing to fuzz"
    ci_pass
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    step cargo install cargo-fuzz --locked
fi
step cargo fuzz --version

shopt -s nullglob
targets=()
for f in fuzz/fuzz_targets/*.rs; do
    targets+=("$(basename "$f" .rs)")
done
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz/ has no targets in fuzz/fuzz_targets/: nothing to fuzz"
    ci_pass
    exit 0
fi

# The fuzz crate is its own workspace with its own target dir (fuzz/target).
unset CARGO_TARGET_DIR
cd fuzz
log_dir=$(mktemp -d)
step cargo +nightly fuzz build
summary=()
for t in "${targets[@]}"; do
    log="$log_dir/$t.log"
    t0=$SECONDS
    echo "+ cargo +nightly fuzz run $t -- -max_total_time=$FUZZ_SECONDS -print_final_stats=1"
    if ! cargo +nightly fuzz run "$t" -- -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "FAIL: fuzz target $t (log above; the crashing input is under fuzz/artifacts/$t/)"
        exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    summary+=("$t: ${execs:-?} executions in $((SECONDS - t0)) s")
    echo "  $t: ${execs:-?} executions"
done
printf 'fuzz: %s\n' "${summary[@]}"
rm -rf "$log_dir"

ci_pass
