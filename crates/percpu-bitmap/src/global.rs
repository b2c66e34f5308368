//! `GlobalBitmap`: the bitmap allocator as a `#[global_allocator]`.
//!
//! A byte heap over the bitmaps and hints of one unit per chunk: chunks of
//! [`GlobalBitmap::UNIT_SIZE`] bytes from `mmap`, 4-byte granularity, frees
//! find the size in the boundary map (the `Layout` is not trusted for small
//! blocks), new chunks as the heap grows, fully free chunks beyond one
//! returned to the OS by the balance work (run inline by the free that asks
//! for it). Requests above [`MAX_ALLOC_SIZE`](crate::MAX_ALLOC_SIZE) or
//! aligned beyond a page are mappings of their own (`mmap` directly),
//! recorded so that a `dealloc` of anything else with such a layout aborts
//! with a message instead of unmapping it (`crate::large`). Memory is
//! mapped without `MAP_NORESERVE`: exhaustion, including a request the OS
//! will not back (1 TiB on a 23 GiB machine), returns null. No path calls
//! the global allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::AtomicBool;

use local_lock::std_platform::StdCpu;

use crate::large::{bad_large_free, LargeBlocks};
use crate::pcpu::PcpuAllocator;
use crate::source::MmapSource;
use crate::types::{MAX_ALLOC_SIZE, MIN_ALLOC_SIZE, PAGE_SIZE};

/// The bitmap allocator as a global allocator (see the module docs).
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: percpu_bitmap::GlobalBitmap = percpu_bitmap::GlobalBitmap::new();
/// ```
pub struct GlobalBitmap {
    pub(crate) heap: PcpuAllocator<StdCpu, MmapSource>,
    /// The live large blocks (see `crate::large`).
    pub(crate) large: LargeBlocks,
    /// Whether first use registered (or declined) the fork handlers.
    pub(crate) fork_hooked: AtomicBool,
}

impl Default for GlobalBitmap {
    fn default() -> Self {
        Self::new()
    }
}

impl GlobalBitmap {
    /// Bytes per chunk (one unit).
    pub const UNIT_SIZE: usize = 1 << 20;

    /// An empty heap; chunks are mapped on first use.
    pub const fn new() -> Self {
        GlobalBitmap {
            heap: PcpuAllocator::new_dynamic(
                StdCpu::new(),
                MmapSource::new().committed(),
                Self::UNIT_SIZE,
                1,
            ),
            large: LargeBlocks::new(),
            fork_hooked: AtomicBool::new(false),
        }
    }

    /// The underlying percpu allocator (statistics, balance, checking).
    pub fn allocator(&self) -> &PcpuAllocator<StdCpu, MmapSource> {
        &self.heap
    }

    /// Gives free memory back to the OS now (`malloc_trim`, issue #17):
    /// runs the balance work ([`PcpuAllocator::balance`]: fully free chunks
    /// beyond one unmapped, the empty pages of isolated chunks
    /// depopulated), which otherwise runs when a free asks for it. Large
    /// blocks are mappings of their own, unmapped when freed. Returns the
    /// bytes of populated pages given back.
    ///
    /// ```
    /// # // miri cannot map chunks.
    /// # #[cfg(not(miri))] {
    /// use core::alloc::{GlobalAlloc, Layout};
    /// static HEAP: percpu_bitmap::GlobalBitmap = percpu_bitmap::GlobalBitmap::new();
    /// let l = Layout::from_size_align(4096, 8).unwrap();
    /// // SAFETY: a valid layout; freed once below.
    /// let v: Vec<*mut u8> = (0..1024).map(|_| unsafe { HEAP.alloc(l) }).collect();
    /// for p in v {
    ///     // SAFETY: from `alloc` with this layout.
    ///     unsafe { HEAP.dealloc(p, l) };
    /// }
    /// HEAP.trim();
    /// assert!(HEAP.allocator().stats().nr_chunks <= 1, "one free chunk kept");
    /// # }
    /// ```
    pub fn trim(&self) -> usize {
        let before = self.heap.stats().nr_populated;
        self.heap.balance();
        before.saturating_sub(self.heap.stats().nr_populated) * PAGE_SIZE
    }

    /// Live large blocks (mappings of their own).
    pub fn large_blocks(&self) -> usize {
        self.large.live()
    }

    #[inline(always)]
    fn is_large(layout: &Layout) -> bool {
        layout.size() > MAX_ALLOC_SIZE || layout.align() > PAGE_SIZE
    }

    #[cold]
    fn alloc_large(&self, layout: Layout) -> *mut u8 {
        crate::fork::register(self);
        self.large.alloc(layout.size(), layout.align())
    }
}

/// Reports a bad free without allocating, then aborts (an allocator must
/// not unwind).
#[cold]
#[inline(never)]
fn bad_free(e: crate::error::FreeError) -> ! {
    local_lock::std_platform::die(format_args!(
        "GlobalBitmap: bad dealloc: {:#x} {}",
        e.addr, e.kind
    ))
}

// SAFETY: small blocks are areas of the one-unit percpu allocator: distinct
// live areas never overlap, each is at least `size` bytes and aligned as
// asked, and stays valid until freed; large blocks are private mappings of
// at least `size` bytes with the requested alignment. Nothing here unwinds
// (bad frees abort) or calls the global allocator.
unsafe impl GlobalAlloc for GlobalBitmap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::is_large(&layout) {
            return self.alloc_large(layout);
        }
        crate::fork::register(self);
        self.heap
            .alloc_heap(layout.size().max(1), layout.align())
            .map_or(null_mut(), |p| p.as_ptr())
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::is_large(&layout) {
            // Fresh anonymous mappings are zero.
            return self.alloc_large(layout);
        }
        crate::fork::register(self);
        match self.heap.alloc_heap(layout.size().max(1), layout.align()) {
            Some(p) => {
                // SAFETY: the block is at least `size` bytes and ours.
                unsafe { core::ptr::write_bytes(p.as_ptr(), 0, layout.size()) };
                p.as_ptr()
            }
            None => null_mut(),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(p) = NonNull::new(ptr) else { return };
        if Self::is_large(&layout) {
            // Only a live block of ours, of this size, is unmapped.
            if let Err(e) = self.large.free(p, layout.size()) {
                bad_large_free(ptr, layout.size(), layout.align(), e)
            }
            return;
        }
        match self.heap.free_raw(p) {
            Ok((_, need_balance)) => {
                if need_balance {
                    self.heap.balance();
                }
            }
            Err(e) => bad_free(e),
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Same number of 4-byte bits: the block already fits.
        if !Self::is_large(&layout)
            && new_size <= MAX_ALLOC_SIZE
            && new_size.max(1).next_multiple_of(MIN_ALLOC_SIZE)
                == layout.size().max(1).next_multiple_of(MIN_ALLOC_SIZE)
        {
            return ptr;
        }
        // SAFETY: the caller's contract for realloc: `layout.align()` with
        // `new_size` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: forwarded GlobalAlloc contract.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
