//! The machine: boot code and trap entry (`global_asm!`), CSR access, the
//! CLINT timer, the 16550 UART and the test device that powers QEMU off.
//!
//! QEMU `virt` with `-bios none` starts every hart at 0x8000_0000 in
//! M-mode with `a0` = hart id and `a1` = the device tree's address. Boot:
//!
//! 1. every hart: interrupts masked (`mie = 0`), `tp` = hart id (the
//!    compiler never allocates `tp` on this target, so it stays the hart id
//!    for the kernel's life: `smp_processor_id` is one `mv`), its own
//!    64 KiB stack, `mstatus.FS` = Initial (the target enables F/D, so
//!    compiled code may touch FP registers), `mtvec` = [`trap_entry`];
//!    harts with an id >= [`MAX_HARTS`] park in `wfi`;
//! 2. hart 0 clears `.bss` and enters `boot_main(0, fdt)`; the others
//!    sleep in `wfi` (only the software interrupt enabled in `mie`, global
//!    MIE off: `wfi` wakes on it without trapping) until hart 0 sets
//!    [`BOOT_GO`] and sends each an IPI ([`wake_harts`]); they clear their
//!    `msip` and enter `secondary_main(hart)`. (Sleeping rather than
//!    spinning leaves the host CPUs to hart 0 while it sets up memory.)
//!
//! Traps run on the interrupted stack (M-mode only, no user mode): the
//! entry saves the caller-saved integer and FP registers, calls
//! `trap_handler` and returns with `mret`. The hardware clears
//! `mstatus.MIE` on entry and restores it from `MPIE` on `mret`, so
//! handlers never nest.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

/// Harts this kernel runs on (ids `0..MAX_HARTS`; others park).
pub const MAX_HARTS: usize = 8;

/// Set by hart 0 when the allocators are ready; secondaries wait for it.
#[no_mangle]
pub static BOOT_GO: AtomicU32 = AtomicU32::new(0);

global_asm!(
    r#"
    .section .text.init, "ax"
    .globl _start
_start:
    .option push
    .option norelax
    csrw mie, zero
    csrr t0, mhartid
    mv tp, t0
    li t1, {max_harts}
    bgeu t0, t1, 9f
    la sp, __stacks_end
    slli t1, t0, 16
    sub sp, sp, t1
    li t1, 0x2000
    csrs mstatus, t1
    csrw fcsr, zero
    la t1, trap_entry
    csrw mtvec, t1
    bnez t0, 2f
    la t1, __bss_start
    la t2, __bss_end
1:
    bgeu t1, t2, 3f
    sd zero, 0(t1)
    addi t1, t1, 8
    j 1b
3:
    mv a0, t0
    call boot_main
    j 9f
2:
    li t1, 8
    csrw mie, t1
    la t1, BOOT_GO
4:
    wfi
    lw t2, 0(t1)
    beqz t2, 4b
    fence r, rw
    csrw mie, zero
    mv a0, t0
    call secondary_main
9:
    wfi
    j 9b
    .option pop

    .section .text
    .balign 4
    .globl trap_entry
trap_entry:
    addi sp, sp, -288
    sd ra, 0(sp)
    sd t0, 8(sp)
    sd t1, 16(sp)
    sd t2, 24(sp)
    sd t3, 32(sp)
    sd t4, 40(sp)
    sd t5, 48(sp)
    sd t6, 56(sp)
    sd a0, 64(sp)
    sd a1, 72(sp)
    sd a2, 80(sp)
    sd a3, 88(sp)
    sd a4, 96(sp)
    sd a5, 104(sp)
    sd a6, 112(sp)
    sd a7, 120(sp)
    fsd ft0, 128(sp)
    fsd ft1, 136(sp)
    fsd ft2, 144(sp)
    fsd ft3, 152(sp)
    fsd ft4, 160(sp)
    fsd ft5, 168(sp)
    fsd ft6, 176(sp)
    fsd ft7, 184(sp)
    fsd ft8, 192(sp)
    fsd ft9, 200(sp)
    fsd ft10, 208(sp)
    fsd ft11, 216(sp)
    fsd fa0, 224(sp)
    fsd fa1, 232(sp)
    fsd fa2, 240(sp)
    fsd fa3, 248(sp)
    fsd fa4, 256(sp)
    fsd fa5, 264(sp)
    fsd fa6, 272(sp)
    fsd fa7, 280(sp)
    call trap_handler
    ld ra, 0(sp)
    ld t0, 8(sp)
    ld t1, 16(sp)
    ld t2, 24(sp)
    ld t3, 32(sp)
    ld t4, 40(sp)
    ld t5, 48(sp)
    ld t6, 56(sp)
    ld a0, 64(sp)
    ld a1, 72(sp)
    ld a2, 80(sp)
    ld a3, 88(sp)
    ld a4, 96(sp)
    ld a5, 104(sp)
    ld a6, 112(sp)
    ld a7, 120(sp)
    fld ft0, 128(sp)
    fld ft1, 136(sp)
    fld ft2, 144(sp)
    fld ft3, 152(sp)
    fld ft4, 160(sp)
    fld ft5, 168(sp)
    fld ft6, 176(sp)
    fld ft7, 184(sp)
    fld ft8, 192(sp)
    fld ft9, 200(sp)
    fld ft10, 208(sp)
    fld ft11, 216(sp)
    fld fa0, 224(sp)
    fld fa1, 232(sp)
    fld fa2, 240(sp)
    fld fa3, 248(sp)
    fld fa4, 256(sp)
    fld fa5, 264(sp)
    fld fa6, 272(sp)
    fld fa7, 280(sp)
    addi sp, sp, 288
    mret
"#,
    max_harts = const MAX_HARTS,
);

extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// `[start, end)` of the kernel image (code, data, bss, stacks).
pub fn kernel_image() -> (usize, usize) {
    // Linker symbols: only their addresses are taken.
    (
        core::ptr::addr_of!(__kernel_start) as usize,
        core::ptr::addr_of!(__kernel_end) as usize,
    )
}

// ------------------------------------------------------------------- CSRs

/// `mstatus.MIE`: machine-mode interrupts enabled.
pub const MSTATUS_MIE: usize = 1 << 3;
/// `mie.MTIE`: machine timer interrupt enabled.
const MIE_MTIE: usize = 1 << 7;
/// `mcause` of a machine timer interrupt.
pub const MCAUSE_MTIMER: usize = (1 << 63) | 7;

/// The hart id, kept in `tp` since boot.
#[inline(always)]
pub fn hart_id() -> usize {
    let h: usize;
    // SAFETY: reads a register the compiler never allocates on this target.
    unsafe { asm!("mv {0}, tp", out(reg) h, options(nomem, nostack, preserves_flags)) };
    h
}

/// Reads `mstatus`.
#[inline(always)]
pub fn mstatus() -> usize {
    let v: usize;
    // SAFETY: reading a CSR has no side effect. Not `nomem`: ordered with
    // the memory accesses around it, like the kernel's `arch_local_save_flags`.
    unsafe { asm!("csrr {0}, mstatus", out(reg) v, options(nostack)) };
    v
}

/// Clears `mstatus.MIE` and returns the previous `mstatus` (`csrrci`: one
/// instruction, atomic with respect to interrupts). A compiler barrier.
#[inline(always)]
pub fn irq_save() -> usize {
    let v: usize;
    // SAFETY: masking this hart's interrupts is always allowed in M-mode.
    unsafe { asm!("csrrci {0}, mstatus, 8", out(reg) v, options(nostack)) };
    v
}

/// Sets `mstatus.MIE` (a compiler barrier).
///
/// # Safety
///
/// The caller's context had interrupts enabled before it masked them.
#[inline(always)]
pub unsafe fn irq_enable() {
    // SAFETY: caller's contract.
    unsafe { asm!("csrsi mstatus, 8", options(nostack)) };
}

/// Clears `mstatus.MIE` (a compiler barrier).
#[inline(always)]
pub fn irq_disable() {
    // SAFETY: masking interrupts is always allowed in M-mode.
    unsafe { asm!("csrci mstatus, 8", options(nostack)) };
}

/// `(mcause, mepc, mtval)` of the current trap.
pub fn trap_cause() -> (usize, usize, usize) {
    let (c, e, t): (usize, usize, usize);
    // SAFETY: reading CSRs has no side effect.
    unsafe {
        asm!("csrr {0}, mcause", "csrr {1}, mepc", "csrr {2}, mtval",
             out(reg) c, out(reg) e, out(reg) t, options(nomem, nostack))
    };
    (c, e, t)
}

/// Waits for an interrupt (or nothing: `wfi` may return at any time).
#[inline(always)]
pub fn wfi() {
    // SAFETY: a hint.
    unsafe { asm!("wfi", options(nomem, nostack)) };
}

// ------------------------------------------------------------------ CLINT

/// The CLINT of a single-socket `virt` machine (one per socket otherwise:
/// QEMU puts each NUMA node's harts on a socket of its own, with its own
/// CLINT at `0x0200_0000 + socket * 0x1_0000`, and the device tree says
/// which; see [`set_clint`]).
const CLINT_BASE: usize = 0x0200_0000;
const CLINT_MTIMECMP: usize = 0x4000;
const CLINT_MTIME: usize = 0xBFF8;

