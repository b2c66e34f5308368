//! The platform a `no_std` kernel supplies: implement [`KernelHooks`] with
//! the kernel's real primitives and use [`Kernel<H>`] as the platform.
//!
//! ```
//! use local_lock::{kernel::{Kernel, KernelHooks}, IrqFlags, LocalLock, Strategy};
//!
//! struct MyKernel;
//! // SAFETY: a one-CPU kernel without interrupts in this example; a real
//! // kernel reads its CPU id (e.g. from `tp`) and toggles its IRQ-enable bit.
//! unsafe impl KernelHooks for MyKernel {
//!     const NR_CPUS: usize = 1;
//!     fn smp_processor_id() -> usize { 0 }
//!     fn in_interrupt() -> bool { false }
//!     fn irqs_disabled() -> bool { false }
//!     fn local_irq_save() -> IrqFlags { IrqFlags(0) }
//!     unsafe fn local_irq_restore(_: IrqFlags) {}
//!     fn local_irq_disable() {}
//!     unsafe fn local_irq_enable() {}
//!     fn preempt_disable() {}
//!     unsafe fn preempt_enable() {}
//! }
//!
//! static COUNTERS: LocalLock<u64, Kernel<MyKernel>, 1> = LocalLock::new(Kernel::new());
//! *COUNTERS.lock_irqsave() += 1;
//! assert_eq!(COUNTERS.lock().strategy(), Strategy::Pinned);
//! ```

use core::marker::PhantomData;

use crate::platform::{IrqFlags, Pin, Platform, Strategy};

