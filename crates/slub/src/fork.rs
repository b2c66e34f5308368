//! `fork()` with [`GlobalSlub`] as the global allocator (issue #14 item
//! 13; see [`local_lock::fork`]).
//!
//! Before `fork` the forking thread takes, for each registered instance and
//! each of its 13 kmalloc caches in turn: `list_lock`, the full list's
//! lock, the per-CPU locks of every slot (the slab paths of
//! [`RseqCpu`](local_lock::std_platform::RseqCpu) lock their CPU's slot;
//! the sheaves need no lock: a restartable section cannot be half done in
//! the child, which has no other thread), the barn's lock
//! ([`level::OBJECTS`]). Then the pages underneath ([`GlobalPages`]): the
//! pcp overflow slot ([`level::PAGES`]), then the buddy's grow, resize and
//! zone locks ([`level::BUDDY`]). The parent and the child release them in
//! reverse order. In the child, the slots of threads that are gone stay
//! owned (their CPU slabs and sheaves stay cached); the forking thread
//! keeps its slot and new threads take free ones.
//!
//! [`GlobalPages`]: crate::GlobalPages

use crate::global::{GlobalSlub, SLOTS};
use local_lock::fork::{level, ForkLocks};

const ALL: core::ops::Range<usize> = 0..SLOTS;

impl ForkLocks for GlobalSlub {
    fn fork_prepare(&self) {
        for c in self.kmalloc_caches() {
            // SAFETY: RseqCpu locks every slot.
            unsafe { c.fork_lock(ALL) };
        }
    }

    unsafe fn fork_parent(&self) {
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on this thread.
            unsafe { c.fork_unlock(ALL) };
        }
    }

    unsafe fn fork_child(&self) {
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on the thread this child
            // copies; the data they protect is consistent.
            unsafe { c.fork_unlock(ALL) };
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
