//! Spans: address ranges that have a memmap (one `FLATMEM` section each).
//!
//! A span is a run of pages `[start, start + pages * PAGE_SIZE)` whose
//! descriptors lie in one array, so address → descriptor is one
//! subtraction, a shift and an index. Holes inside a span are pages nobody
//! added (their descriptors stay all-zero). Spans are published lock-free and
//! never removed: readers load `len` (Acquire) and look at the slots below
//! it, which are immutable except for `pages`, which only grows (a std heap
//! growing inside its reserved range).
//!
//! A lookup checks the spans in the order they were added, so the common
//! case (one span, or the first) is one compare; at most [`MAX_SPANS`].

use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::UnsafeCell;

use crate::desc::PageDesc;
use crate::types::Config;

/// Most spans one allocator can have.
pub const MAX_SPANS: usize = 16;

/// The immutable part of a span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanInfo {
    /// Page frame number of the first page (its address is
    /// [`start`](Self::start)).
    pub(crate) first_pfn: usize,
    /// `nid * nr_zones` of the span's node `nid`: a page's zone is this
    /// plus the type its address gives (one add on the free path).
    pub(crate) zone_base: usize,
    /// Descriptor of the first page.
    pub(crate) memmap: *mut PageDesc,
    /// Descriptors in the memmap (the most pages the span can grow to).
    pub(crate) cap_pages: usize,
    /// The zone of every page the span can hold when its reserved range
    /// lies in one zone type (the common shape), else [`NO_ZONE`]: a
    /// caller that serves one zone compares it instead of working the
    /// zone out (issue #22).
    pub(crate) zone: usize,
}

/// [`SpanInfo::zone`] of a span across zone types.
pub(crate) const NO_ZONE: usize = usize::MAX;

impl SpanInfo {
    /// The span of `cap_pages` pages from `first_pfn` on node `nid` of a
    /// buddy configured by `cfg`, its memmap at `memmap`.
    pub(crate) fn new(
        cfg: &Config,
        nid: usize,
        first_pfn: usize,
        memmap: *mut PageDesc,
        cap_pages: usize,
    ) -> SpanInfo {
        let shift = cfg.page_shift();
        let zone_base = nid * cfg.nr_zones();
        let start = first_pfn << shift;
        let last = start.wrapping_add((cap_pages.max(1) << shift) - 1);
        let (t0, t1) = (cfg.zone_of_addr(start), cfg.zone_of_addr(last));
        SpanInfo {
            first_pfn,
            zone_base,
            memmap,
            cap_pages,
            zone: if t0 == t1 {
                zone_base + t0.index()
            } else {
                NO_ZONE
            },
        }
    }

    /// Address of the first page.
    #[inline(always)]
    pub(crate) fn start(&self, page_shift: u32) -> usize {
        self.first_pfn << page_shift
    }

    const EMPTY: SpanInfo = SpanInfo {
        first_pfn: 0,
        zone_base: 0,
        memmap: core::ptr::null_mut(),
        cap_pages: 0,
        zone: NO_ZONE,
    };
}

/// A span found by a lookup, with its populated size at that moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    /// Slot index.
    pub(crate) idx: usize,
    /// The span.
    pub(crate) info: SpanInfo,
    /// Pages the span answers for (`pages[idx]` when looked up).
    pub(crate) pages: usize,
}

impl Found {
    /// Index of `pfn` in the memmap if the span covers it.
    #[inline(always)]
    pub(crate) fn index(&self, pfn: usize) -> Option<usize> {
        let i = pfn.wrapping_sub(self.info.first_pfn);
        if i < self.pages {
            Some(i)
        } else {
            None
        }
    }

    /// The descriptor of `pfn`, if the span covers it. The reference may
    /// live as long as the allocator (memmaps are never freed); callers tie
    /// it to their `&Buddy`.
    #[inline(always)]
    pub(crate) fn desc<'a>(&self, pfn: usize) -> Option<&'a PageDesc> {
        let i = self.index(pfn)?;
        // SAFETY: `i < pages <= cap_pages`, and a span's memmap holds
        // `cap_pages` valid descriptors for as long as the allocator lives
        // (published before `pages` covered them).
        Some(unsafe { &*self.info.memmap.add(i) })
    }

    /// The descriptor of `pfn`, known to lie in the span (the lookup that
    /// gave `self` was for `pfn`): no range check.
    #[inline(always)]
    pub(crate) fn desc_unchecked(&self, pfn: usize) -> *mut PageDesc {
        debug_assert!(self.index(pfn).is_some());
        self.info
            .memmap
            .wrapping_add(pfn.wrapping_sub(self.info.first_pfn))
    }

    /// A raw pointer to the descriptor of `pfn`, if the span covers it.
    #[inline(always)]
    pub(crate) fn desc_ptr(&self, pfn: usize) -> Option<*mut PageDesc> {
        let i = self.index(pfn)?;
        // SAFETY: in bounds of the memmap allocation (see `desc`).
        Some(unsafe { self.info.memmap.add(i) })
    }

