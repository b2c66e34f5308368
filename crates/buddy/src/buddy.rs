//! [`Buddy`]: the zoned page allocator (public API: memory, allocation,
//! free, bulk, owner words, observability).

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use local_lock::bits::checked_align_up;
use local_lock::sync::atomic::Ordering;
use local_lock::sync::{SpinLock, SpinLockGuard};
use local_lock::{IrqFlags, Platform};

use crate::desc::{
    is_pcp_tag, kind, order_of, Owner, PageDesc, KIND_ALLOC, KIND_FREE, KIND_TAIL, ZERO_FULL,
};
use crate::desc::{KIND_NONE, ZERO_HI, ZERO_LO};
use crate::error::{FreeError, FreeErrorKind, RegionError};
use crate::span::{Found, SpanInfo, SpanTable, MAX_SPANS};
use crate::types::{
    AllocFlags, Config, FreeFlags, Order, Page, Pfn, Stat, Tunables, Watermarks, ZoneId, MAX_ZONES,
    ORDER_SLOTS,
};
use crate::zone::{Taken, Zone, ZoneInner};

/// The zoned buddy allocator over platform `P` (see the crate docs for the
/// design, the lock order and the invariants).
///
/// Built empty by a `const fn`; memory comes from
/// [`add_region`](Self::add_region) (and [`add_span`](Self::add_span) for
/// a memmap placed by the caller).
pub struct Buddy<P> {
    /// Interrupts are saved around every zone-lock hold.
    platform: P,
    /// Page size, orders, zones.
    cfg: Config,
    /// The zones, lowest addresses first.
    zones: [Zone; MAX_ZONES],
    /// Address ranges with a memmap.
    spans: SpanTable,
    /// The resize lock: serialises span creation, region addition and
    /// watermark setup (protects the tunables it holds, and the `managed`
    /// counts). Outside every zone lock.
    resize: SpinLock<Tunables>,
}

/// An allocated block found from an address inside it
/// ([`Buddy::owner_of`]).
#[derive(Clone, Copy, Debug)]
pub struct BlockRef<'a> {
    /// The block's first byte.
    pub head: NonNull<u8>,
    /// The block's order.
    pub order: Order,
    /// The block's owner words.
    pub owner: &'a Owner,
}

/// What the buddy thinks of a page ([`Buddy::page_state`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PageState {
    /// No span covers the address.
    Unmanaged,
    /// The page heads a free block.
    Free {
        /// The free block's order.
        order: Order,
        /// Whether it is known to read as zero.
        zero: bool,
    },
    /// The page heads an allocated block (pages on a pcp list are
    /// allocated from the buddy's point of view).
    Allocated {
        /// The block's order.
        order: Order,
    },
    /// The page is managed (a span covers it) but heads no block: inside a
    /// block, in a hole or in a memmap.
    Inside,
}

/// A snapshot of one zone (`/proc/zoneinfo`-style), taken under its lock.
#[derive(Clone, Copy, Debug)]
pub struct ZoneInfo {
    /// The zone.
    pub zone: ZoneId,
    /// Its name.
    pub name: &'static str,
    /// Pages given to it.
    pub managed: usize,
    /// Pages on its free lists.
    pub free: usize,
    /// Its watermarks.
    pub watermarks: Watermarks,
    /// `lowmem_reserve[j]`.
    pub lowmem_reserve: [usize; MAX_ZONES],
    /// Free blocks per order (both lists).
    pub free_blocks: [usize; ORDER_SLOTS],
    /// Of those, known-zero blocks per order.
    pub zero_blocks: [usize; ORDER_SLOTS],
    /// Event counters, indexed by [`Stat`].
    pub stats: [u64; Stat::COUNT],
    /// The allocator's largest order.
    pub max_order: Order,
}

impl ZoneInfo {
    /// A counter.
    pub fn stat(&self, s: Stat) -> u64 {
        self.stats[s as usize]
    }
}

impl fmt::Display for ZoneInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.max_order.index();
        writeln!(f, "Node 0, zone {:>8}", self.name)?;
        writeln!(f, "  pages free     {}", self.free)?;
        writeln!(f, "        min      {}", self.watermarks.min)?;
        writeln!(f, "        low      {}", self.watermarks.low)?;
        writeln!(f, "        high     {}", self.watermarks.high)?;
        writeln!(f, "        managed  {}", self.managed)?;
        write!(f, "        protection: (")?;
        for (i, r) in self.lowmem_reserve.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        writeln!(f, ")")?;
        write!(f, "  free blocks   ")?;
        for o in 0..=m {
            write!(f, " {:>6}", self.free_blocks[o])?;
        }
        writeln!(f)?;
        write!(f, "  of them zero  ")?;
        for o in 0..=m {
            write!(f, " {:>6}", self.zero_blocks[o])?;
        }
        writeln!(f)?;
        for s in Stat::ALL {
            writeln!(f, "  {:<16} {}", s.name(), self.stats[*s as usize])?;
        }
        Ok(())
    }
}

/// The zone lock, held with IRQs saved (`spin_lock_irqsave`); releases the
/// lock, then restores IRQs, on drop. `!Send`.
pub(crate) struct ZoneGuard<'a, P: Platform> {
    inner: ManuallyDrop<SpinLockGuard<'a, ZoneInner>>,
    platform: &'a P,
    flags: IrqFlags,
    _not_send: PhantomData<*mut ()>,
}

impl<P: Platform> Deref for ZoneGuard<'_, P> {
    type Target = ZoneInner;
    #[inline(always)]
    fn deref(&self) -> &ZoneInner {
        &self.inner
    }
}

impl<P: Platform> DerefMut for ZoneGuard<'_, P> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut ZoneInner {
        &mut self.inner
    }
}

impl<P: Platform> Drop for ZoneGuard<'_, P> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here.
        unsafe { ManuallyDrop::drop(&mut self.inner) };
        // SAFETY: `flags` came from the `irq_save` in `lock_zone` on this
        // CPU, and this restore comes after every later save was restored
        // (guards nest).
        unsafe { self.platform.irq_restore(self.flags) };
    }
}

