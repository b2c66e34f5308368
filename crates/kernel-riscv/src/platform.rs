//! The kernel's [`KernelHooks`]: what the allocator family needs to know
//! about CPUs, interrupts and preemption, from this kernel's real
//! primitives. [`Kp`] (`Kernel<Hooks>`) is the platform every allocator
//! here is built on, with the pinned strategy (not `PREEMPT_RT`).
//!
//! | hook | implementation |
//! |---|---|
//! | `smp_processor_id` | `tp`, set to `mhartid` at boot and never changed (one `mv`) |
//! | `local_irq_save` / `restore` | `csrrci mstatus, MIE` / `csrsi` if it was set |
//! | `irqs_disabled` | `mstatus.MIE == 0` |
//! | `in_interrupt` | this hart's [`HartState::in_irq`], set by `trap_handler` around the handler |
//! | `preempt_disable` / `enable` | this hart's [`HartState::preempt_count`] += 1 / -= 1 |
//! | `cpu_to_node` / `node_distance` | the device tree's `numa-node-id` and `/distance-map`, recorded at boot ([`set_topology`]) |
//! | `warn_alloc` | counts failed requests without `NOWARN` ([`ALLOC_WARNINGS`], in the end-of-run report) |
//!
//! **Preemption.** This kernel has no scheduler: each hart runs exactly one
//! task from boot to power-off, and the only thing that can run between
//! two of its instructions is that hart's own interrupt handler (which
//! runs to completion). A task therefore never migrates and is never
//! preempted by another task, so "pinned" needs no more than the count;
//! the count is kept anyway, per hart, so that imbalances are caught (the
//! trap handler checks it is unchanged across every handler, and the end
//! of the run checks it is zero on every hart), and so that a scheduler
//! added later has the hook it needs (`schedule()` only when the count is
//! zero and not in interrupt).

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};

use local_lock::kernel::{Kernel, KernelHooks};
use local_lock::sync::CachePadded;
use local_lock::topology::{Topology, LOCAL_DISTANCE, REMOTE_DISTANCE};
use local_lock::IrqFlags;

/// Page allocation failures reported through `warn_alloc` (requests
/// without `NOWARN` that failed after the slow path), all harts.
pub static ALLOC_WARNINGS: AtomicUsize = AtomicUsize::new(0);

use crate::arch::{self, MAX_HARTS, MSTATUS_MIE};

/// The platform of every allocator in this kernel.
pub type Kp = Kernel<Hooks>;

/// The kernel's primitives (see the module docs).
pub struct Hooks;

/// Per-hart state the hooks read. Written only by its own hart (task and
/// interrupt handler), read by anyone for reports.
pub struct HartState {
    /// In the timer interrupt handler (`in_interrupt()`).
    pub in_irq: AtomicBool,
    /// `preempt_count` (task and handler: a handler's pins are balanced
    /// before it returns, so the task's load/store never loses one).
    pub preempt_count: AtomicUsize,
}

/// One [`HartState`] per hart, each on its own cache line.
pub static HARTS: [CachePadded<HartState>; MAX_HARTS] = [const {
    CachePadded::new(HartState {
        in_irq: AtomicBool::new(false),
        preempt_count: AtomicUsize::new(0),
    })
}; MAX_HARTS];

/// This hart's state.
#[inline(always)]
pub fn this_hart() -> &'static HartState {
    &HARTS[arch::hart_id()]
}

// SAFETY: truthful primitives: the hart id comes from `tp`, fixed at boot
// and below MAX_HARTS (other harts park before running any Rust code);
// with no scheduler a task never leaves its hart, so the id is stable at
// all times, in particular while pinned; `local_irq_save` clears
// mstatus.MIE, which masks every interrupt this kernel enables (the
// machine timer) until the matching restore; `in_interrupt` is set by the
// trap handler exactly while a handler runs; handlers run to completion
// with MIE clear (no nesting) before the interrupted code continues.
unsafe impl KernelHooks for Hooks {
    const NR_CPUS: usize = MAX_HARTS;