    /// The address one past the span's populated pages.
    #[inline(always)]
    pub(crate) fn end(&self, page_shift: u32) -> usize {
        (self.info.first_pfn + self.pages) << page_shift
    }
}

/// The table of spans (see the module docs).
///
/// Invariant: slots `0..len` are published; their `SpanInfo` never changes,
/// `pages[i]` only grows and never exceeds `cap_pages`; spans never overlap.
pub(crate) struct SpanTable {
    /// Slot contents, written once (resize lock) before `len` covers them.
    info: [UnsafeCell<SpanInfo>; MAX_SPANS],
    /// Populated pages of each span (Release on publication and growth):
    /// 0 until the span is published.
    pages: [AtomicUsize; MAX_SPANS],
    /// Each span's `first_pfn`, readable before publication (0 until
    /// then): the first span's lookup reads it and `pages` without `len`.
    first: [AtomicUsize; MAX_SPANS],
    /// Per span, its NUMA node (`page_to_nid`). Written before publication.
    nid: [AtomicUsize; MAX_SPANS],
    /// Published slots.
    len: AtomicUsize,
    /// Per span, the smallest start and largest end of the regions added
    /// to it (`usize::MAX`, 0 when none): pages outside `[lo, hi)` were
    /// never added, so a new region there needs no descriptor scan (resize
    /// lock).
    added_lo: [AtomicUsize; MAX_SPANS],
    /// See `added_lo`.
    added_hi: [AtomicUsize; MAX_SPANS],
}

// SAFETY: the raw memmap pointers are only dereferenced as documented in
// `Found::desc`; slot writes happen before publication (Release on `len`),
// reads only after it (Acquire).
unsafe impl Sync for SpanTable {}
// SAFETY: as above.
unsafe impl Send for SpanTable {}

impl SpanTable {
    local_lock::const_fn! {
        /// An empty table.
        pub(crate) fn new() -> SpanTable {
            #[cfg(not(loom))]
            return SpanTable {
                info: [const { UnsafeCell::new(SpanInfo::EMPTY) }; MAX_SPANS],
                pages: [const { AtomicUsize::new(0) }; MAX_SPANS],
                first: [const { AtomicUsize::new(0) }; MAX_SPANS],
                nid: [const { AtomicUsize::new(0) }; MAX_SPANS],
                len: AtomicUsize::new(0),
                added_lo: [const { AtomicUsize::new(usize::MAX) }; MAX_SPANS],
                added_hi: [const { AtomicUsize::new(0) }; MAX_SPANS],
            };
            #[cfg(loom)]
            return SpanTable {
                info: core::array::from_fn(|_| UnsafeCell::new(SpanInfo::EMPTY)),
                pages: core::array::from_fn(|_| AtomicUsize::new(0)),
                first: core::array::from_fn(|_| AtomicUsize::new(0)),
                nid: core::array::from_fn(|_| AtomicUsize::new(0)),
                len: AtomicUsize::new(0),
                added_lo: core::array::from_fn(|_| AtomicUsize::new(usize::MAX)),
                added_hi: core::array::from_fn(|_| AtomicUsize::new(0)),
            };
        }
    }

    /// Number of published spans.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    #[inline(always)]
    fn info(&self, i: usize) -> SpanInfo {
        // SAFETY: published slots are never written again (type invariant);
        // callers only read slots below `len` (Acquire).
        self.info[i].with(|p| unsafe { *p })
    }

    /// The node of published span `idx`.
    #[inline(always)]
    pub(crate) fn nid(&self, idx: usize) -> usize {
        self.nid[idx].load(Ordering::Relaxed)
    }

    /// Span `idx` (published).
    #[inline(always)]
    pub(crate) fn get(&self, idx: usize) -> Found {
        self.get_fields(idx)
    }

    /// The span covering `addr`, if any (O(number of spans), first span
    /// first).
    #[inline(always)]
    pub(crate) fn find(&self, addr: usize, page_shift: u32) -> Option<Found> {
        if let Some(f) = self.find_first(addr, page_shift) {
            return Some(f);
        }
        // The other spans out of line, returning an index: a `Found`
        // returned through memory made the free path keep its span there.
        let idx = self.find_rest(addr, page_shift)?;
        Some(self.get_fields(idx))
    }

    /// The index of the span past the first covering `addr`, out of line
    /// (the free path's common case is the first span: one compare).
    #[inline(never)]
    fn find_rest(&self, addr: usize, page_shift: u32) -> Option<usize> {
        let n = self.len();
        let pfn = addr >> page_shift;
        (1..n).find(|&idx| {
            let first = self.info[idx].with(|p| {
                // SAFETY: a published slot, never written again.
                unsafe { (*p).first_pfn }
            });
            pfn.wrapping_sub(first) < self.pages[idx].load(Ordering::Acquire)
        })
    }

    /// Span `idx` (published), its info read field by field (a copy of
    /// the whole `SpanInfo` went through stack temporaries on the free
    /// path, issue #22).
    #[inline(always)]
    fn get_fields(&self, idx: usize) -> Found {
        self.get_with(idx, self.pages[idx].load(Ordering::Acquire))
    }

