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
ci_header "bare-metal kernel in QEMU riscv64 virt (-smp 1, 4, 8, and 4 on two NUMA nodes; ${KERNEL_TIMEOUT} s timeout each)"

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
# Two NUMA nodes (issue #20): harts 0-1 and 256 MiB on node 0, harts 2-3
# and 256 MiB on node 1, distance 20; QEMU puts each node on a socket of
# its own (its own CLINT), and the device tree carries numa-node-id and a
# distance-map. The boot must report "NUMA nodes: 2".
numa=(-m 512M
    -object memory-backend-ram,id=m0,size=256M -object memory-backend-ram,id=m1,size=256M
    -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1
    -numa dist,src=0,dst=1,val=20)
for smp in 1 4 8 numa2; do
    log="$log_dir/smp$smp.log"
    if [[ $smp == numa2 ]]; then
        cmd=(qemu-system-riscv64 -machine virt -bios none -nographic -smp 4 "${numa[@]}" -kernel "$kernel")
    else
        cmd=(qemu-system-riscv64 -machine virt -bios none -nographic -smp "$smp" -m 256M -kernel "$kernel")
    fi
    echo "+ timeout $KERNEL_TIMEOUT ${cmd[*]}"
    t0=$SECONDS
    rc=0
    timeout "$KERNEL_TIMEOUT" "${cmd[@]}" </dev/null 2>&1 | tr -d '\r' >"$log" || rc=${PIPESTATUS[0]}
    secs=$((SECONDS - t0))
    if [[ $smp == 4 ]]; then
        cat "$log"
    elif [[ $smp == numa2 ]]; then
        grep -E '^(NUMA nodes|  node [0-9]|    \[|  distances|  numa test|Node [0-9]+, zone|hart [0-9]+:|interrupt-context|checks passed|KERNEL)' "$log" || true
    else
        grep -E '^(hart [0-9]+:|interrupt-context|checks passed|KERNEL)' "$log" || true
    fi
    # The two-node boot's self-test must have checked node 1's node-local and
    # fallback allocations (the buddy's nodes, issue #20).
    if [[ $smp == numa2 ]] && ! grep -q '^  numa test: node 1: node-local page from node 1' "$log"; then
        tail -n 60 "$log"
        echo "FAIL: kernel -smp $smp: no node-1 line of the NUMA self-test (output above)"
        exit 1
    fi
    if [[ $smp == numa2 ]] && ! grep -q '^NUMA nodes: 2$' "$log"; then
        tail -n 60 "$log"
        echo "FAIL: kernel -smp $smp: no 'NUMA nodes: 2' line (output above)"
        exit 1
    fi
    if [[ $rc -ne 0 ]] || ! grep -q '^KERNEL PASS$' "$log"; then
        [[ $smp == 4 ]] || tail -n 60 "$log"
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
