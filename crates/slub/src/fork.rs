//! `fork()` with [`GlobalSlub`] as the global allocator (issue #14 item
//! 13; see [`local_lock::fork`]).
//!
//! Before `fork` the forking thread takes, for each registered instance and
//! each of its 13 kmalloc caches in turn: `list_lock`, the full list's
//! lock, the per-CPU lock of the shared overflow slot (the other slots are
//! owned by their threads and need none), the barn's lock
//! ([`level::OBJECTS`]). Then the pages underneath ([`GlobalPages`]): the
//! pcp overflow slot ([`level::PAGES`]), then the buddy's grow, resize and
//! zone locks ([`level::BUDDY`]). The parent and the child release them in
//! reverse order. In the child, the slots of threads that are gone stay
//! owned (their CPU slabs and sheaves stay cached); the forking thread
//! keeps its slot and new threads take free ones.
//!
//! [`GlobalPages`]: crate::GlobalPages

use local_lock::fork::{level, ForkLocks};
use local_lock::std_platform::PerThread;

use crate::global::GlobalSlub;

const OVERFLOW: Option<usize> = Some(PerThread::OVERFLOW_SLOT);

impl ForkLocks for GlobalSlub {
    fn fork_prepare(&self) {
        for c in self.kmalloc_caches() {
            // SAFETY: the overflow slot is always locked (PerThread).
            unsafe { c.fork_lock(OVERFLOW) };
        }
    }

    unsafe fn fork_parent(&self) {
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on this thread.
            unsafe { c.fork_unlock(OVERFLOW) };
        }
    }

    unsafe fn fork_child(&self) {
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on the thread this child
            // copies; the data they protect is consistent.
            unsafe { c.fork_unlock(OVERFLOW) };
        }
    }
}

/// Registers the shared pages (every instance's slabs come from them).
pub(crate) fn register_pages() {
    crate::global::pages_static().register_fork();
}

/// Registers a `'static` instance's caches.
pub(crate) fn register_instance(g: &'static GlobalSlub) {
    local_lock::fork::register(g, level::OBJECTS);
}
