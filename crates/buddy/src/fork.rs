//! `fork()` with [`GlobalBuddy`] as (or under) the global allocator (issue
//! #14 item 13): its locks are taken before `fork` and released after it
//! in the parent and the child (see [`local_lock::fork`]), so a child
//! forked while another thread was inside the heap does not hang on a lock
//! that thread held.
//!
//! Locks, in the crate's lock order: `GlobalBuddy::grow`, then
//! `Buddy::resize`, then every zone lock (registered at
//! [`level::BUDDY`], after the object and page-list layers on top).

use core::sync::atomic::{AtomicPtr, Ordering};

use local_lock::fork::{in_main_image, level, ForkLocks};

use crate::global::GlobalBuddy;

impl ForkLocks for GlobalBuddy {
    fn fork_prepare(&self) {
        self.fork_lock();
    }

    unsafe fn fork_parent(&self) {
        // SAFETY: taken by `fork_prepare` on this thread.
        unsafe { self.fork_unlock() }
    }

    unsafe fn fork_child(&self) {
        // SAFETY: taken by `fork_prepare` on the thread this child copies;
        // the data the locks protect is consistent (nobody else held them).
        unsafe { self.fork_unlock() }
    }
}

impl GlobalBuddy {
    /// Makes `fork` take and release this heap's locks (see the module
    /// docs). Layers on top that are `'static` register their heap with it
    /// (pcp's `GlobalPcp`); a `GlobalBuddy` that is a `static` of the
    /// program registers itself on first use as a global allocator.
    /// Registering twice is a no-op; `false` if the registry is full.
    ///
    /// Must be called where the caller holds no allocator lock.
    pub fn register_fork(&'static self) -> bool {
        local_lock::fork::register(self, level::BUDDY)
    }
}

/// The last instance seen by [`register`]: one load and a compare on the
/// allocation path once it is done.
static SEEN: AtomicPtr<GlobalBuddy> = AtomicPtr::new(core::ptr::null_mut());

/// Registers `g` for `fork` on its first use as a global allocator, if it
/// is a `static` of the program (an instance that may move or be dropped
/// is never registered). Called at an allocation's entry, before any lock.
#[inline(always)]
pub(crate) fn register(g: &GlobalBuddy) {
    let p = g as *const GlobalBuddy as *mut GlobalBuddy;
    if SEEN.load(Ordering::Relaxed) != p {
        register_slow(p);
    }
}

#[cold]
#[inline(never)]
fn register_slow(p: *mut GlobalBuddy) {
    if in_main_image(p.cast_const().cast()) {
        // SAFETY: a static of the executable: lives, unmoved, until exit.
        let g: &'static GlobalBuddy = unsafe { &*p };
        g.register_fork();
    }
    SEEN.store(p, Ordering::Relaxed);
}
