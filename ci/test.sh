#!/usr/bin/env bash
# The README's test command: every unit, integration and doc test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "cargo test --workspace"

step cargo test --workspace
# The `Allocator` impls behind slub's feature `allocator-api2`: their tests
# and examples (the typed caches' run in the workspace pass above too).
step cargo test -p slub --features allocator-api2 --test api
step cargo test -p slub --features stats --test rseq
# The nightly `core::alloc::Allocator` impls (slub feature `nightly`).
step cargo +nightly test -p slub --features nightly --test nightly
for c in buddy pcp percpu-bitmap slub; do
    step cargo test -p "$c" --features allocator-api2 --doc
done

ci_pass