    /// [`get_fields`](Self::get_fields) with `pages[idx]` already read
    /// (Acquire, nonzero or after `len` covered `idx`).
    #[inline(always)]
    fn get_with(&self, idx: usize, pages: usize) -> Found {
        // SAFETY: slot `idx` is published (caller's contract), never
        // written again.
        let info = self.info[idx].with(|p| unsafe {
            SpanInfo {
                first_pfn: (*p).first_pfn,
                zone_base: (*p).zone_base,
                memmap: (*p).memmap,
                cap_pages: (*p).cap_pages,
                zone: (*p).zone,
            }
        });
        Found { idx, info, pages }
    }

    /// The first span if it covers `addr` (the common case of [`find`](Self::find),
    /// without the loop).
    #[inline(always)]
    pub(crate) fn find_first(&self, addr: usize, page_shift: u32) -> Option<Found> {
        // No `len` check (issue #22): `pages[0]` stays 0 until span 0 is
        // published (its info and `first` written before that Release), and
        // no pfn is in a span of 0 pages; a nonzero value read with Acquire
        // makes the info readable. `start` is `first_pfn << page_shift`, so
        // the index check on `addr >> page_shift` is the whole range check.
        let pages = self.pages[0].load(Ordering::Acquire);
        let first = self.first[0].load(Ordering::Relaxed);
        if (addr >> page_shift).wrapping_sub(first) >= pages {
            return None;
        }
        let mut f = self.get_with(0, pages);
        // The same value, so the callers' index checks fold into this one.
        f.info.first_pfn = first;
        Some(f)
    }

    /// The span whose reserved capacity (not only its populated pages)
    /// covers `addr`.
    pub(crate) fn find_reserved(&self, addr: usize, page_shift: u32) -> Option<Found> {
        let n = self.len();
        let pfn = addr >> page_shift;
        for idx in 0..n {
            let info = self.info(idx);
            if pfn.wrapping_sub(info.first_pfn) < info.cap_pages {
                return Some(self.get(idx));
            }
        }
        None
    }

    /// The lowest span start above `addr` (for carving new spans between
    /// existing ones).
    pub(crate) fn next_start_after(&self, addr: usize, page_shift: u32) -> Option<usize> {
        let n = self.len();
        let mut best: Option<usize> = None;
        for idx in 0..n {
            let s = self.info(idx).start(page_shift);
            if s > addr && best.is_none_or(|b| s < b) {
                best = Some(s);
            }
        }
        best
    }

    /// The hull `[lo, hi)` of the regions added to span `idx` (empty:
    /// `lo >= hi`). Resize lock.
    pub(crate) fn added(&self, idx: usize) -> (usize, usize) {
        (
            self.added_lo[idx].load(Ordering::Relaxed),
            self.added_hi[idx].load(Ordering::Relaxed),
        )
    }

    /// Records that `[a, b)` was added to span `idx`. Resize lock.
    pub(crate) fn note_added(&self, idx: usize, a: usize, b: usize) {
        let (lo, hi) = self.added(idx);
        self.added_lo[idx].store(lo.min(a), Ordering::Relaxed);
        self.added_hi[idx].store(hi.max(b), Ordering::Relaxed);
    }

    /// Whether `[s, e)` overlaps a published span's memmap.
    pub(crate) fn overlaps_memmap(&self, s: usize, e: usize) -> bool {
        let desc = core::mem::size_of::<PageDesc>();
        (0..self.len()).any(|i| {
            let info = self.info(i);
            let ms = info.memmap as usize;
            let me = ms.saturating_add(info.cap_pages.saturating_mul(desc));
            s < me && ms < e
        })
    }

    /// Publishes a new span of node `nid` covering `pages` pages now.
    ///
    /// # Safety
    ///
    /// The caller holds the resize lock; `info.memmap` holds `cap_pages`
    /// initialised descriptors that live as long as the table; the span
    /// overlaps no other; `pages <= info.cap_pages`.
    pub(crate) unsafe fn push(&self, info: SpanInfo, pages: usize, nid: usize) -> Option<usize> {
        let n = self.len.load(Ordering::Relaxed);
        if n == MAX_SPANS {
            return None;
        }
        self.nid[n].store(nid, Ordering::Relaxed);
        self.first[n].store(info.first_pfn, Ordering::Relaxed);
        // SAFETY: slot `n` is not published, and only the resize-lock holder
        // writes slots.
        self.info[n].with_mut(|p| unsafe { *p = info });
        // Release: `find_first` reads slot 0 on a nonzero `pages` alone.
        self.pages[n].store(pages, Ordering::Release);
        self.len.store(n + 1, Ordering::Release);
        Some(n)
    }

    /// Grows span `idx` to `pages` pages.
    ///
    /// # Safety
    ///
    /// The caller holds the resize lock; `pages` is at least the current
    /// value and at most `cap_pages`; the memory and descriptors of the new
    /// pages are valid.
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) unsafe fn grow(&self, idx: usize, pages: usize) {
        debug_assert!(pages >= self.pages[idx].load(Ordering::Relaxed));
        debug_assert!(pages <= self.info(idx).cap_pages);
        self.pages[idx].store(pages, Ordering::Release);
    }
}
