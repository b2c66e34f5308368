#!/usr/bin/env bash
# Every library crate builds without std (no default features) for a
# bare-metal x86-64 and a riscv64 target.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "no_std builds (--no-default-features) for x86_64-unknown-none and riscv64gc-unknown-none-elf"

TARGETS=(x86_64-unknown-none riscv64gc-unknown-none-elf)
mapfile -t crates < <(existing_crates)
echo "crates: ${crates[*]}"
for target in "${TARGETS[@]}"; do
    for c in "${crates[@]}"; do
        step cargo build -p "$c" --no-default-features --target "$target"
    done
    # The `Allocator` impls (issue #19) are no_std too.
    for c in buddy pcp percpu-bitmap slub; do
        step cargo build -p "$c" --no-default-features --features allocator-api2 --target "$target"
    done
done

ci_pass
