//! The Rust allocator of this library's own code: the C `malloc` it
//! defines, except while the thread is panicking (slub's corruption
//! reports under `MM_SLUB_DEBUG` and `die`'s messages panic with a cache
//! lock held: formatting the message must not enter the caches again),
//! when blocks come from a static arena and are never freed.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use slub::SlabSource;

use crate::pages::{heap, pages};

/// The arena's size: a panic's message, its payload and a backtrace's
/// symbols (`.bss`: no memory until used).
const ARENA: usize = 1 << 20;

/// The arena's bytes.
#[repr(align(4096))]
struct Bytes(UnsafeCell<[u8; ARENA]>);

// SAFETY: disjoint ranges are handed out by an atomic bump.
unsafe impl Sync for Bytes {}

static BYTES: Bytes = Bytes(UnsafeCell::new([0; ARENA]));
static USED: AtomicUsize = AtomicUsize::new(0);
/// The last mapping made when the arena was used up (kept for debuggers).
static LEAKED: AtomicUsize = AtomicUsize::new(0);

/// See the module's documentation.
pub struct RustAlloc;

impl RustAlloc {
    fn in_arena(p: *mut u8) -> bool {
        let base = BYTES.0.get().cast::<u8>().addr();
        (base..base + ARENA).contains(&p.addr())
    }

    /// A bump allocation from the arena (null when it is used up).
    fn bump(l: Layout) -> *mut u8 {
        let base = BYTES.0.get().cast::<u8>();
        let mut cur = USED.load(Ordering::Relaxed);
        loop {
            let start = (base.addr() + cur).next_multiple_of(l.align()) - base.addr();
            let end = start + l.size();
            if end > ARENA {
                return core::ptr::null_mut();
            }
            match USED.compare_exchange(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
                // SAFETY: within the arena.
                Ok(_) => return unsafe { base.add(start) },
                Err(c) => cur = c,
            }
        }
    }
}

// SAFETY: `alloc` returns blocks of `l.size()` bytes aligned to `l.align()`
// (the C allocator's, or the arena's), `dealloc` frees each as it came.
unsafe impl GlobalAlloc for RustAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if std::thread::panicking() {
            let p = Self::bump(l);
            if !p.is_null() || l.align() > 4096 {
                return p;
            }
            // SAFETY: a fresh anonymous mapping (never unmapped).
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    l.size().max(1),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            return if m == libc::MAP_FAILED {
                core::ptr::null_mut()
            } else {
                LEAKED.store(m.addr(), Ordering::Relaxed);
                m.cast()
            };
        }
        crate::alloc_aligned(l.align(), l.size())
    }
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // Arena blocks and the mappings made when it ran out stay.
        let ours = pages().block_of(p).is_some() || heap().direct_size(p).is_some();
        if !Self::in_arena(p) && ours {
            // SAFETY: one of ours (GlobalAlloc's contract).
            unsafe { crate::dealloc(p, "free") }
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if !Self::in_arena(p) && !std::thread::panicking() && l.align() <= crate::MALLOC_ALIGNMENT {
            // SAFETY: one of ours (GlobalAlloc's contract).
            return unsafe { crate::realloc_impl(p, new, "realloc") };
        }
        // SAFETY: a valid layout (GlobalAlloc's contract).
        let q = unsafe { self.alloc(Layout::from_size_align_unchecked(new, l.align())) };
        if !q.is_null() {
            // SAFETY: both live, `min` bytes each.
            unsafe { core::ptr::copy_nonoverlapping(p, q, l.size().min(new)) };
            // SAFETY: as above.
            unsafe { self.dealloc(p, l) };
        }
        q
    }
}
