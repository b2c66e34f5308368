#!/usr/bin/env bash
# miri on nightly over the unsafe code: all of local-lock's tests, the unit
# tests (--lib) of every other library crate that exists.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "cargo +nightly miri test"

export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
export CARGO_TARGET_DIR="$TARGET_BASE/miri"

# Builds miri's sysroot once (idempotent), so the timings below are tests.
step cargo +nightly miri setup
summary=()
for c in $(existing_crates); do
    t0=$SECONDS
    if [[ $c == local-lock ]]; then
        step cargo +nightly miri test -p "$c"
    else
        step cargo +nightly miri test -p "$c" --lib
    fi
    summary+=("$c $((SECONDS - t0)) s")
done
# The Rust-native API's tests that run on the test buddy (issue #19).
step cargo +nightly miri test -p slub --features allocator-api2 --test api
printf 'miri time per crate:'; printf ' %s;' "${summary[@]}"; echo

ci_pass
