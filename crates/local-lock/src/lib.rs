//! The Linux kernel's `local_lock`, modelled as traits, and the sync shim of
//! the allocator family.
//!
//! See also the project's design document, `docs/DESIGN.md`, for how this
//! crate fits the others.
//!
//! # What a local lock is
//!
//! Kernel per-CPU data is protected by keeping the running code on its CPU:
//! `local_lock()` is `preempt_disable()` on a normal kernel,
//! `local_lock_irqsave()` also masks interrupts, and on PREEMPT_RT a
//! `local_lock` is a real per-CPU (sleeping) lock plus `migrate_disable()`.
//! Here a [`LocalLock<T>`] owns one `T` per CPU, each in its own
//! cache-line-padded slot, and the only way to reach a slot is a
//! [`LocalGuard`] that pinned the caller. "Pinned to this CPU" is a value,
//! never an ambient state.
//!
//! # The two strategies
//!
//! The [`Platform`] decides, per pin, how a slot is protected:
//!
//! | | [`Strategy::Pinned`] | [`Strategy::Locked`] |
//! |---|---|---|
//! | who | kernel !RT ([`kernel::Kernel`]), [`PerThread`](std_platform::PerThread) | PREEMPT_RT, [`StdCpu`](std_platform::StdCpu), overflow threads |
//! | `lock()` | disable preemption, set the slot's `acquired` word with a plain store | pin (migrate-disable), then a per-slot spin lock (acquire CAS) |
//! | `lock_irq*()` | also mask IRQs (the only protection against this CPU's interrupt handlers) | also mask IRQs where the platform has them (no-ops on RT/std) |
//! | `try_lock()` | fails if the slot is held (an interrupt handler found its task inside) | fails if the lock is held |
//! | remote access ([`LocalLock::lock_remote`]) | refused while the owner may run (per-thread: allowed once the thread has exited) | locks the target slot directly, as Linux 6.x pcp drains do |
//! | atomic RMW on the fast path | none | one CAS to lock, one store to unlock |
//! | spin slots (`try_lock_spin`, `lock_irqsave_spin`, [`LocalLock::lock_remote_spin`]) | a real per-CPU spin lock (acquire CAS) that other CPUs take directly: the kernel's `pcp->lock` (Linux 6.0+) | as the locked strategy |
//!
//! # Nesting rules (lock order)
//!
//! 1. A context may hold local locks of *different* `LocalLock`s at once
//!    only in one fixed order per code base; each crate of the family
//!    documents its order at its top (e.g. slub: `list_lock` outside the CPU
//!    slab lock).
//! 2. The *same* CPU slot is never taken twice by nested contexts. In the
//!    pinned strategy, an interrupt handler that calls `lock()` while its
//!    task holds the slot is a deadlock in the kernel; here it panics
//!    ("re-entered"). Code that can run in interrupt context either uses
//!    [`try_lock`](LocalLock::try_lock) and falls back (pcp, sheaves), or
//!    the task side uses [`lock_irqsave`](LocalLock::lock_irqsave) so the
//!    interrupt cannot arrive inside.
//! 3. In the locked strategy an interrupt handler that spins on the slot of
//!    the task it interrupted panics with "deadlock" instead of hanging.
//! 4. Spin locks from [`sync`] (e.g. a zone lock) nest *inside* a local
//!    lock, never the other way round; if interrupt handlers take them, take
//!    them with IRQs saved.
//! 5. IRQ state is restored in reverse order: a guard restores on drop what
//!    it saved, after releasing the slot and unpinning. Guards are `!Send`.
//!
//! # Platforms
//!
//! * [`kernel::Kernel<H>`]: a `no_std` kernel implements the
//!   `unsafe trait` [`kernel::KernelHooks`] with its real primitives.
//! * [`std_platform::StdCpu`] (feature `std`): real CPUs from
//!   `sched_getcpu()`, locked strategy.
//! * [`std_platform::PerThread`] (feature `std`): a virtual CPU per live
//!   thread, pinned strategy without atomics; exit hooks flush a slot when
//!   its thread exits and the slot is handed over ([`handover`]).
//! * [`test_platform::TestPlatform`] (feature `std`): deterministic; the
//!   test picks the CPU, raises interrupts, or arms one to fire in the
//!   middle of allocator code.
//! * `loom_platform::LoomPlatform` (`--cfg loom`): loom threads are CPUs.
//!
//! # The sync shim
//!
//! [`sync`] is the one place atomics, spin locks, back-off, cells and the
//! double-word compare-exchange come from, swapped for loom's under
//! `cfg(loom)`; every crate of the family uses it.

#![no_std]
#![warn(missing_docs)]

#[cfg(any(feature = "std", loom, test))]
extern crate std;

// `sync` first: its `const_fn!` is then in textual scope in the modules
// below, which use it without going up to the crate root.
#[macro_use]
pub mod sync;
#[cfg(feature = "allocator-api2")]
pub mod api2;
pub mod bits;
pub mod handover;
pub mod kernel;
mod lock;
pub mod platform;
pub mod stats;
pub mod this_cpu;
pub mod topology;

#[cfg(all(
    feature = "std",
    target_os = "linux",
    target_arch = "x86_64",
    not(loom)
))]
pub mod rseq;

#[cfg(all(feature = "std", unix, not(loom)))]
pub mod child;
#[cfg(all(feature = "std", not(loom)))]
pub mod fork;
#[cfg(all(feature = "std", unix))]
pub mod os;
#[cfg(all(feature = "std", not(loom)))]
pub mod std_platform;
#[cfg(all(feature = "std", not(loom)))]
pub mod test_platform;

#[cfg(loom)]
pub mod loom_platform;

pub use lock::{ConstInit, LocalGuard, LocalLock, DEFAULT_SLOTS};
pub use platform::{this_cpu_cmpxchg_double, IrqFlags, Pin, Platform, Strategy};

macro_rules! const_init_zero {
    ($($t:ty),*) => { $(impl ConstInit for $t { const INIT: Self = 0; })* };
}
const_init_zero!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

impl ConstInit for bool {
    const INIT: Self = false;
}
impl ConstInit for () {
    const INIT: Self = ();
}
impl<T> ConstInit for Option<T> {
    const INIT: Self = None;
}
impl<T: ConstInit, const K: usize> ConstInit for [T; K] {
    const INIT: Self = [const { T::INIT }; K];
}
impl<T> ConstInit for *mut T {
    const INIT: Self = core::ptr::null_mut();
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests;
