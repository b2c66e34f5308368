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
use core::sync::atomic::{AtomicBool, Ordering};
use local_lock::fork::{level, ForkLocks};

/// The slots a CPU of this machine can use: CPU `c` uses slot `c`, and
/// CPU ids are below the configured count, so with at most [`SLOTS`]
/// configured CPUs the slots above are never used and need no lock (each
/// slot lock taken and released costs the parent and the child a
/// copy-on-write fault on its page after `fork`); with more, all of them.
fn all() -> core::ops::Range<usize> {
    use local_lock::Platform;
    let n = local_lock::std_platform::RseqCpu::new().nr_cpus();
    0..if n <= SLOTS { n } else { SLOTS }
}

/// `prepare` found the process single-threaded and took no cache lock
/// (so `parent` and `child` release none).
static SKIPPED: AtomicBool = AtomicBool::new(false);

impl ForkLocks for GlobalSlub {
    fn fork_prepare(&self) {
        let skip = local_lock::fork::single_threaded();
        SKIPPED.store(skip, Ordering::Relaxed);
        if skip {
            return;
        }
        for c in self.kmalloc_caches() {
            // SAFETY: RseqCpu locks every slot.
            unsafe { c.fork_lock(all()) };
        }
    }

    unsafe fn fork_parent(&self) {
        if SKIPPED.load(Ordering::Relaxed) {
            return;
        }
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on this thread.
            unsafe { c.fork_unlock(all()) };
        }
    }

    unsafe fn fork_child(&self) {
        if SKIPPED.load(Ordering::Relaxed) {
            return;
        }
        for c in self.kmalloc_caches().iter().rev() {
            // SAFETY: taken by `fork_prepare` on the thread this child
            // copies; the data they protect is consistent.
            unsafe { c.fork_unlock(all()) };
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
