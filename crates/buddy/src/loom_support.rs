//! The loom test fixture shared by the loom models of buddy, pcp and slub
//! (`tests/loom.rs` of each crate): a [`Buddy`] on the loom platform over
//! one naturally aligned block of `2^max_order` pages in host memory, with
//! its memmap placed by `add_span` (under loom descriptors hold loom
//! atomics and are constructed in place), freed on drop. It is both page
//! sources of the family, [`BuddySource`] (what pcp sits on) and
//! [`PageAlloc`] (what slub sits on), forwarding to the buddy, so that no
//! model re-declares a heap.
//!
//! The fixture is large (a `Buddy<LoomPlatform>` is about 7.4 KiB, a pcp
//! or a cache over it more) and a model body moves it by value several
//! times while building its layers, but loom runs the model's main thread
//! on a fixed coroutine stack of 32 KiB (generator's default; loom 0.7's
//! `model::Builder` has no stack size) which such a body overflows. So
//! models run their body through [`run`], on a loom thread of 1 MiB
//! ([`spawn`]), and spawn their other contexts with [`spawn`] where they
//! hold fixtures on their stack.
//!
//! Only built under `--cfg loom`.

use core::ptr::NonNull;
use std::alloc::{alloc_zeroed, dealloc, Layout};

use local_lock::loom_platform::{model, LoomPlatform};
use loom::thread;

use crate::buddy::{Block, BlockRef, Buddy};
use crate::source::{BuddySource, PageAlloc};
use crate::types::{AllocFlags, Config, Order, Tunables};

/// A buddy over one block of `2^max_order` pages (zone 0, no watermark
/// reserve), with the arena and memmap it owns.
pub struct Heap {
    /// The buddy allocator over the arena.
    pub b: Buddy<LoomPlatform>,
    arena: *mut u8,
    arena_layout: Layout,
    mm: *mut u8,
    mm_layout: Layout,
}

// SAFETY: the raw pointers name memory the heap owns; the buddy guards it.
unsafe impl Send for Heap {}
// SAFETY: as above.
unsafe impl Sync for Heap {}

impl Heap {
    /// A buddy of `page`-byte pages and `MAX_ORDER` `max_order` on `p`,
    /// over one zeroed block of `2^max_order` pages, aligned to its size,
    /// all of it free (added as known-zero).
    pub fn new(p: &LoomPlatform, page: usize, max_order: u8) -> Heap {
        let pages = 1usize << max_order;
        let cfg = Config::new(page, max_order).with_tunables(Tunables::NO_MIN);
        let b = Buddy::new(p.clone(), cfg);
        let arena_layout = Layout::from_size_align(page * pages, page * pages).unwrap();
        // SAFETY: non-zero size.
        let arena = unsafe { alloc_zeroed(arena_layout) };
        let mm_layout = Layout::from_size_align(b.memmap_bytes(page * pages), 64).unwrap();
        // SAFETY: non-zero size.
        let mm = unsafe { alloc_zeroed(mm_layout) };
        // SAFETY: both live as long as the heap.
        unsafe {
            b.add_span(arena, page * pages, mm, false).unwrap();
            assert_eq!(b.add_region(arena, page * pages, true), Ok(pages));
        }
        Heap {
            b,
            arena,
            arena_layout,
            mm,
            mm_layout,
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts.
        unsafe {
            dealloc(self.arena, self.arena_layout);
            dealloc(self.mm, self.mm_layout);
        }
    }
}

impl BuddySource for Heap {
    type P = LoomPlatform;
    fn buddy(&self) -> &Buddy<LoomPlatform> {
        &self.b
    }
}

// SAFETY: forwards to the buddy, which keeps the contract.
unsafe impl PageAlloc for Heap {
    fn page_size(&self) -> usize {
        self.b.config().page_size()
    }
    fn max_order(&self) -> Order {
        self.b.config().max_order()
    }
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.b.alloc_block(order, flags)
    }
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.b.free_pages(ptr, order) }
    }
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.b.owner_of(addr)
    }
}

/// Stack of the loom threads [`spawn`] starts: the fixture and the layers
/// built over it fit (the default coroutine stack is 32 KiB).
pub const STACK_SIZE: usize = 1 << 20;

/// A loom thread with a [`STACK_SIZE`] stack running `f`.
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new()
        .stack_size(STACK_SIZE)
        .spawn(f)
        .expect("loom spawn")
}

/// Checks `body` as the loom model `name`
/// ([`local_lock::loom_platform::model`]), running it on a big-stack loom
/// thread ([`spawn`]) that the model's main thread joins.
pub fn run(name: &str, body: impl Fn() + Send + Sync + 'static) {
    let body = std::sync::Arc::new(body);
    model(name, move || {
        let body = body.clone();
        spawn(move || body()).join().unwrap()
    });
}
