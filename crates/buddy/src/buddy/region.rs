//! Memory for the allocator: spans (address ranges with a memmap),
//! regions added to them ([`Buddy::add_region`], [`Buddy::add_span`]) and the
//! std heap's reserved spans that grow; fresh memory goes to the free lists
//! in the largest aligned blocks.

use local_lock::sync::atomic::Ordering;
use local_lock::Platform;

use super::Buddy;
use local_lock::bits::checked_align_up;

use crate::desc::KIND_NONE;
use crate::desc::{kind, PageDesc, ZERO_FULL};
use crate::error::RegionError;
use crate::span::{Found, SpanInfo, MAX_SPANS};
use crate::types::{Order, MAX_NUMNODES};

impl<P: Platform> Buddy<P> {
    /// Bytes of memmap a span of `len` bytes needs (one descriptor per
    /// page), for [`add_span`](Self::add_span).
    pub fn memmap_bytes(&self, len: usize) -> usize {
        (len >> self.cfg.page_shift()) * core::mem::size_of::<PageDesc>()
    }

    /// Alignment a memmap needs.
    pub const MEMMAP_ALIGN: usize = core::mem::align_of::<PageDesc>();

    /// Adds the memory `[start, start + len)` to the free lists of the
    /// zones its addresses belong to, and returns how many pages it added.
    /// Unaligned edges are trimmed to whole pages; blocks are the largest
    /// naturally aligned ones that fit (fresh memory goes to the tails of
    /// the lists and merges with free neighbours).
    ///
    /// Parts that lie inside an existing span use its memmap. Other parts
    /// become new spans whose memmap is carved from their own start (about
    /// `64 / PAGE_SIZE` of the part). `zeroed`: the memory reads as zero
    /// (fresh `mmap`, memory the firmware cleared); its blocks are marked
    /// PG_zero and a carved memmap needs no clearing.
    ///
    /// Regions may be added at any time, concurrently with allocation.
    ///
    /// # Errors
    ///
    /// Nothing is added on error. [`RegionError::Overlap`] if any page of
    /// the region was added before (the same region twice, or an
    /// overlapping one) or the region holds a span's memmap;
    /// [`RegionError::Unpopulated`], [`TooSmall`](RegionError::TooSmall),
    /// [`TooManySpans`](RegionError::TooManySpans),
    /// [`Overflow`](RegionError::Overflow) as described there.
    ///
    /// # Safety
    ///
    /// The memory is valid for reads and writes for as long as the
    /// allocator lives, nobody else uses it, and, if `zeroed`, it reads as
    /// zero. (A region added before is refused, not a safety matter.)
    pub unsafe fn add_region(
        &self,
        start: *mut u8,
        len: usize,
        zeroed: bool,
    ) -> Result<usize, RegionError> {
        // SAFETY: caller's contract.
        unsafe { self.add_region_node(0, start, len, zeroed) }
    }

    /// [`add_region`](Self::add_region) for NUMA node `nid`: the memory
    /// goes to the free lists of node `nid`'s zones (memblock's node id of
    /// a memory range, e.g. a device tree's `numa-node-id`). New spans are
    /// node `nid`'s; parts inside an existing span must lie in a span of
    /// `nid` (a span's pages are all of one node). The node then has
    /// memory: every node's zonelist is rebuilt (`build_all_zonelists`).
    ///
    /// # Errors
    ///
    /// As [`add_region`](Self::add_region), and [`RegionError::BadNode`] if
    /// `nid >= MAX_NUMNODES` or a part lies in another node's span.
    ///
    /// # Safety
    ///
    /// As [`add_region`](Self::add_region).
    pub unsafe fn add_region_node(
        &self,
        nid: usize,
        start: *mut u8,
        len: usize,
        zeroed: bool,
    ) -> Result<usize, RegionError> {
        if nid >= MAX_NUMNODES {
            return Err(RegionError::BadNode);
        }
        let tunables = self.lock_resize();
        // SAFETY: caller's contract; the resize lock is held.
        let r = unsafe { self.add_region_locked(nid, start, len, zeroed) };
        if r.is_ok() {
            self.node_set_memory(nid);
            self.setup_zones(&tunables);
        }
        r
    }