/// Each hart's CLINT (`base`, index of the hart within it), from the device
/// tree; hart `h` of a single CLINT until [`set_clint`].
static CLINT: [(AtomicUsize, AtomicUsize); MAX_HARTS] = {
    let mut t = [const { (AtomicUsize::new(CLINT_BASE), AtomicUsize::new(0)) }; MAX_HARTS];
    let mut h = 0;
    while h < MAX_HARTS {
        t[h].1 = AtomicUsize::new(h);
        h += 1;
    }
    t
};

/// Records hart `hart`'s CLINT (hart 0 at boot, before [`wake_harts`]).
pub fn set_clint(hart: usize, base: usize, index: usize) {
    if let Some((b, i)) = CLINT.get(hart) {
        b.store(base, Relaxed);
        i.store(index, Relaxed);
    }
}

/// Hart `hart`'s register at `off + 4 * index` (msip) or `off + 8 * index`
/// (mtimecmp) of its CLINT, by `scale`.
fn clint_reg(hart: usize, off: usize, scale: usize) -> usize {
    let (b, i) = &CLINT[hart];
    b.load(Relaxed) + off + scale * i.load(Relaxed)
}

/// Releases harts `1..harts` from boot: sets [`BOOT_GO`], then raises each
/// one's software interrupt (`msip`) to end its `wfi`.
pub fn wake_harts(harts: usize) {
    BOOT_GO.store(1, core::sync::atomic::Ordering::Release);
    for h in 1..harts {
        // SAFETY: hart h's msip register.
        unsafe { core::ptr::write_volatile(clint_reg(h, 0, 4) as *mut u32, 1) };
    }
}

/// Clears this hart's software interrupt (`msip`), raised by [`wake_harts`].
pub fn clear_msip() {
    // SAFETY: this hart's msip register.
    unsafe { core::ptr::write_volatile(clint_reg(hart_id(), 0, 4) as *mut u32, 0) };
}

/// `mtime` ticks per second on QEMU `virt` (10 MHz).
pub const MTIME_HZ: u64 = 10_000_000;

/// The machine timer (`mtime`) of this hart's CLINT (every CLINT of
/// `virt` counts the same virtual clock).
#[inline(always)]
pub fn mtime() -> u64 {
    let (b, _) = &CLINT[hart_id()];
    // SAFETY: the CLINT's mtime register, a 64-bit MMIO read.
    unsafe { core::ptr::read_volatile((b.load(Relaxed) + CLINT_MTIME) as *const u64) }
}

/// Programs this hart's next timer interrupt at `mtime() + ticks`.
#[inline]
pub fn timer_arm(ticks: u64) {
    let cmp = clint_reg(hart_id(), CLINT_MTIMECMP, 8) as *mut u64;
    // SAFETY: this hart's mtimecmp register.
    unsafe { core::ptr::write_volatile(cmp, mtime() + ticks) };
}

/// Enables this hart's timer interrupt (the first one after `ticks`).
pub fn timer_start(ticks: u64) {
    timer_arm(ticks);
    // SAFETY: setting mie.MTIE only selects which interrupts may trap.
    unsafe { asm!("csrs mie, {0}", in(reg) MIE_MTIE, options(nostack)) };
}

/// Disables this hart's timer interrupt.
pub fn timer_stop() {
    // SAFETY: clearing mie.MTIE; a pending timer interrupt is then ignored.
    unsafe { asm!("csrc mie, {0}", in(reg) MIE_MTIE, options(nostack)) };
    let cmp = clint_reg(hart_id(), CLINT_MTIMECMP, 8) as *mut u64;
    // SAFETY: this hart's mtimecmp register.
    unsafe { core::ptr::write_volatile(cmp, u64::MAX) };
}

// ------------------------------------------------------------------- UART

const UART: usize = 0x1000_0000;

/// Writes one byte to the 16550 UART (waits for THR empty).
pub fn uart_putc(b: u8) {
    let thr = UART as *mut u8;
    let lsr = (UART + 5) as *const u8;
    // SAFETY: the UART's registers.
    unsafe {
        while core::ptr::read_volatile(lsr) & 0x20 == 0 {}
        core::ptr::write_volatile(thr, b);
    }
}

// ------------------------------------------------------------ test device

const TEST_DEVICE: usize = 0x10_0000;

/// Powers QEMU off with exit status 0.
pub fn poweroff_pass() -> ! {
    // SAFETY: QEMU's sifive_test device.
    unsafe { core::ptr::write_volatile(TEST_DEVICE as *mut u32, 0x5555) };
    loop {
        wfi();
    }
}

/// Powers QEMU off with exit status `code` (non-zero).
pub fn poweroff_fail(code: u16) -> ! {
    let v = ((code.max(1) as u32) << 16) | 0x3333;
    // SAFETY: QEMU's sifive_test device.
    unsafe { core::ptr::write_volatile(TEST_DEVICE as *mut u32, v) };
    loop {
        wfi();
    }
}
