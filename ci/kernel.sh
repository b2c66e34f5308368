#!/usr/bin/env bash
# The bare-metal kernel (crates/kernel-riscv, its own workspace): builds it
# for riscv64gc-unknown-none-elf and boots it in QEMU (riscv64 virt, M-mode,
# no firmware) on 1, 4 and 8 harts, each run under a timeout. A run passes
# when QEMU exits 0 (the kernel powered off through the test device) and
# the output has the `KERNEL PASS` line; the -smp 4 output is printed in
# full (buddyinfo, pcp, slabinfo, percpu statistics).
#
# Environment: KERNEL_TIMEOUT (seconds per run, default 120),
# KERNEL_ROUNDS (self-test rounds per hart, default: the kernel's 800).
set -euo pipefail
source "$(dirname "$0")/common.sh"
KERNEL_TIMEOUT="${KERNEL_TIMEOUT:-120}"
ci_header "bare-metal kernel in QEMU riscv64 virt (-smp 1, 4, 8; ${KERNEL_TIMEOUT} s timeout each)"

if ! command -v qemu-system-riscv64 >/dev/null 2>&1; then
    as_root=()
    if [[ $(id -u) -ne 0 ]]; then
        as_root=(sudo)
    fi
    step "${as_root[@]}" apt-get update -qq
    step "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-misc
fi
step qemu-system-riscv64 --version
# The toolchain of rust-toolchain.toml (RUSTUP_AUTO_INSTALL=0 adds nothing
# by itself).
step rustup target add riscv64gc-unknown-none-elf

# Its own workspace and target directory (crates/kernel-riscv/target,
# ignored by git), never the host build's.
kdir="$PWD/crates/kernel-riscv"
export CARGO_TARGET_DIR="$kdir/target"
kernel="$CARGO_TARGET_DIR/riscv64gc-unknown-none-elf/release/kernel-riscv"
(cd "$kdir" && step cargo build --release)

log_dir=$(mktemp -d)
summary=()
for smp in 1 4 8; do
    log="$log_dir/smp$smp.log"
    cmd=(qemu-system-riscv64 -machine virt -bios none -nographic -smp "$smp" -m 256M -kernel "$kernel")
    echo "+ timeout $KERNEL_TIMEOUT ${cmd[*]}"
    t0=$SECONDS
    rc=0
    timeout "$KERNEL_TIMEOUT" "${cmd[@]}" </dev/null 2>&1 | tr -d '\r' >"$log" || rc=${PIPESTATUS[0]}
    secs=$((SECONDS - t0))
    if [[ $smp -eq 4 ]]; then
        cat "$log"
    else
        grep -E '^(hart [0-9]+:|interrupt-context|checks passed|KERNEL)' "$log" || true
    fi
    if [[ $rc -ne 0 ]] || ! grep -q '^KERNEL PASS$' "$log"; then
        [[ $smp -eq 4 ]] || tail -n 60 "$log"
        if [[ $rc -eq 124 ]]; then
            echo "FAIL: kernel -smp $smp hung: no power-off within ${KERNEL_TIMEOUT} s (output above)"
        elif [[ $rc -ne 0 ]]; then
            echo "FAIL: kernel -smp $smp: QEMU exited $rc (output above)"
        else
            echo "FAIL: kernel -smp $smp: QEMU exited 0 but printed no 'KERNEL PASS' line (output above)"
        fi
        exit 1
    fi
    irq=$(sed -n 's/^interrupt-context allocations served: .* = \([0-9]*\) (in \([0-9]*\) timer.*/\1 in \2 timer interrupts/p' "$log")
    summary+=("-smp $smp: pass in ${secs} s, interrupt-context allocations: ${irq:-?}")
    echo "  (${secs} s: -smp $smp)"
done
printf 'kernel: %s\n' "${summary[@]}"
rm -rf "$log_dir"

ci_pass