    /// Declares the span `[start, start + len)` (page aligned) with its
    /// memmap at `memmap` ([`memmap_bytes(len)`](Self::memmap_bytes) bytes,
    /// aligned to [`MEMMAP_ALIGN`](Self::MEMMAP_ALIGN)), for callers that
    /// place the memmap themselves (the kernel's `memblock_alloc` of
    /// `mem_map`). Its memory is added later with
    /// [`add_region`](Self::add_region); holes are pages never added.
    ///
    /// # Safety
    ///
    /// `memmap` is valid for reads and writes of `memmap_bytes(len)` bytes
    /// for as long as the allocator lives and used by nothing else (in
    /// particular it is never added as a region); if `memmap_zeroed`, it
    /// reads as zero.
    pub unsafe fn add_span(
        &self,
        start: *mut u8,
        len: usize,
        memmap: *mut u8,
        memmap_zeroed: bool,
    ) -> Result<(), RegionError> {
        // SAFETY: caller's contract.
        unsafe { self.add_span_node(0, start, len, memmap, memmap_zeroed) }
    }

    /// [`add_span`](Self::add_span) for NUMA node `nid`: every page of the
    /// span is node `nid`'s (add its memory with
    /// [`add_region_node`](Self::add_region_node)`(nid, ..)`).
    ///
    /// # Errors
    ///
    /// As [`add_span`](Self::add_span), and [`RegionError::BadNode`] if
    /// `nid >= MAX_NUMNODES`.
    ///
    /// # Safety
    ///
    /// As [`add_span`](Self::add_span).
    pub unsafe fn add_span_node(
        &self,
        nid: usize,
        start: *mut u8,
        len: usize,
        memmap: *mut u8,
        memmap_zeroed: bool,
    ) -> Result<(), RegionError> {
        if nid >= MAX_NUMNODES {
            return Err(RegionError::BadNode);
        }
        let page = self.cfg.page_size();
        let s = start as usize;
        if !s.is_multiple_of(page) || !len.is_multiple_of(page) || len == 0 {
            return Err(RegionError::BadSpan);
        }
        if !(memmap as usize).is_multiple_of(Self::MEMMAP_ALIGN) {
            return Err(RegionError::BadSpan);
        }
        let end = s.checked_add(len).ok_or(RegionError::Overflow)?;
        let _g = self.lock_resize();
        if self.overlaps(s, end) {
            return Err(RegionError::Overlap);
        }
        let pages = len >> self.cfg.page_shift();
        let mm = memmap as *mut PageDesc;
        if !memmap_zeroed || cfg!(loom) {
            // SAFETY: caller's contract.
            unsafe { PageDesc::init_range(mm, pages) };
        }
        let info = SpanInfo::new(&self.cfg, nid, s >> self.cfg.page_shift(), mm, pages);
        // SAFETY: resize lock held; memmap initialised; no overlap.
        unsafe { self.spans.push(info, pages, nid) }
            .map(|_| ())
            .ok_or(RegionError::TooManySpans)
    }

