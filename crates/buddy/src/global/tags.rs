//! The heap's page map: one byte per page of `GlobalBuddy`'s first
//! reservation, set by the layers above for the blocks they hold (SLUB
//! tags its slabs with their cache and order), so that a free can tell
//! what an address belongs to from one byte, without the descriptor walk
//! (tail page to head, 64 bytes per page). snmalloc's pagemap and
//! mimalloc's segment map answer the same question the same way.
//!
//! The map is an anonymous `MAP_NORESERVE` mapping of `cap >> page_shift`
//! bytes made with the first reservation: pages of it that nothing wrote
//! cost no memory (a 64 GiB reservation has a 16 MiB map, of which one
//! 4 KiB page covers 16 MiB of heap). Addresses outside that reservation
//! read as 0 ("no tag"): callers fall back to the descriptors.

use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use local_lock::os;

/// See the module docs.
pub(crate) struct PageTags {
    /// First heap byte covered.
    base: AtomicUsize,
    /// Pages covered (0 until the map exists; published last).
    pages: AtomicUsize,
    /// One byte per covered page.
    map: AtomicPtr<u8>,
    /// log2 of the page size.
    shift: AtomicUsize,
}

impl PageTags {
    /// No map yet: every address reads as 0.
    pub(crate) const fn new() -> Self {
        PageTags {
            base: AtomicUsize::new(0),
            pages: AtomicUsize::new(0),
            map: AtomicPtr::new(core::ptr::null_mut()),
            shift: AtomicUsize::new(12),
        }
    }

    /// Covers the heap `[heap, heap + cap)` (the first reservation; later
    /// calls do nothing). Called under the grow lock. Without the map
    /// (`mmap` refused) every address keeps reading as 0.
    pub(crate) fn cover(&self, heap: *mut u8, cap: usize, shift: u32) {
        if self.pages.load(Ordering::Relaxed) != 0 {
            return;
        }
        let pages = cap >> shift;
        let Some(len) = local_lock::bits::checked_align_up(pages, os::page_size()) else {
            return;
        };
        if len == 0 {
            return;
        }
        // SAFETY: a fresh anonymous mapping anywhere, kept for the process.
        let m = unsafe {
            os::map(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_NORESERVE,
            )
        };
        if m.is_null() {
            return;
        }
        self.base.store(heap.addr(), Ordering::Relaxed);
        self.shift.store(shift as usize, Ordering::Relaxed);
        self.map.store(m, Ordering::Relaxed);
        // Published last: a reader that sees the pages sees the rest.
        self.pages.store(pages, Ordering::Release);
    }

    /// The map byte of page `i` (`i` below the covered pages).
    #[inline(always)]
    fn byte(&self, i: usize) -> &AtomicU8 {
        // SAFETY: `i` is below `pages`, whose map is mapped for the
        // process; bytes are only accessed atomically.
        unsafe { AtomicU8::from_ptr(self.map.load(Ordering::Relaxed).add(i)) }
    }

    /// The tag of the page holding `addr`; 0 outside the covered heap.
    #[inline(always)]
    pub(crate) fn get(&self, addr: usize) -> u8 {
        let pages = self.pages.load(Ordering::Acquire);
        let i = addr.wrapping_sub(self.base.load(Ordering::Relaxed))
            >> self.shift.load(Ordering::Relaxed);
        if i < pages {
            self.byte(i).load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Where the map is, once it exists ([`PageAlloc::page_map`]).
    ///
    /// [`PageAlloc::page_map`]: crate::PageAlloc::page_map
    pub(crate) fn view(&self) -> Option<crate::PageMapView> {
        // Acquire: pairs with `cover`'s release of `pages`.
        let pages = self.pages.load(Ordering::Acquire);
        (pages != 0).then(|| crate::PageMapView {
            map: self.map.load(Ordering::Relaxed),
            base: self.base.load(Ordering::Relaxed),
            pages,
            shift: self.shift.load(Ordering::Relaxed) as u32,
        })
    }

    /// Tags `n` pages from `head` (a block the caller holds); pages
    /// outside the covered heap are left alone.
    pub(crate) fn set(&self, head: usize, n: usize, tag: u8) {
        let pages = self.pages.load(Ordering::Acquire);
        let first = head.wrapping_sub(self.base.load(Ordering::Relaxed))
            >> self.shift.load(Ordering::Relaxed);
        if first >= pages {
            return;
        }
        for i in first..(first + n).min(pages) {
            self.byte(i).store(tag, Ordering::Relaxed);
        }
    }
}
