#!/usr/bin/env bash
# Installs what the other scripts need on a fresh machine (idempotent):
# the bare-metal targets and lint components of the pinned toolchain, and
# miri + rust-src on nightly.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ci_header "toolchain targets and components"

step rustup target add x86_64-unknown-none riscv64gc-unknown-none-elf --toolchain 1.95.0
step rustup component add rustfmt clippy --toolchain 1.95.0
step rustup component add miri rust-src --toolchain nightly
step rustc +1.95.0 -V
step rustc +nightly -V
# What the machine offers, for reading a failure later.
echo "cpus: $(nproc) usable of $(getconf _NPROCESSORS_CONF) configured; ulimit -v $(ulimit -v); $(free -g | awk '/Mem:/ {print $2 " GiB RAM, " $7 " GiB available"}')"
df -h . | tail -n 1

ci_pass