/// The range `(offset, len)` of an order-`order` block to clear for a
/// zeroed request, given which halves are known zero: only the non-zero
/// part.
#[inline(always)]
fn clear_range(zero: u32, order: Order, page_shift: u32) -> (usize, usize) {
    let size = order.pages() << page_shift;
    match zero {
        ZERO_FULL => (0, 0),
        ZERO_LO if order > Order::ZERO => (size / 2, size / 2),
        ZERO_HI if order > Order::ZERO => (0, size / 2),
        _ => (0, size),
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn bad_free(e: FreeError) -> ! {
    panic!("{e}")
}

impl<P: Platform> Buddy<P> {
    local_lock::const_fn! {
        /// An empty allocator (no memory yet) over `platform`, shaped by
        /// `config`.
        pub fn new(platform: P, config: Config) -> Self {
            #[cfg(not(loom))]
            let zones = [const { Zone::new() }; MAX_ZONES];
            #[cfg(loom)]
            let zones = core::array::from_fn(|_| Zone::new());
            Buddy {
                platform,
                cfg: config,
                zones,
                spans: SpanTable::new(),
                resize: SpinLock::new(config.tunables()),
            }
        }
    }

    /// The configuration.
    #[inline(always)]
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The platform.
    #[inline(always)]
    pub fn platform(&self) -> &P {
        &self.platform
    }

    // --- locks ---------------------------------------------------------------

    /// `spin_lock_irqsave(&zone->lock)`.
    #[inline(always)]
    pub(crate) fn lock_zone(&self, zone: usize) -> ZoneGuard<'_, P> {
        let flags = self.platform.irq_save();
        let lock = &*self.zones[zone].lock;
        #[cfg(not(loom))]
        let inner = match lock.try_lock() {
            Some(g) => g,
            None => self.lock_zone_slow(lock),
        };
        #[cfg(loom)]
        let inner = lock.lock();
        ZoneGuard {
            inner: ManuallyDrop::new(inner),
            platform: &self.platform,
            flags,
            _not_send: PhantomData,
        }
    }

    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn lock_zone_slow<'a>(&self, lock: &'a SpinLock<ZoneInner>) -> SpinLockGuard<'a, ZoneInner> {
        let backoff = local_lock::sync::Backoff::new();
        loop {
            self.platform.spin_wait(&backoff);
            if let Some(g) = lock.try_lock() {
                return g;
            }
        }
    }

    fn lock_resize(&self) -> SpinLockGuard<'_, Tunables> {
        #[cfg(not(loom))]
        {
            let backoff = local_lock::sync::Backoff::new();
            loop {
                if let Some(g) = self.resize.try_lock() {
                    return g;
                }
                self.platform.spin_wait(&backoff);
            }
        }
        #[cfg(loom)]
        self.resize.lock()
    }

    // --- memory --------------------------------------------------------------

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
        let tunables = self.lock_resize();
        // SAFETY: caller's contract; the resize lock is held.
        let r = unsafe { self.add_region_locked(start, len, zeroed) };
        if r.is_ok() {
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
        let info = SpanInfo {
            start: s,
            first_pfn: s >> self.cfg.page_shift(),
            memmap: mm,
            cap_pages: pages,
        };
        // SAFETY: resize lock held; memmap initialised; no overlap.
        unsafe { self.spans.push(info, pages) }
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
        let info = SpanInfo {
            start: s,
            first_pfn: s >> self.cfg.page_shift(),
            memmap: memmap as *mut PageDesc,
            cap_pages,
        };
        // SAFETY: caller's contract; resize lock held.
        unsafe { self.spans.push(info, 0) }
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
            let fs = f.info.start;
            let fe = fs + (f.info.cap_pages << shift);
            s < fe && fs < e
        })
    }

    /// # Safety
    ///
    /// As for `add_region`; the resize lock is held.
    unsafe fn add_region_locked(
        &self,
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
                let cap_end = f.info.start + (f.info.cap_pages << shift);
                let pe = e.min(cap_end);
                if pe > f.end(shift) {
                    return Err(RegionError::Unpopulated);
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
                let ne = e.min(self.spans.next_start_after(cur).unwrap_or(usize::MAX));
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
                    let info = SpanInfo {
                        start: piece.start,
                        first_pfn: piece.start >> shift,
                        memmap: mm,
                        cap_pages: pages,
                    };
                    // SAFETY: resize lock held; memmap initialised; the piece
                    // overlaps no span (planned in a gap); room checked.
                    let idx =
                        unsafe { self.spans.push(info, pages) }.ok_or(RegionError::TooManySpans)?;
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
            let zi = self.cfg.zone_of_addr(cur).index();
            let zend = if zi + 1 == self.cfg.nr_zones() {
                usize::MAX
            } else {
                self.cfg.zones()[zi].end
            };
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
            let z = self.cfg.zone_of_addr(a);
            let zi = z.index();
            let zend = if zi + 1 == self.cfg.nr_zones() {
                usize::MAX
            } else {
                self.cfg.zones()[zi].end
            };
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
                // span `f`, on no list; zone lock held.
                unsafe { g.free_one(&self.cfg, f, d, bp, pfn, o, zero, true) };
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

    /// `setup_per_zone_wmarks` + `setup_per_zone_lowmem_reserve`: the
    /// kernel's formulas from the zones' managed sizes and the tunables.
    fn setup_zones(&self, t: &Tunables) {
        let nz = self.cfg.nr_zones();
        let mut managed = [0usize; MAX_ZONES];
        for (z, m) in managed.iter_mut().enumerate().take(nz) {
            *m = self.zones[z].managed.load(Ordering::Relaxed);
        }
        let total: usize = managed.iter().sum();
        let page = self.cfg.page_size() as u128;
        let min_kbytes = match t.min_free_kbytes {
            Some(k) => k as u128,
            None => {
                let kb = total as u128 * page / 1024;
                int_sqrt(kb * 16).clamp(128, 262_144)
            }
        };
        let pages_min = min_kbytes * 1024 / page;
        for z in 0..nz {
            let m = managed[z] as u128;
            let min = if total == 0 {
                0
            } else {
                pages_min * m / total as u128
            };
            let tmp = (min / 4).max(m * t.watermark_scale_factor as u128 / 10_000);
            let sat = |v: u128| v.min(usize::MAX as u128) as usize;
            let wm = Watermarks {
                min: sat(min),
                low: sat(min + tmp),
                high: sat(min + 2 * tmp),
            };
            let mut reserve = [0usize; MAX_ZONES];
            let ratio = t.lowmem_reserve_ratio[z];
            let clear = ratio == 0 || managed[z] == 0;
            let mut acc = 0usize;
            for j in z + 1..nz {
                acc += managed[j];
                reserve[j] = if clear { 0 } else { acc / ratio };
            }
            let mut g = self.lock_zone(z);
            g.wmark = wm;
            g.lowmem_reserve = reserve;
            drop(g);
            let w = &self.zones[z].wmark;
            w[0].store(wm.min, Ordering::Relaxed);
            w[1].store(wm.low, Ordering::Relaxed);
            w[2].store(wm.high, Ordering::Relaxed);
        }
    }

    /// The current tunables.
    pub fn tunables(&self) -> Tunables {
        *self.lock_resize()
    }

    /// Changes the tunables (`sysctl vm.*`) and recomputes watermarks and
    /// reserves.
    pub fn set_tunables(&self, t: Tunables) {
        let mut g = self.lock_resize();
        *g = t;
        self.setup_zones(&g);
    }

    // --- allocation ----------------------------------------------------------

    /// The highest zone a request may use.
    #[inline(always)]
    fn highest_zone(&self, flags: AllocFlags) -> usize {
        let top = self.cfg.nr_zones() - 1;
        match flags.max_zone() {
            Some(z) => z.index().min(top),
            None => top,
        }
    }

    /// The zones a request tries, in order (`zonelist`): its highest
    /// allowed zone first, then each lower one.
    pub fn zonelist(&self, flags: AllocFlags) -> impl Iterator<Item = ZoneId> {
        (0..=self.highest_zone(flags)).rev().map(ZoneId::new)
    }

    /// Allocates a block of `2^order` pages (`alloc_pages`): the zones of
    /// the request's zonelist in order, each under its lock with IRQs saved,
    /// checking the min watermark (lowered for `HIGH`/`ATOMIC`) plus the
    /// `lowmem_reserve` the request owes lower zones. `None` when no zone can
    /// serve it.
    ///
    /// With [`ZEROED`](AllocFlags::ZEROED) the block reads as zero: a
    /// known-zero block is taken without clearing; otherwise the non-zero
    /// part is cleared, after the lock is dropped.
    #[inline]
    pub fn alloc_pages(&self, order: Order, flags: AllocFlags) -> Option<Page> {
        if order > self.cfg.max_order() {
            return None;
        }
        let highest = self.highest_zone(flags);
        let mut z = highest + 1;
        while z > 0 {
            z -= 1;
            if let Some(p) = self.alloc_from(z, order, flags, highest) {
                return Some(p);
            }
        }
        None
    }

    /// Allocates from one zone only (no fallback, e.g. for pcp, which keeps
    /// lists per zone). The watermark applies with the `lowmem_reserve` the
    /// request owes `zone` given its highest allowed zone (from `flags`; no
    /// constraint means the top zone).
    pub fn alloc_pages_zone(&self, zone: ZoneId, order: Order, flags: AllocFlags) -> Option<Page> {
        if order > self.cfg.max_order() || zone.index() >= self.cfg.nr_zones() {
            return None;
        }
        let highest = self.highest_zone(flags).max(zone.index());
        self.alloc_from(zone.index(), order, flags, highest)
    }

    #[inline]
    fn alloc_from(
        &self,
        zone: usize,
        order: Order,
        flags: AllocFlags,
        highest: usize,
    ) -> Option<Page> {
        let mut g = self.lock_zone(zone);
        let t = if g.watermark_ok(order, flags, highest) {
            // SAFETY: zone lock held.
            unsafe { g.rmqueue(&self.cfg, order, flags) }
        } else {
            g.count(Stat::WATERMARK_FAIL, 1);
            None
        };
        let Some(t) = t else {
            g.count(Stat::ZONE_FAIL, 1);
            return None;
        };
        let shift = self.cfg.page_shift();
        let clear = if flags.contains(AllocFlags::ZEROED) {
            let c = clear_range(t.zero, order, shift);
            g.count(Stat::ZEROED_REQUEST, 1);
            if c.1 == 0 {
                g.count(Stat::ZEROED_NO_CLEAR, 1);
            } else {
                g.count(Stat::ZEROED_CLEARED, 1);
                g.count(Stat::BYTES_CLEARED, c.1 as u64);
            }
            c
        } else {
            if t.zero == ZERO_FULL {
                g.count(Stat::ZERO_SPENT, 1);
            }
            (0, 0)
        };
        drop(g);
        Some(self.finish_alloc(t, order, flags, clear))
    }

    /// Outside the lock: clear what must be cleared, stamp tails.
    #[inline(always)]
    fn finish_alloc(
        &self,
        t: Taken,
        order: Order,
        flags: AllocFlags,
        clear: (usize, usize),
    ) -> Page {
        #[cfg(any(test, feature = "invariants"))]
        self.verify_known_zero(t.ptr, t.zero, order);
        if clear.1 != 0 {
            // SAFETY: the block is ours (just allocated) and `clear` lies in
            // it.
            unsafe { ptr::write_bytes(t.ptr.add(clear.0), 0, clear.1) };
        }
        if flags.contains(AllocFlags::COMP) {
            self.stamp_tails(t.desc, t.ptr, order);
        }
        Page {
            // SAFETY: block pointers come from the non-null memory of a span.
            ptr: unsafe { NonNull::new_unchecked(t.ptr) },
            order,
            zero: flags.contains(AllocFlags::ZEROED) || t.zero == ZERO_FULL,
        }
    }

    /// `prep_compound_page` for a block the caller holds (allocated here,
    /// or handed on by a per-CPU list that kept it): stamps its tail
    /// descriptors, so [`owner_of`](Self::owner_of) from any address inside
    /// it is two descriptor reads. What [`AllocFlags::COMP`] does at
    /// allocation, for blocks that did not come straight from the buddy.
    ///
    /// # Panics
    ///
    /// If `ptr` is not the head of an allocated block of `order`.
    pub fn prep_compound(&self, ptr: NonNull<u8>, order: Order) {
        if order == Order::ZERO {
            return;
        }
        let a = ptr.as_ptr() as usize;
        let shift = self.cfg.page_shift();
        let d = self
            .spans
            .find(a, shift)
            .and_then(|f| f.desc_ptr(a >> shift));
        let ok = d.is_some_and(|d| {
            // SAFETY: a descriptor of a span's memmap.
            let s = unsafe { (*d).state.load(Ordering::Acquire) };
            kind(s) == KIND_ALLOC && order_of(s) == order && a & ((1 << shift) - 1) == 0
        });
        match d {
            Some(d) if ok => self.stamp_tails(d, ptr.as_ptr(), order),
            _ => panic!("buddy: prep_compound({ptr:p}, {order}): not the head of an allocated block of that order"),
        }
    }

    /// `prep_compound_page`: every tail descriptor points at the head.
    #[cold]
    fn stamp_tails(&self, desc: *mut PageDesc, head: *mut u8, order: Order) {
        for i in 1..order.pages() {
            // SAFETY: the block's descriptors are contiguous in its span's
            // memmap; its tails are written only by its holder (us).
            let d = unsafe { &*desc.add(i) };
            d.aux.store(head, Ordering::Relaxed);
            d.state.store(KIND_TAIL, Ordering::Release);
        }
    }

    /// Checked builds: the parts of a block handed out as known zero really
    /// read as zero.
    #[cfg(any(test, feature = "invariants"))]
    fn verify_known_zero(&self, p: *mut u8, zero: u32, order: Order) {
        let size = self.cfg.block_size(order);
        let (off, len) = match zero {
            ZERO_FULL => (0, size),
            ZERO_LO if order > Order::ZERO => (0, size / 2),
            ZERO_HI if order > Order::ZERO => (size / 2, size / 2),
            _ => return,
        };
        // SAFETY: the block is ours and `[off, off + len)` lies in it.
        let s = unsafe { core::slice::from_raw_parts(p.add(off), len) };
        assert!(
            s.iter().all(|&b| b == 0),
            "buddy: block at {p:p} ({order}) marked zero (bits {zero:#x}) holds non-zero bytes"
        );
    }

    /// `rmqueue_bulk`: takes up to `max` blocks of `order` from `zone`
    /// under **one** acquisition of its lock, calling `sink` with each (in
    /// address order when split from one larger block; `Page::zero` tells
    /// whether it is known zero). Stops early at the watermark or when the
    /// zone has no block. Returns how many it took.
    ///
    /// `flags`: `ZEROED` prefers known-zero blocks, `ONLY_ZERO` takes only
    /// those; bulk allocation **never clears** (the lock is held). `COLD`,
    /// `COMP`, `HIGH`/`ATOMIC` and the zone constraint work as for
    /// [`alloc_pages`](Self::alloc_pages) (a zone above the constraint gets
    /// nothing).
    ///
    /// `sink` runs under the zone lock with IRQs saved: it must not call
    /// into this allocator (deadlock), and should only link the page (e.g.
    /// into a pcp list through its [`Owner`] words).
    pub fn alloc_bulk(
        &self,
        zone: ZoneId,
        order: Order,
        flags: AllocFlags,
        max: usize,
        mut sink: impl FnMut(Page),
    ) -> usize {
        let highest = self.highest_zone(flags);
        if order > self.cfg.max_order() || zone.index() > highest || max == 0 {
            return 0;
        }
        let mut g = self.lock_zone(zone.index());
        let mut n = 0;
        while n < max {
            if !g.watermark_ok(order, flags, highest) {
                g.count(Stat::WATERMARK_FAIL, 1);
                break;
            }
            // SAFETY: zone lock held.
            let Some(t) = (unsafe { g.rmqueue(&self.cfg, order, flags) }) else {
                break;
            };
            #[cfg(any(test, feature = "invariants"))]
            self.verify_known_zero(t.ptr, t.zero, order);
            if flags.contains(AllocFlags::COMP) {
                self.stamp_tails(t.desc, t.ptr, order);
            }
            sink(Page {
                // SAFETY: block pointers are non-null.
                ptr: unsafe { NonNull::new_unchecked(t.ptr) },
                order,
                zero: t.zero == ZERO_FULL,
            });
            n += 1;
        }
        if n == 0 {
            g.count(Stat::ZONE_FAIL, 1);
        }
        n
    }

    // --- free ----------------------------------------------------------------

    /// Frees a block (`__free_pages`): validated against its descriptor,
    /// merged with free buddies, placed by the kernel's rule.
    ///
    /// # Panics
    ///
    /// With a message naming the address and the problem if the address is
    /// not owned, not a block head, misaligned, of another order, or
    /// already free ([`FreeErrorKind`]); the allocator's state is left
    /// intact.
    ///
    /// # Safety
    ///
    /// The caller holds the block (it came from this allocator with this
    /// order) and will not touch it again.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, FreeFlags::NONE) } {
            bad_free(e)
        }
    }

    /// Frees a block the caller knows still reads as zero: it keeps PG_zero
    /// and serves a later zeroed request without clearing.
    ///
    /// # Panics
    ///
    /// As [`free_pages`](Self::free_pages); checked builds also verify the
    /// block reads as zero.
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages), and the block reads as zero.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages_zeroed(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, FreeFlags::ZERO) } {
            bad_free(e)
        }
    }

    /// Frees a block with [`FreeFlags`] (still zero, cold).
    ///
    /// # Panics
    ///
    /// As [`free_pages`](Self::free_pages).
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages); with `FreeFlags::ZERO`, the
    /// block reads as zero.
    #[inline]
    #[track_caller]
    pub unsafe fn free_pages_flags(&self, ptr: NonNull<u8>, order: Order, flags: FreeFlags) {
        // SAFETY: caller's contract.
        if let Err(e) = unsafe { self.try_free_pages(ptr, order, flags) } {
            bad_free(e)
        }
    }

    /// Frees a block, or says why not (and changes nothing).
    ///
    /// # Safety
    ///
    /// As [`free_pages_flags`](Self::free_pages_flags). A rejected free is
    /// harmless; the contract is about blocks that pass the check (someone
    /// else's block would be freed under them).
    pub unsafe fn try_free_pages(
        &self,
        ptr: NonNull<u8>,
        order: Order,
        flags: FreeFlags,
    ) -> Result<(), FreeError> {
        let addr = ptr.as_ptr() as usize;
        let (found, pfn) = self.locate(addr, order)?;
        let zone = self.cfg.zone_of_addr(addr).index();
        let zero = flags.contains(FreeFlags::ZERO);
        let mut g = self.lock_zone(zone);
        let desc = self.check_free_locked(&found, pfn, addr, order)?;
        #[cfg(any(test, feature = "invariants"))]
        if zero {
            self.verify_zero_free(ptr, order)?;
        }
        g.count(Stat::FREE, 1);
        if zero {
            g.count(Stat::FREE_ZERO, 1);
        }
        // SAFETY: validated: `desc` heads an allocated block of `order` in
        // span `found` and this zone; the caller gives it up.
        unsafe {
            g.free_one(
                &self.cfg,
                &found,
                desc,
                ptr.as_ptr(),
                pfn,
                order,
                if zero { ZERO_FULL } else { 0 },
                flags.contains(FreeFlags::COLD),
            )
        };
        Ok(())
    }

    /// `free_pcppages_bulk`: frees every block `pages` yields into `zone`
    /// under **one** acquisition of its lock. Returns how many it freed.
    ///
    /// Every block is freed as **not known zero**: `Page::zero` is ignored.
    /// A `Page` from [`alloc_bulk`](Self::alloc_bulk) says what the block was
    /// when it was handed out, not what it is after its holder used it, so
    /// handing it back must not make a claim about its contents. A caller
    /// that keeps blocks it knows still read as zero (pcp's zero lists) says
    /// so explicitly with [`free_bulk_keep_zero`](Self::free_bulk_keep_zero).
    ///
    /// The iterator runs under the zone lock with IRQs saved: it must not
    /// call into this allocator.
    ///
    /// # Panics
    ///
    /// On the first bad block ([`FreeErrorKind`], including a block of
    /// another zone), after releasing the lock; the blocks before it are
    /// freed, it and the rest are not.
    ///
    /// # Safety
    ///
    /// As [`free_pages`](Self::free_pages) for every block.
    #[track_caller]
    pub unsafe fn free_bulk<I: IntoIterator<Item = Page>>(&self, zone: ZoneId, pages: I) -> usize {
        // SAFETY: caller's contract.
        match unsafe { self.free_bulk_inner(zone, pages, false) } {
            Ok(n) => n,
            Err(e) => bad_free(e),
        }
    }

    /// [`free_bulk`](Self::free_bulk) that trusts `Page::zero`: a block
    /// yielded with `zero: true` keeps PG_zero (as
    /// [`free_pages_zeroed`](Self::free_pages_zeroed)) and serves a later
    /// zeroed request without clearing. For a caller that tracks which of
    /// its blocks still read as zero (pcp's zero lists, whose pages nobody
    /// wrote since they were known zero); never for `Page`s passed through
    /// from [`alloc_bulk`](Self::alloc_bulk) after use. Checked builds
    /// (`invariants`) verify each such block reads as zero.
    ///
    /// # Panics
    ///
    /// As [`free_bulk`](Self::free_bulk) (and, in checked builds, on a block
    /// claimed zero that is not).
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk), and every block yielded with
    /// `zero: true` reads as zero.
    #[track_caller]
    pub unsafe fn free_bulk_keep_zero<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> usize {
        // SAFETY: caller's contract.
        match unsafe { self.free_bulk_inner(zone, pages, true) } {
            Ok(n) => n,
            Err(e) => bad_free(e),
        }
    }

    /// [`free_bulk`](Self::free_bulk) that returns the first bad block's
    /// error instead of panicking (the blocks before it are freed). Every
    /// block is freed as not known zero.
    ///
    /// # Safety
    ///
    /// As [`free_bulk`](Self::free_bulk).
    pub unsafe fn try_free_bulk<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> Result<usize, FreeError> {
        // SAFETY: caller's contract.
        unsafe { self.free_bulk_inner(zone, pages, false) }
    }

    /// [`free_bulk_keep_zero`](Self::free_bulk_keep_zero) that returns the
    /// first bad block's error instead of panicking (the blocks before it
    /// are freed).
    ///
    /// # Safety
    ///
    /// As [`free_bulk_keep_zero`](Self::free_bulk_keep_zero).
    pub unsafe fn try_free_bulk_keep_zero<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
    ) -> Result<usize, FreeError> {
        // SAFETY: caller's contract.
        unsafe { self.free_bulk_inner(zone, pages, true) }
    }

    /// The bulk free; `keep_zero`: trust `Page::zero`.
    ///
    /// # Safety
    ///
    /// As [`free_bulk_keep_zero`](Self::free_bulk_keep_zero) if `keep_zero`,
    /// else as [`free_bulk`](Self::free_bulk).
    unsafe fn free_bulk_inner<I: IntoIterator<Item = Page>>(
        &self,
        zone: ZoneId,
        pages: I,
        keep_zero: bool,
    ) -> Result<usize, FreeError> {
        let mut g = self.lock_zone(zone.index());
        let mut n = 0;
        for p in pages {
            let addr = p.addr();
            let zero = keep_zero && p.zero;
            let (found, pfn) = self.locate(addr, p.order)?;
            let actual = self.cfg.zone_of_addr(addr);
            if actual != zone {
                return Err(FreeError {
                    addr,
                    order: p.order.get(),
                    kind: FreeErrorKind::WrongZone {
                        expected: zone,
                        actual,
                    },
                });
            }
            let desc = self.check_free_locked(&found, pfn, addr, p.order)?;
            #[cfg(any(test, feature = "invariants"))]
            if zero {
                self.verify_zero_free(p.ptr, p.order)?;
            }
            g.count(Stat::FREE, 1);
            if zero {
                g.count(Stat::FREE_ZERO, 1);
            }
            // SAFETY: validated as in `try_free_pages`.
            unsafe {
                g.free_one(
                    &self.cfg,
                    &found,
                    desc,
                    p.ptr.as_ptr(),
                    pfn,
                    p.order,
                    if zero { ZERO_FULL } else { 0 },
                    false,
                )
            };
            n += 1;
        }
        Ok(n)
    }

    /// Order, alignment and span checks that need no lock.
    #[inline(always)]
    fn locate(&self, addr: usize, order: Order) -> Result<(Found, usize), FreeError> {
        let err = |kind| FreeError {
            addr,
            order: order.get(),
            kind,
        };
        if order > self.cfg.max_order() {
            return Err(err(FreeErrorKind::BadOrder));
        }
        if addr & (self.cfg.block_size(order) - 1) != 0 {
            return Err(err(FreeErrorKind::Misaligned));
        }
        let shift = self.cfg.page_shift();
        let found = self
            .spans
            .find(addr, shift)
            .ok_or(err(FreeErrorKind::NotOwned))?;
        Ok((found, addr >> shift))
    }

    /// The descriptor check every free does (zone lock held): the address
    /// must head an allocated block of this order.
    #[inline(always)]
    fn check_free_locked(
        &self,
        found: &Found,
        pfn: usize,
        addr: usize,
        order: Order,
    ) -> Result<*mut PageDesc, FreeError> {
        if let Some(d) = found.desc_ptr(pfn) {
            // SAFETY: in the span's memmap.
            let d_ref = unsafe { &*d };
            let s = d_ref.load_state();
            // A page on a per-CPU list is held by the lists, not the caller.
            // The tag shares the state's cache line: one more load.
            if kind(s) == KIND_ALLOC
                && order_of(s) == order
                && !is_pcp_tag(d_ref.tag.load(Ordering::Relaxed))
            {
                return Ok(d);
            }
        }
        Err(self.diagnose_free(found, pfn, addr, order))
    }

    /// Why a free failed the descriptor check (zone lock held).
    #[cold]
    #[inline(never)]
    fn diagnose_free(&self, found: &Found, pfn: usize, addr: usize, order: Order) -> FreeError {
        let shift = self.cfg.page_shift();
        let desc = found.desc(pfn);
        let kind_ = match desc.map(|d| d.load_state()) {
            Some(s)
                if kind(s) == KIND_ALLOC
                    && desc.is_some_and(|d| is_pcp_tag(d.tag.load(Ordering::Relaxed))) =>
            {
                FreeErrorKind::OnPcpList
            }
            Some(s) if kind(s) == KIND_ALLOC => FreeErrorKind::WrongOrder {
                actual: order_of(s),
            },
            Some(s) if kind(s) == KIND_FREE => FreeErrorKind::DoubleFree {
                block: addr,
                order: order_of(s),
            },
            _ => match self.covering_head(found, pfn) {
                Some((h, o, KIND_FREE)) => FreeErrorKind::DoubleFree {
                    block: h << shift,
                    order: o,
                },
                Some((h, o, _)) => FreeErrorKind::NotHead {
                    head: h << shift,
                    order: o,
                },
                None => FreeErrorKind::NotAllocated,
            },
        };
        FreeError {
            addr,
            order: order.get(),
            kind: kind_,
        }
    }

    /// The head (pfn, order, kind) of the free or allocated block that
    /// contains `pfn` as a non-head page, by checking the at most
    /// `max_order` candidate heads `pfn & !(2^k - 1)`: a block of order `k`
    /// containing `pfn` must start there, and only one block can.
    fn covering_head(&self, found: &Found, pfn: usize) -> Option<(usize, Order, u32)> {
        for k in 1..=self.cfg.max_order().get() {
            let o = Order::new(k)?;
            let h = pfn & !(o.pages() - 1);
            let Some(d) = found.desc(h) else { continue };
            let s = d.state.load(Ordering::Acquire);
            let kd = kind(s);
            if (kd == KIND_FREE || kd == KIND_ALLOC) && order_of(s) == o {
                return Some((h, o, kd));
            }
        }
        None
    }

    #[cfg(any(test, feature = "invariants"))]
    fn verify_zero_free(&self, ptr: NonNull<u8>, order: Order) -> Result<(), FreeError> {
        let size = self.cfg.block_size(order);
        // SAFETY: the caller holds the block (validated as allocated).
        let s = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), size) };
        if s.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            Err(FreeError {
                addr: ptr.as_ptr() as usize,
                order: order.get(),
                kind: FreeErrorKind::NotZero,
            })
        }
    }

    // --- owner words ---------------------------------------------------------

    /// The allocated block containing `addr` (any address inside it), its
    /// head, order and owner words: `virt_to_page` + `compound_head`.
    ///
    /// Cost: the span lookup and one descriptor read when `addr` is in the
    /// head page; two for a block allocated with
    /// [`COMP`](AllocFlags::COMP); otherwise at most `max_order` more
    /// descriptor reads (the candidate heads `pfn & !(2^k - 1)`).
    ///
    /// Exact for blocks the caller holds (their descriptors cannot change
    /// under it); for other addresses the answer is a racy snapshot.
    /// `None` if no allocated block contains `addr`.
    #[inline(always)]
    pub fn owner_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        // The common case inline (SLUB's free path asks on every free):
        // the first span, a head page or a tail page of an allocated block.
        let a = addr as usize;
        let shift = self.cfg.page_shift();
        if let Some(found) = self.spans.find_first(a, shift) {
            if let Some(r) = self.owner_in(&found, a, shift) {
                return Some(r);
            }
        }
        self.owner_of_any(a)
    }

    /// The allocated block containing `a` in span `found` when `a`'s page
    /// is its head or a stamped tail (two descriptor reads at most).
    #[inline(always)]
    fn owner_in(&self, found: &Found, a: usize, shift: u32) -> Option<BlockRef<'_>> {
        let d = found.desc(a >> shift)?;
        let s = d.state.load(Ordering::Acquire);
        match kind(s) {
            KIND_ALLOC => Some(BlockRef {
                head: NonNull::new(d.aux.load(Ordering::Relaxed))?,
                order: order_of(s),
                owner: d.owner(),
            }),
            KIND_TAIL => {
                let h = d.aux.load(Ordering::Relaxed) as usize;
                self.block_at(found, h >> shift, a)
            }
            _ => None,
        }
    }

    /// [`owner_of`](Self::owner_of) for any span and the slow cases
    /// (unstamped tails: the candidate heads).
    #[inline(never)]
    fn owner_of_any(&self, a: usize) -> Option<BlockRef<'_>> {
        let shift = self.cfg.page_shift();
        let found = self.spans.find(a, shift)?;
        self.owner_in(&found, a, shift)
            .or_else(|| self.owner_of_slow(&found, a >> shift, a))
    }

    #[cold]
    #[inline(never)]
    fn owner_of_slow(&self, found: &Found, pfn: usize, a: usize) -> Option<BlockRef<'_>> {
        let (h, _, kd) = self.covering_head(found, pfn)?;
        if kd != KIND_ALLOC {
            return None;
        }
        self.block_at(found, h, a)
    }

    /// The allocated block headed at `hpfn` if it contains `a`.
    #[inline(always)]
    fn block_at(&self, found: &Found, hpfn: usize, a: usize) -> Option<BlockRef<'_>> {
        let d = found.desc(hpfn)?;
        let s = d.state.load(Ordering::Acquire);
        if kind(s) != KIND_ALLOC {
            return None;
        }
        let o = order_of(s);
        let head = d.aux.load(Ordering::Relaxed);
        let h = head as usize;
        if a >= h && a - h < self.cfg.block_size(o) {
            Some(BlockRef {
                head: NonNull::new(head)?,
                order: o,
                owner: d.owner(),
            })
        } else {
            None
        }
    }

    /// What the buddy thinks of the page at `addr` (rounded down to its
    /// page), read under the zone lock: for a pcp checker, "is this page
    /// allocated from the buddy's view, and of what order".
    pub fn page_state(&self, addr: *const u8) -> PageState {
        let a = addr as usize;
        let shift = self.cfg.page_shift();
        let Some(found) = self.spans.find(a, shift) else {
            return PageState::Unmanaged;
        };
        let zone = self.cfg.zone_of_addr(a).index();
        let _g = self.lock_zone(zone);
        let Some(d) = found.desc(a >> shift) else {
            return PageState::Unmanaged;
        };
        let s = d.load_state();
        match kind(s) {
            KIND_FREE => PageState::Free {
                order: order_of(s),
                zero: s & ZERO_FULL == ZERO_FULL,
            },
            KIND_ALLOC => PageState::Allocated { order: order_of(s) },
            KIND_NONE | KIND_TAIL => PageState::Inside,
            _ => PageState::Inside,
        }
    }

    // --- observability -------------------------------------------------------

    /// Number of zones.
    #[inline(always)]
    pub fn nr_zones(&self) -> usize {
        self.cfg.nr_zones()
    }

    /// The zone of a managed address (`page_zone`); `None` if no span
    /// covers it.
    #[inline]
    pub fn zone_of(&self, addr: *const u8) -> Option<ZoneId> {
        let a = addr as usize;
        self.spans.find(a, self.cfg.page_shift())?;
        Some(self.cfg.zone_of_addr(a))
    }

    /// Whether a span of this allocator covers `addr`.
    #[inline]
    pub fn owns(&self, addr: *const u8) -> bool {
        self.spans
            .find(addr as usize, self.cfg.page_shift())
            .is_some()
    }

    /// The page frame number of an address.
    #[inline(always)]
    pub fn pfn_of(&self, addr: *const u8) -> Pfn {
        Pfn(addr as usize >> self.cfg.page_shift())
    }

    /// Pages given to `zone` (lock-free; for pcp's batch/high).
    #[inline]
    pub fn managed_pages(&self, zone: ZoneId) -> usize {
        self.zones[zone.index()].managed.load(Ordering::Relaxed)
    }

    /// `zone`'s watermarks (lock-free; for pcp's high).
    #[inline]
    pub fn watermarks(&self, zone: ZoneId) -> Watermarks {
        let w = &self.zones[zone.index()].wmark;
        Watermarks {
            min: w[0].load(Ordering::Relaxed),
            low: w[1].load(Ordering::Relaxed),
            high: w[2].load(Ordering::Relaxed),
        }
    }

    /// Pages on `zone`'s free lists (`NR_FREE_PAGES`).
    pub fn nr_free_pages(&self, zone: ZoneId) -> usize {
        self.lock_zone(zone.index()).free
    }

    /// Pages on all free lists.
    pub fn total_free_pages(&self) -> usize {
        (0..self.nr_zones())
            .map(|z| self.nr_free_pages(ZoneId::new(z)))
            .sum()
    }

    /// Pages given to all zones.
    pub fn total_managed_pages(&self) -> usize {
        (0..self.nr_zones())
            .map(|z| self.managed_pages(ZoneId::new(z)))
            .sum()
    }

    /// Free blocks of `order` in `zone` (a `/proc/buddyinfo` column).
    pub fn free_blocks(&self, zone: ZoneId, order: Order) -> usize {
        let g = self.lock_zone(zone.index());
        let (z, d) = g.nr_free(order);
        z + d
    }

    /// Whether a request could be served by `zone` now, by the watermark
    /// (exact, under the lock; the block search is not included).
    pub fn watermark_ok(&self, zone: ZoneId, order: Order, flags: AllocFlags) -> bool {
        let highest = self.highest_zone(flags).max(zone.index());
        self.lock_zone(zone.index())
            .watermark_ok(order, flags, highest)
    }

    /// A counter summed over the zones.
    pub fn stat(&self, s: Stat) -> u64 {
        (0..self.nr_zones())
            .map(|z| self.lock_zone(z).stats[s as usize])
            .sum()
    }

    /// A snapshot of `zone` (copied under its lock, so printing it never
    /// runs under the lock).
    pub fn zone_info(&self, zone: ZoneId) -> ZoneInfo {
        let g = self.lock_zone(zone.index());
        let mut free_blocks = [0; ORDER_SLOTS];
        let mut zero_blocks = [0; ORDER_SLOTS];
        for o in 0..=self.cfg.max_order().get() {
            let (z, d) = g.nr_free(Order::new(o).unwrap_or(Order::ZERO));
            free_blocks[o as usize] = z + d;
            zero_blocks[o as usize] = z;
        }
        ZoneInfo {
            zone,
            name: self.cfg.zones()[zone.index()].name,
            managed: g.managed,
            free: g.free,
            watermarks: g.wmark,
            lowmem_reserve: g.lowmem_reserve,
            free_blocks,
            zero_blocks,
            stats: g.stats,
            max_order: self.cfg.max_order(),
        }
    }

    /// A `/proc/zoneinfo`-style report of every zone.
    pub fn zoneinfo(&self) -> impl fmt::Display + '_ {
        struct Z<'a, P: Platform>(&'a Buddy<P>);
        impl<P: Platform> fmt::Display for Z<'_, P> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for z in 0..self.0.nr_zones() {
                    fmt::Display::fmt(&self.0.zone_info(ZoneId::new(z)), f)?;
                }
                Ok(())
            }
        }
        Z(self)
    }

    /// Internal access for the checker.
    #[cfg(any(test, loom, feature = "invariants"))]
    pub(crate) fn spans(&self) -> &SpanTable {
        &self.spans
    }
}

