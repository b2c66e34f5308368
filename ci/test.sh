#!/usr/bin/env bash
# The README's test command: every unit, integration and doc test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "cargo test --workspace"

step cargo test --workspace

ci_pass
