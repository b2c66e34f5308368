//! `fork()` with `GlobalBitmap` as the global allocator (issue #14 item
//! 13): its locks are taken before `fork` and released after it in the
//! parent and the child (see [`local_lock::fork`]), so a child forked while
//! another thread was inside the allocator does not hang.
//!
//! Locks, in order: the heap's `slow` lock (`pcpu_alloc_mutex`), its
//! `data` lock (`pcpu_lock`), then the record of large blocks (a leaf).

use core::sync::atomic::Ordering;

use local_lock::fork::{in_main_image, level, ForkLocks};

use crate::global::GlobalBitmap;

impl ForkLocks for GlobalBitmap {
    fn fork_prepare(&self) {
        self.heap.fork_lock();
        self.large.fork_lock();
    }

    unsafe fn fork_parent(&self) {
        // SAFETY: taken by `fork_prepare` on this thread.
        unsafe {
            self.large.fork_unlock();
            self.heap.fork_unlock();
        }
    }

    unsafe fn fork_child(&self) {
        // SAFETY: taken by `fork_prepare` on the thread this child copies;
        // the data they protect is consistent (nobody else held them).
        unsafe {
            self.large.fork_unlock();
            self.heap.fork_unlock();
        }
    }
}

/// Registers `g`'s fork handlers on its first use if it is a `static` of
/// the program (an instance that may move or be dropped is never
/// registered: it is left out of `fork` handling). Called at an
/// allocation's entry, before any lock.
#[inline(always)]
pub(crate) fn register(g: &GlobalBitmap) {
    if !g.fork_hooked.load(Ordering::Relaxed) {
        register_slow(g);
    }
}

#[cold]
#[inline(never)]
fn register_slow(g: &GlobalBitmap) {
    if g.fork_hooked.swap(true, Ordering::AcqRel) {
        return;
    }
    let p = g as *const GlobalBitmap;
    if in_main_image(p.cast()) {
        // SAFETY: a static of the executable: lives, unmoved, until exit.
        let s: &'static GlobalBitmap = unsafe { &*p };
        local_lock::fork::register(s, level::OBJECTS);
    }
}
