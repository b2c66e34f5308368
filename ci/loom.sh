#!/usr/bin/env bash
# Loom models: every crate with tests/loom.rs, preemption bound 2, in its
# own target directory (RUSTFLAGS="--cfg loom" would otherwise rebuild the
# main target dir from scratch each time).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2})"

export RUSTFLAGS="--cfg loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="$TARGET_BASE/loom"

ran=0
summary=()
for manifest in crates/*/Cargo.toml; do
    dir=$(dirname "$manifest")
    [[ -f "$dir/tests/loom.rs" ]] || continue
    pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p;T;q' "$manifest")
    t0=$SECONDS
    step cargo test --release -p "$pkg" --test loom
    summary+=("$pkg $((SECONDS - t0)) s")
    ran=$((ran + 1))
done
if [[ $ran -eq 0 ]]; then
    echo "no crate has tests/loom.rs yet: nothing to model-check"
else
    printf 'loom time per crate:'; printf ' %s;' "${summary[@]}"; echo
fi

ci_pass