/// The primitives a kernel provides. All are associated functions: the
/// kernel's primitives are global.
///
/// A uniprocessor kernel whose interrupt-enable bit is simulated by a flag
/// (a real one reads and writes its status register):
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
/// use local_lock::kernel::{Kernel, KernelHooks};
/// use local_lock::{IrqFlags, LocalLock};
///
/// static IRQ_ON: AtomicBool = AtomicBool::new(true);
/// struct Uni;
/// // SAFETY: one CPU; the flag stands for its interrupt-enable bit, and no
/// // interrupt is taken in this example.
/// unsafe impl KernelHooks for Uni {
///     const NR_CPUS: usize = 1;
///     fn smp_processor_id() -> usize { 0 }
///     fn in_interrupt() -> bool { false }
///     fn irqs_disabled() -> bool { !IRQ_ON.load(Relaxed) }
///     fn local_irq_save() -> IrqFlags { IrqFlags(IRQ_ON.swap(false, Relaxed) as usize) }
///     unsafe fn local_irq_restore(f: IrqFlags) { IRQ_ON.store(f.0 != 0, Relaxed) }
///     fn local_irq_disable() { IRQ_ON.store(false, Relaxed) }
///     unsafe fn local_irq_enable() { IRQ_ON.store(true, Relaxed) }
///     fn preempt_disable() {}
///     unsafe fn preempt_enable() {}
/// }
///
/// static RQ: LocalLock<u32, Kernel<Uni>, 1> = LocalLock::new(Kernel::new());
/// {
///     let mut g = RQ.lock_irqsave();
///     *g += 1;
///     assert!(Uni::irqs_disabled(), "masked while held");
/// }
/// assert!(!Uni::irqs_disabled(), "restored when the guard drops");
/// ```
///
/// # Safety
///
/// The implementation must be truthful: `smp_processor_id` is the executing
/// CPU and stays so between `preempt_disable` and `preempt_enable` (and with
/// interrupts disabled); CPU ids are below `NR_CPUS`; `local_irq_save`
/// really masks this CPU's interrupts until the matching restore;
/// `in_interrupt` is true exactly in interrupt (and NMI) context; interrupt
/// handlers run to completion before the interrupted code continues. With
/// `PREEMPT_RT = true`, slots are protected by a spin lock and may be reached
/// from other CPUs, so the IRQ primitives may then be no-ops (threaded
/// interrupts), as `local_lock_irqsave` does on RT.
///
/// On a CPU without a lock-free double-word compare-exchange, enable this
/// crate's `assume-privileged` feature (see
/// [`AtomicDWord`](crate::sync::AtomicDWord)).
pub unsafe trait KernelHooks: Sync + 'static {
    /// Highest CPU id + 1 (`nr_cpu_ids`). A `LocalLock` needs at least this
    /// many slots.
    const NR_CPUS: usize;
    /// `CONFIG_PREEMPT_RT`: use the locked strategy.
    const PREEMPT_RT: bool = false;
    /// Whether the kernel takes interrupts (false: IRQ calls are no-ops).
    const HAS_IRQS: bool = true;

    /// The executing CPU.
    fn smp_processor_id() -> usize;
    /// Whether the caller runs in hard/soft interrupt or NMI context.
    fn in_interrupt() -> bool;
    /// Whether this CPU's interrupts are masked.
    fn irqs_disabled() -> bool;
    /// Masks interrupts, returning the previous state.
    fn local_irq_save() -> IrqFlags;
    /// Restores a state from `local_irq_save`.
    ///
    /// # Safety
    ///
    /// `flags` comes from the matching save on this CPU, restored in reverse
    /// order.
    unsafe fn local_irq_restore(flags: IrqFlags);
    /// Masks interrupts (`local_irq_disable`).
    fn local_irq_disable();
    /// Unmasks interrupts (`local_irq_enable`).
    ///
    /// # Safety
    ///
    /// Only where interrupts were enabled before the matching disable.
    unsafe fn local_irq_enable();
    /// Disables preemption (a per-CPU count in a kernel without a scheduler).
    fn preempt_disable();
    /// Re-enables preemption.
    ///
    /// # Safety
    ///
    /// Matches an earlier `preempt_disable` on this CPU.
    unsafe fn preempt_enable();
    /// Boot entropy for hardening ([`Platform::random_seed`]); 0 if none.
    fn random_seed() -> u64 {
        0
    }
    /// `nr_node_ids` ([`Platform::nr_node_ids`]): 1 unless the kernel
    /// knows its NUMA nodes (from ACPI SRAT / the device tree).
    const NR_NODES: usize = 1;
    /// `cpu_to_node()` ([`Platform::cpu_to_node`]); node 0 by default.
    fn cpu_to_node(cpu: usize) -> usize {
        let _ = cpu;
        0
    }
    /// `node_distance()` ([`Platform::node_distance`]): the SLIT entry;
    /// by default 10 to itself and 20 to any other node.
    fn node_distance(a: usize, b: usize) -> u8 {
        if a == b {
            crate::topology::LOCAL_DISTANCE
        } else {
            crate::topology::REMOTE_DISTANCE
        }
    }
    /// CPUs online (`num_online_cpus()`, [`Platform::nr_online_cpus`]):
    /// what per-CPU caches divide memory by. The default, `NR_CPUS`, suits a
    /// kernel that brings every possible CPU up; a kernel that boots fewer
    /// says how many.
    fn nr_online_cpus() -> usize {
        Self::NR_CPUS
    }
    /// The kernel's page reclaim ([`Platform::reclaim_pages`]): frees pages
    /// back to the allocators for a blocked request of `2^order` pages on
    /// node `nid`, returns how many. None by default.
    fn reclaim_pages(nid: usize, order: u8) -> usize {
        let _ = (nid, order);
        0
    }
    /// A failed allocation without `__GFP_NOWARN` ([`Platform::warn_alloc`]):
    /// a kernel prints it. Nothing by default.
    fn warn_alloc(order: u8, gfp: u32) {
        let _ = (order, gfp);
    }
}

/// The platform of a kernel described by `H`.
///
/// A `PREEMPT_RT` kernel of four CPUs (the hooks here are stand-ins that
/// run in a test process; a kernel reads its CPU id and masks interrupts):
///
/// ```
/// use local_lock::kernel::{Kernel, KernelHooks};
/// use local_lock::{IrqFlags, LocalLock, Platform, Strategy};
///
/// struct Rt;
/// // SAFETY: CPU 0 only, no interrupts, in this example.
/// unsafe impl KernelHooks for Rt {
///     const NR_CPUS: usize = 4;
///     const PREEMPT_RT: bool = true;
///     fn smp_processor_id() -> usize { 0 }
///     fn in_interrupt() -> bool { false }
///     fn irqs_disabled() -> bool { false }
///     fn local_irq_save() -> IrqFlags { IrqFlags(0) }
///     unsafe fn local_irq_restore(_: IrqFlags) {}
///     fn local_irq_disable() {}
///     unsafe fn local_irq_enable() {}
///     fn preempt_disable() {}
///     unsafe fn preempt_enable() {}
///     // Two sockets of two CPUs (from ACPI SRAT/SLIT on a real kernel).
///     const NR_NODES: usize = 2;
///     fn cpu_to_node(cpu: usize) -> usize { cpu / 2 }
///     fn node_distance(a: usize, b: usize) -> u8 { if a == b { 10 } else { 21 } }
/// }
///
/// let k: Kernel<Rt> = Kernel::new();
/// assert_eq!(k.nr_cpus(), 4);
/// assert_eq!((k.nr_node_ids(), k.cpu_to_node(3), k.node_distance(0, 1)), (2, 1, 21));
/// assert_eq!(k.numa_node_id(), 0, "CPU 0 is on node 0");
/// assert_eq!(k.default_strategy(), Strategy::Locked, "RT: slots are spin locks");
/// static PCP: LocalLock<u32, Kernel<Rt>, 4> = LocalLock::new(Kernel::new());
/// *PCP.lock() += 1;
/// // Locked slots can be drained from another CPU.
/// assert_eq!(*PCP.lock_remote(0).unwrap(), 1);
/// ```
pub struct Kernel<H>(PhantomData<fn() -> H>);

