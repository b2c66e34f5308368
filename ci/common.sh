# shellcheck shell=bash
# Sourced by every ci/*.sh (not a check itself): strict mode, the repository
# root as working directory, a header, timed steps and the PASS line.
#
# A script's own target directory derives from CARGO_TARGET_DIR (default
# `target`): loom builds in `$TARGET_BASE/loom`, miri in `$TARGET_BASE/miri`,
# so their RUSTFLAGS/sysroot never invalidate the main build.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CI_NAME="ci/$(basename "$0")"
# shellcheck disable=SC2034 # used by the sourcing scripts
TARGET_BASE="${CARGO_TARGET_DIR:-target}"
# The library crates of the family, bottom layer first; scripts skip the
# ones that do not exist (yet).
LIB_CRATES=(local-lock buddy pcp slub percpu-bitmap)

# ci_header DESCRIPTION: prints the script's header.
ci_header() {
    echo "=== ${CI_NAME}: $* ==="
}

# step CMD...: prints the command, runs it, prints its duration.
step() {
    local t0=$SECONDS
    echo "+ $*"
    "$@"
    echo "  ($((SECONDS - t0)) s: $*)"
}

# ci_pass: the script's closing line.
ci_pass() {
    echo "PASS ${CI_NAME} (${SECONDS} s)"
}

# existing_crates: the LIB_CRATES that exist as crates/NAME/Cargo.toml.
existing_crates() {
    local c
    for c in "${LIB_CRATES[@]}"; do
        if [[ -f "crates/$c/Cargo.toml" ]]; then
            echo "$c"
        fi
    done
}