    #[inline(always)]
    fn smp_processor_id() -> usize {
        arch::hart_id()
    }
    #[inline(always)]
    fn in_interrupt() -> bool {
        this_hart().in_irq.load(Relaxed)
    }
    #[inline(always)]
    fn irqs_disabled() -> bool {
        arch::mstatus() & MSTATUS_MIE == 0
    }
    #[inline(always)]
    fn local_irq_save() -> IrqFlags {
        IrqFlags(arch::irq_save() & MSTATUS_MIE)
    }
    #[inline(always)]
    unsafe fn local_irq_restore(flags: IrqFlags) {
        if flags.0 & MSTATUS_MIE != 0 {
            // SAFETY: interrupts were enabled when the matching save ran.
            unsafe { arch::irq_enable() }
        }
    }
    #[inline(always)]
    fn local_irq_disable() {
        arch::irq_disable()
    }
    #[inline(always)]
    unsafe fn local_irq_enable() {
        // SAFETY: forwarded contract.
        unsafe { arch::irq_enable() }
    }
    #[inline(always)]
    fn preempt_disable() {
        let c = &this_hart().preempt_count;
        c.store(c.load(Relaxed) + 1, Relaxed);
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }
    #[inline(always)]
    unsafe fn preempt_enable() {
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        let c = &this_hart().preempt_count;
        let v = c.load(Relaxed);
        debug_assert!(v > 0, "preempt_enable without preempt_disable");
        c.store(v.wrapping_sub(1), Relaxed);
    }
    fn nr_online_cpus() -> usize {
        // The harts taking part (from the device tree), set before any
        // allocator is sized: pcp's `high_max` divides by them.
        crate::N_HARTS.load(Relaxed)
    }
    const NR_NODES: usize = MAX_NODES;
    fn cpu_to_node(cpu: usize) -> usize {
        CPU_NODE.get(cpu).map_or(0, |n| n.load(Relaxed) as usize)
    }
    fn node_distance(a: usize, b: usize) -> u8 {
        if a < MAX_NODES && b < MAX_NODES {
            DISTANCE[a][b].load(Relaxed)
        } else {
            REMOTE_DISTANCE
        }
    }
    fn warn_alloc(order: u8, gfp: u32) {
        // `warn_alloc` (requests that may fail quietly pass NOWARN): counted,
        // not printed here, since it may run in an interrupt handler or
        // while this hart prints; the end-of-run report shows the count.
        let _ = (order, gfp);
        ALLOC_WARNINGS.fetch_add(1, Relaxed);
    }
}

/// Nodes this kernel describes (`MAX_NUMNODES`; the device tree's may be
/// fewer: the others have no CPUs and no memory).
pub const MAX_NODES: usize = 4;

/// Each hart's node (`numa-node-id` of its cpu node), set once at boot.
static CPU_NODE: [AtomicU8; MAX_HARTS] = [const { AtomicU8::new(0) }; MAX_HARTS];

/// The node distance table (`/distance-map`), set once at boot.
static DISTANCE: [[AtomicU8; MAX_NODES]; MAX_NODES] = {
    let mut t = [const { [const { AtomicU8::new(REMOTE_DISTANCE) }; MAX_NODES] }; MAX_NODES];
    let mut i = 0;
    while i < MAX_NODES {
        t[i][i] = AtomicU8::new(LOCAL_DISTANCE);
        i += 1;
    }
    t
};

/// Records the device tree's topology for the hooks' `cpu_to_node` and
/// `node_distance` (hart 0 at boot, before the other harts start and
/// before any allocator asks).
pub fn set_topology(t: &Topology, harts: usize) {
    for (h, n) in CPU_NODE.iter().enumerate().take(harts) {
        n.store(t.cpu_to_node(h).min(MAX_NODES - 1) as u8, Relaxed);
    }
    for (a, row) in DISTANCE.iter().enumerate() {
        for (b, d) in row.iter().enumerate() {
            d.store(t.node_distance(a, b), Relaxed);
        }
    }
}
