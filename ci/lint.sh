#!/usr/bin/env bash
# Formatting and clippy over the whole workspace, every target, warnings
# denied (the workspace lints: missing_docs, unsafe_op_in_unsafe_fn,
# undocumented_unsafe_blocks, ...).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "cargo fmt --check, cargo clippy -D warnings"

step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings

ci_pass
