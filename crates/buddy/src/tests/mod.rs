//! Unit tests (also run under miri: memory comes from the heap, never
//! from mmap, and heavy tests shrink under `cfg(miri)`).

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::vec::Vec;

use local_lock::test_platform::TestPlatform;

use crate::{Buddy, Config, Order, Page, ZoneId};

mod bad_free;
mod basic;
mod bulk;
mod concurrency;
mod gfp;
#[cfg(not(miri))]
mod global;
mod irq;
mod model;
mod numa;
mod owner;
mod purge;
mod wmark;
mod zero;

/// Heap memory with a chosen alignment, freed on drop.
pub(crate) struct Arena {
    pub(crate) ptr: *mut u8,
    layout: Layout,
}

impl Arena {
    pub(crate) fn new(len: usize, align: usize, zeroed: bool) -> Arena {
        let layout = Layout::from_size_align(len, align).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        assert!(!ptr.is_null());
        Arena { ptr, layout }
    }
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        self.ptr.wrapping_add(off)
    }
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A buddy over `blocks` largest blocks of heap memory, memmap placed with
/// `add_span` (so every page is managed), all of it added as one region.
pub(crate) struct Fx {
    pub(crate) b: Buddy<TestPlatform>,
    pub(crate) arena: Arena,
    _mm: Arena,
}

impl std::ops::Deref for Fx {
    type Target = Buddy<TestPlatform>;
    fn deref(&self) -> &Buddy<TestPlatform> {
        &self.b
    }
}

impl Fx {
    /// `blocks` blocks of `cfg`, zeroed memory unless `dirty`.
    pub(crate) fn with(cfg: Config, blocks: usize, dirty: bool) -> Fx {
        Fx::build(cfg.max_block_size(), blocks, dirty, |_| cfg)
    }

    /// As [`with`](Self::with), the configuration made from the arena's
    /// address (for zone limits inside the arena).
    pub(crate) fn build(
        block: usize,
        blocks: usize,
        dirty: bool,
        cfg: impl FnOnce(usize) -> Config,
    ) -> Fx {
        let arena = Arena::new(blocks * block, block, true);
        let cfg = cfg(arena.addr());
        assert_eq!(cfg.max_block_size(), block);
        if dirty {
            // SAFETY: our arena.
            unsafe { arena.ptr.write_bytes(0xAA, arena.len()) };
        }
        let b = Buddy::new(TestPlatform::pinned(1), cfg);
        let mm = Arena::new(
            b.memmap_bytes(arena.len()),
            Buddy::<TestPlatform>::MEMMAP_ALIGN,
            false,
        );
        // SAFETY: the arena and the memmap live as long as the fixture.
        unsafe {
            b.add_span(arena.ptr, arena.len(), mm.ptr, false).unwrap();
            let n = b.add_region(arena.ptr, arena.len(), !dirty).unwrap();
            assert_eq!(n, arena.len() / cfg.page_size());
        }
        b.check_invariants();
        Fx { b, arena, _mm: mm }
    }

    /// Small pages (64 B), max order 4, no min watermark.
    pub(crate) fn small(blocks: usize) -> Fx {
        Fx::with(
            Config::new(64, 4).with_tunables(crate::Tunables::NO_MIN),
            blocks,
            false,
        )
    }

    /// Page index of an address (from the arena start).
    pub(crate) fn idx(&self, p: &Page) -> usize {
        (p.addr() - self.arena.addr()) / self.b.config().page_size()
    }

    /// Pointer of page `i` of the arena.
    pub(crate) fn page_ptr(&self, i: usize) -> NonNull<u8> {
        NonNull::new(self.arena.at(i * self.b.config().page_size())).unwrap()
    }

    /// Free blocks per order in zone 0.
    pub(crate) fn info(&self) -> Vec<usize> {
        let i = self.b.zone_info(ZoneId::new(0));
        i.free_blocks[..=self.b.config().max_order().index()].to_vec()
    }
}

/// Order `o` (test shorthand).
pub(crate) fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

/// Fills a block with a byte.
pub(crate) fn fill(p: &Page, size: usize, v: u8) {
    // SAFETY: the test holds the block.
    unsafe { p.ptr.as_ptr().write_bytes(v, size) }
}

/// Whether a block reads as `v` throughout.
pub(crate) fn reads(p: &Page, size: usize, v: u8) -> bool {
    // SAFETY: the test holds the block.
    unsafe { std::slice::from_raw_parts(p.ptr.as_ptr(), size) }
        .iter()
        .all(|&b| b == v)
}