/// `/proc/buddyinfo`: one line per zone, free blocks per order.
///
/// ```text
/// Node 0, zone   Normal      1      0      2 ...
/// ```
impl<P: Platform> fmt::Display for Buddy<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in 0..self.nr_zones() {
            let info = self.zone_info(ZoneId::new(z));
            write!(f, "Node 0, zone {:>8}", info.name)?;
            for o in 0..=self.cfg.max_order().index() {
                write!(f, " {:>6}", info.free_blocks[o])?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl<P> fmt::Debug for Buddy<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buddy")
            .field("config", &self.cfg)
            .field("spans", &self.spans.len())
            .finish_non_exhaustive()
    }
}

/// Integer square root (floor).
fn int_sqrt(x: u128) -> u128 {
    if x < 2 {
        return x;
    }
    let mut r = x;
    let mut y = r.div_ceil(2);
    while y < r {
        r = y;
        y = (r + x / r) / 2;
    }
    r
}

/// `GlobalAlloc` for a fixed heap (a no_std kernel's `#[global_allocator]`):
/// every `Layout` rounded up to a block (alignment honoured: blocks are
/// naturally aligned), null when it is larger than the largest block or
/// memory is exhausted. See [`GlobalBuddy`](crate::GlobalBuddy) for a heap
/// that grows from the OS.
///
/// `dealloc` of a bad pointer panics (see [`Buddy::free_pages`]).
// SAFETY: blocks are at least `max(size, align)` rounded up to a power of
// two of pages and naturally aligned, so every returned pointer honours the
// layout; `dealloc` gets back the order `alloc` used (same rounding).
unsafe impl<P: Platform> core::alloc::GlobalAlloc for Buddy<P> {
    #[inline]
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        match self.cfg.order_for(layout.size(), layout.align()) {
            Some(o) => self
                .alloc_pages(o, AllocFlags::NONE)
                .map_or(ptr::null_mut(), |p| p.ptr.as_ptr()),
            None => ptr::null_mut(),
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: core::alloc::Layout) -> *mut u8 {
        match self.cfg.order_for(layout.size(), layout.align()) {
            Some(o) => self
                .alloc_pages(o, AllocFlags::ZEROED)
                .map_or(ptr::null_mut(), |p| p.ptr.as_ptr()),
            None => ptr::null_mut(),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: core::alloc::Layout) {
        let o = self
            .cfg
            .order_for(layout.size(), layout.align())
            .unwrap_or(Order::ZERO);
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: GlobalAlloc's contract: `ptr` came from `alloc` with
            // this layout, hence this order.
            unsafe { self.free_pages(p, o) }
        }
    }
}

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

#[cfg(all(feature = "std", not(loom)))]
impl<P: Platform> Buddy<P> {
    /// Takes the resize lock, then every zone lock (in zone order; nothing
    /// ever holds two), and keeps them: the `prepare` half of a `fork`
    /// handler (the lock order of the crate docs).
    pub fn fork_lock(&self) {
        self.resize.lock_for_fork();
        for z in &self.zones {
            z.lock.lock_for_fork();
        }
    }

    /// Releases the locks taken by [`fork_lock`](Self::fork_lock), in the
    /// parent or in the forked child.
    ///
    /// # Safety
    ///
    /// They were taken by `fork_lock` on this thread (in a child: on the
    /// thread that forked).
    pub unsafe fn fork_unlock(&self) {
        // SAFETY: caller's contract: each is held, its guard forgotten.
        unsafe {
            for z in self.zones.iter().rev() {
                z.lock.force_unlock();
            }
            self.resize.force_unlock();
        }
    }
}