impl<H> Kernel<H> {
    /// The platform (a zero-sized value).
    pub const fn new() -> Self {
        Kernel(PhantomData)
    }
}

impl<H> Default for Kernel<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H> Clone for Kernel<H> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<H> Copy for Kernel<H> {}

// SAFETY: forwards to the kernel's primitives, which `KernelHooks`' contract
// makes truthful; pinned slots are never handed to a remote CPU (the default
// `pin_remote` refuses on the pinned strategy).
unsafe impl<H: KernelHooks> Platform for Kernel<H> {
    const MIN_SLOTS: usize = H::NR_CPUS;
    const HAS_IRQS: bool = H::HAS_IRQS;
    // spin_lock_irqsave on !PREEMPT_RT: the holder runs until it unlocks.
    const RAW_SPINLOCKS: bool = !H::PREEMPT_RT;

    #[inline(always)]
    fn nr_cpus(&self) -> usize {
        H::NR_CPUS
    }
    fn nr_online_cpus(&self) -> usize {
        H::nr_online_cpus().clamp(1, H::NR_CPUS.max(1))
    }
    #[inline(always)]
    fn current_cpu(&self) -> usize {
        H::smp_processor_id()
    }
    #[inline(always)]
    fn nr_node_ids(&self) -> usize {
        H::NR_NODES
    }
    #[inline(always)]
    fn cpu_to_node(&self, cpu: usize) -> usize {
        H::cpu_to_node(cpu)
    }
    #[inline(always)]
    fn node_distance(&self, a: usize, b: usize) -> u8 {
        H::node_distance(a, b)
    }
    fn reclaim_pages(&self, nid: usize, order: u8) -> usize {
        H::reclaim_pages(nid, order)
    }
    fn warn_alloc(&self, order: u8, gfp: u32) {
        H::warn_alloc(order, gfp)
    }
    #[inline(always)]
    fn in_interrupt(&self) -> bool {
        H::in_interrupt()
    }
    #[inline(always)]
    fn irqs_disabled(&self) -> bool {
        H::irqs_disabled()
    }
    #[inline(always)]
    fn irq_save(&self) -> IrqFlags {
        if H::HAS_IRQS {
            H::local_irq_save()
        } else {
            IrqFlags(0)
        }
    }
    #[inline(always)]
    unsafe fn irq_restore(&self, flags: IrqFlags) {
        if H::HAS_IRQS {
            // SAFETY: forwarded contract.
            unsafe { H::local_irq_restore(flags) }
        }
    }
    #[inline(always)]
    fn irq_disable(&self) {
        if H::HAS_IRQS {
            H::local_irq_disable()
        }
    }
    #[inline(always)]
    unsafe fn irq_enable(&self) {
        if H::HAS_IRQS {
            // SAFETY: forwarded contract.
            unsafe { H::local_irq_enable() }
        }
    }
    #[inline(always)]
    fn preempt_disable(&self) {
        H::preempt_disable()
    }
    #[inline(always)]
    unsafe fn preempt_enable(&self) {
        // SAFETY: forwarded contract.
        unsafe { H::preempt_enable() }
    }
    #[inline(always)]
    fn pin(&self) -> Pin {
        H::preempt_disable();
        Pin {
            cpu: H::smp_processor_id(),
            strategy: self.default_strategy(),
            token: 0,
        }
    }
    fn random_seed(&self) -> u64 {
        H::random_seed()
    }
    #[inline(always)]
    fn default_strategy(&self) -> Strategy {
        if H::PREEMPT_RT {
            Strategy::Locked
        } else {
            Strategy::Pinned
        }
    }
}
