//! `fork()` with [`GlobalPcp`] as (or under) the global allocator (issue
//! #14 item 13; see [`local_lock::fork`]).
//!
//! The per-thread lists need no lock: each slot is owned by its thread,
//! and in the child the slots of threads that are gone stay owned (their
//! pages stay on their lists). The shared overflow slot is a real lock:
//! it is taken before `fork` ([`level::PAGES`]) and released after it; the
//! buddy underneath registers its own locks ([`level::BUDDY`]), which are
//! taken after it, as the crate's lock order says (lists, then zone).

use core::sync::atomic::{AtomicPtr, Ordering};

use local_lock::fork::{in_main_image, level, ForkLocks};
use local_lock::std_platform::PerThread;

use crate::global::GlobalPcp;

impl ForkLocks for GlobalPcp {
    fn fork_prepare(&self) {
        // SAFETY: the overflow slot is always locked (PerThread).
        unsafe { self.pcp().fork_lock_cpu(PerThread::OVERFLOW_SLOT) }
    }

    unsafe fn fork_parent(&self) {
        // SAFETY: taken by `fork_prepare` on this thread.
        unsafe { self.pcp().fork_unlock_cpu(PerThread::OVERFLOW_SLOT) }
    }

    unsafe fn fork_child(&self) {
        // SAFETY: taken by `fork_prepare` on the thread this child copies.
        unsafe { self.pcp().fork_unlock_cpu(PerThread::OVERFLOW_SLOT) }
    }
}

impl GlobalPcp {
    /// Makes `fork` take and release this heap's locks (its lists'
    /// overflow slot, then its buddy's; see the module docs). A `GlobalPcp`
    /// that is a `static` of the program registers itself on first use as
    /// a global allocator; other `'static` users (slub's pages) call this.
    /// Registering twice is a no-op; `false` if the registry is full.
    ///
    /// Must be called where the caller holds no allocator lock.
    pub fn register_fork(&'static self) -> bool {
        let a = local_lock::fork::register(self, level::PAGES);
        let b = self.pcp().source().register_fork();
        a && b
    }
}

/// The last instance seen by [`register`] (one load and a compare on the
/// allocation path once done).
static SEEN: AtomicPtr<GlobalPcp> = AtomicPtr::new(core::ptr::null_mut());

/// Registers `g` for `fork` on its first use as a global allocator, if it
/// is a `static` of the program (an instance that may move or be dropped
/// is never registered). Called at an allocation's entry, before any lock.
#[inline(always)]
pub(crate) fn register(g: &GlobalPcp) {
    let p = g as *const GlobalPcp as *mut GlobalPcp;
    if SEEN.load(Ordering::Relaxed) != p {
        register_slow(p);
    }
}

#[cold]
#[inline(never)]
fn register_slow(p: *mut GlobalPcp) {
    if in_main_image(p.cast_const().cast()) {
        // SAFETY: a static of the executable: lives, unmoved, until exit.
        let g: &'static GlobalPcp = unsafe { &*p };
        g.register_fork();
    }
    SEEN.store(p, Ordering::Relaxed);
}