    /// A span with room for `cap_pages` pages of which none is populated
    /// yet (a std heap reserving its address range), grown by
    /// [`grow_span`](Self::grow_span). Returns its index.
    ///
    /// # Safety
    ///
    /// `start` is page aligned; `memmap` (aligned) will hold valid
    /// descriptors for every page before `grow_span` covers it, for as long
    /// as the allocator lives; the range overlaps no span.
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) unsafe fn add_reserved_span(
        &self,
        start: *mut u8,
        cap_pages: usize,
        memmap: *mut u8,
    ) -> Option<usize> {
        let _g = self.lock_resize();
        let s = start as usize;
        let info = SpanInfo::new(
            &self.cfg,
            0,
            s >> self.cfg.page_shift(),
            memmap as *mut PageDesc,
            cap_pages,
        );
        // SAFETY: caller's contract; resize lock held.
        unsafe { self.spans.push(info, 0, 0) }
    }

    /// Grows span `idx` to `pages` populated pages.
    ///
    /// # Safety
    ///
    /// As for [`SpanTable::grow`] (minus the lock, taken here).
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) unsafe fn grow_span(&self, idx: usize, pages: usize) {
        let _g = self.lock_resize();
        // SAFETY: caller's contract; resize lock held.
        unsafe { self.spans.grow(idx, pages) }
    }

    /// Whether `[s, e)` overlaps a span's reserved range.
    fn overlaps(&self, s: usize, e: usize) -> bool {
        let shift = self.cfg.page_shift();
        (0..self.spans.len()).any(|i| {
            let f = self.spans.get(i);
            let fs = f.info.start(shift);
            let fe = fs + (f.info.cap_pages << shift);
            s < fe && fs < e
        })
    }

    /// # Safety
    ///
    /// As for `add_region`; the resize lock is held.
    unsafe fn add_region_locked(
        &self,
        nid: usize,
        start: *mut u8,
        len: usize,
        zeroed: bool,
    ) -> Result<usize, RegionError> {
        let page = self.cfg.page_size();
        let shift = self.cfg.page_shift();
        let base = start as usize;
        let end = base.checked_add(len).ok_or(RegionError::Overflow)?;
        let s = checked_align_up(base, page).ok_or(RegionError::Overflow)?;
        let e = end & !(page - 1);
        if s >= e {
            return Err(RegionError::TooSmall);
        }
        // A region must not hold a memmap (a carved span's, or one placed
        // by `add_span`): its descriptors are not memory to hand out.
        if self.spans.overlaps_memmap(s, e) {
            return Err(RegionError::Overlap);
        }
        // Plan: pieces inside existing spans, and gaps that become new spans
        // carving their memmap from their own start. Validate everything
        // before changing anything.
        #[derive(Clone, Copy)]
        struct Piece {
            start: usize,
            end: usize,
            span: Option<usize>,
        }
        const MAX_PIECES: usize = 2 * MAX_SPANS + 1;
        let mut plan = [Piece {
            start: 0,
            end: 0,
            span: None,
        }; MAX_PIECES];
        let mut n = 0;
        let mut new_spans = 0;
        let desc_size = core::mem::size_of::<PageDesc>();
        let mut cur = s;
        while cur < e {
            if n == MAX_PIECES {
                return Err(RegionError::TooManySpans);
            }
            if let Some(f) = self.spans.find_reserved(cur, shift) {
                let cap_end = (f.info.first_pfn + f.info.cap_pages) << shift;
                let pe = e.min(cap_end);
                if pe > f.end(shift) {
                    return Err(RegionError::Unpopulated);
                }
                if self.spans.nid(f.idx) != nid {
                    return Err(RegionError::BadNode);
                }
                if self.already_added(&f, cur, pe) {
                    return Err(RegionError::Overlap);
                }
                plan[n] = Piece {
                    start: cur,
                    end: pe,
                    span: Some(f.idx),
                };
                cur = pe;
            } else {
                let ne = e.min(
                    self.spans
                        .next_start_after(cur, shift)
                        .unwrap_or(usize::MAX),
                );
                let pages = (ne - cur) >> shift;
                let mm = checked_align_up(cur, Self::MEMMAP_ALIGN).ok_or(RegionError::Overflow)?;
                let mm_end = pages
                    .checked_mul(desc_size)
                    .and_then(|b| mm.checked_add(b))
                    .ok_or(RegionError::Overflow)?;
                let free_start = checked_align_up(mm_end, page).ok_or(RegionError::Overflow)?;
                if free_start >= ne {
                    return Err(RegionError::TooSmall);
                }
                plan[n] = Piece {
                    start: cur,
                    end: ne,
                    span: None,
                };
                new_spans += 1;
                cur = ne;
            }
            n += 1;
        }
        if self.spans.len() + new_spans > MAX_SPANS {
            return Err(RegionError::TooManySpans);
        }
        // Apply.
        let ptr_at = |addr: usize| start.wrapping_add(addr - base);
        let mut added = 0;
        for piece in &plan[..n] {
            match piece.span {
                Some(idx) => {
                    let f = self.spans.get(idx);
                    // SAFETY: caller's contract; the piece lies in the
                    // populated part of span `idx`.
                    added += unsafe {
                        self.free_range(&f, ptr_at(piece.start), piece.start, piece.end, zeroed)
                    };
                    self.spans.note_added(idx, piece.start, piece.end);
                }
                None => {
                    let pages = (piece.end - piece.start) >> shift;
                    let mm_addr =
                        checked_align_up(piece.start, Self::MEMMAP_ALIGN).unwrap_or(piece.start);
                    let mm = ptr_at(mm_addr) as *mut PageDesc;
                    if !zeroed || cfg!(loom) {
                        // SAFETY: the memmap lies inside the caller's region
                        // (checked in the plan), which nobody else uses.
                        unsafe { PageDesc::init_range(mm, pages) };
                    }
                    let info = SpanInfo::new(&self.cfg, nid, piece.start >> shift, mm, pages);
                    // SAFETY: resize lock held; memmap initialised; the piece
                    // overlaps no span (planned in a gap); room checked.
                    let idx = unsafe { self.spans.push(info, pages, nid) }
                        .ok_or(RegionError::TooManySpans)?;
                    // The whole span is in use: its memmap, then its pages.
                    self.spans.note_added(idx, piece.start, piece.end);
                    let f = self.spans.get(idx);
                    let free_start =
                        checked_align_up(mm_addr + pages * desc_size, page).unwrap_or(piece.end);
                    // SAFETY: caller's contract; the free part follows the
                    // memmap inside the new span.
                    added += unsafe {
                        self.free_range(&f, ptr_at(free_start), free_start, piece.end, zeroed)
                    };
                }
            }
        }
        Ok(added)
    }

    /// Whether any page of `[a, b)` (page aligned, in the populated part
    /// of span `f`) was added before: it heads a block, lies in a block
    /// that starts before `a`, or is a (stamped) tail. Pages never added
    /// keep their all-zero descriptors, and added pages always lie in a
    /// free or allocated block, whose head is either in the range or the
    /// block covering `a`. Only the part inside the hull of the regions
    /// added to the span so far is scanned (none for a heap that grows at
    /// its end). Resize lock held; reads under the zone locks.
    fn already_added(&self, f: &Found, a: usize, b: usize) -> bool {
        let (lo, hi) = self.spans.added(f.idx);
        let (a, b) = (a.max(lo), b.min(hi));
        if a >= b {
            return false;
        }
        let shift = self.cfg.page_shift();
        let mut cur = a;
        while cur < b {
            let (zi, zend) = self.zone_extent(f, cur);
            let pe = b.min(zend);
            let _g = self.lock_zone(zi);
            if self.covering_head(f, cur >> shift).is_some() {
                return true;
            }
            for pfn in cur >> shift..pe >> shift {
                if f.desc(pfn)
                    .is_some_and(|d| kind(d.load_state()) != KIND_NONE)
                {
                    return true;
                }
            }
            cur = pe;
        }
        false
    }

    /// The zone of `addr` (a page of span `f`) and the end of its type's
    /// address range.
    fn zone_extent(&self, f: &Found, addr: usize) -> (usize, usize) {
        let t = self.cfg.zone_of_addr(addr).index();
        let end = if t + 1 == self.cfg.nr_zones() {
            usize::MAX
        } else {
            self.cfg.zones()[t].end
        };
        (f.info.zone_base + t, end)
    }

    /// Frees the pages `[a, b)` of span `f` (first byte `p`) as fresh
    /// memory, split at zone boundaries, in the largest aligned blocks.
    ///
    /// # Safety
    ///
    /// The range lies in the populated part of `f`, is page aligned, holds
    /// memory the allocator may use, and none of it is on a free list or
    /// allocated.
    unsafe fn free_range(
        &self,
        f: &Found,
        p: *mut u8,
        mut a: usize,
        b: usize,
        zeroed: bool,
    ) -> usize {
        let shift = self.cfg.page_shift();
        let max = self.cfg.max_order();
        let base = a;
        let mut total = 0;
        while a < b {
            let (zi, zend) = self.zone_extent(f, a);
            let pe = b.min(zend);
            let mut pfn = a >> shift;
            let end_pfn = pe >> shift;
            let pages = end_pfn - pfn;
            let mut g = self.lock_zone(zi);
            while pfn < end_pfn {
                let align = if pfn == 0 {
                    max.get() as u32
                } else {
                    pfn.trailing_zeros()
                };
                let fit = usize::BITS - 1 - (end_pfn - pfn).leading_zeros();
                let o =
                    Order::new(align.min(fit).min(max.get() as u32) as u8).unwrap_or(Order::ZERO);
                let Some(d) = f.desc_ptr(pfn) else { break };
                let bp = p.wrapping_add((pfn << shift) - base);
                let zero = if zeroed { ZERO_FULL } else { 0 };
                // SAFETY: caller's contract: a fresh block of this zone in
                // span `f`, on no list; zone lock held. Its head's `aux`
                // gets its first byte, as `free_one` wants.
                unsafe {
                    (*d).aux.store(bp, Ordering::Relaxed);
                    (*d).clear_owner_for_free();
                    g.free_one(&self.cfg, f, d, pfn, o, zero, true)
                };
                pfn += o.pages();
            }
            g.managed += pages;
            drop(g);
            self.zones[zi].managed.fetch_add(pages, Ordering::Relaxed);
            total += pages;
            a = pe;
        }
        total
    }
}
