//! A reference model of the buddy and a harness that applies operations to
//! both, checking after every one (`std` + `invariants`, or this crate's
//! tests). The proptest state machine and the cargo-fuzz target drive it.
//!
//! The model is a set of free pages. Because merging is eager, the free
//! blocks of a buddy allocator are a function of that set: every free page
//! lies in the largest naturally aligned block (up to `max_order`, inside
//! one span) whose pages are all free. So after every operation the harness
//! compares the buddy's free lists with that canonical decomposition, block
//! by block, and predicts each allocation's outcome exactly: the zone it
//! comes from (zonelist order, watermark with `lowmem_reserve`, a block of
//! the order existing) or failure.
//!
//! Checked besides: no overlap with live blocks, alignment, contents kept
//! (per-block byte patterns), zeroed and known-zero blocks read as zero,
//! owner words cleared on hand-out and untouched while held, `owner_of`
//! from interior addresses, bad frees rejected with the right
//! [`FreeErrorKind`] and no change, statistics against the model, the
//! invariant checker, and at the end: everything merges back.

#[cfg(feature = "arbitrary")]
pub mod fuzz;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::vec::Vec;

use local_lock::sync::atomic::Ordering;
use local_lock::sync::DWord;
use local_lock::test_platform::TestPlatform;

use crate::{
    AllocFlags, Buddy, Config, FreeErrorKind, FreeFlags, Order, Page, PurgePolicy, Stat, Tunables,
    ZoneId, ZoneSpec, MAX_ZONES,
};

/// The shape of a harness run (values are clamped into range).
///
/// ```
/// use buddy::testing::{Harness, Setup};
/// // Out-of-range values are clamped: 16-byte pages, blocks up to order 6.
/// let h = Harness::new(Setup { page_shift: 0, max_order: 200, ..Setup::default() });
/// assert_eq!(h.buddy().config().page_size(), 16);
/// assert_eq!(h.buddy().config().max_order().get(), 6);
/// h.finish();
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Setup {
    /// log2 of the page size, clamped to `4..=12` (below 8 the memmap is
    /// placed with `add_span`; from 8 it is carved from each region).
    pub page_shift: u8,
    /// `max_order`, clamped to `2..=6`.
    pub max_order: u8,
    /// Two zones (split inside a region) instead of one.
    pub two_zones: bool,
    /// Min watermark as a percentage (0..=20) of the initial memory.
    pub min_free_pct: u8,
    /// `lowmem_reserve_ratio` of zone 0 (0 = none; else clamped to 2..=64).
    pub reserve_ratio: u8,
}

/// One operation.
///
/// ```
/// use buddy::testing::{Harness, Op, Setup};
/// let mut h = Harness::new(Setup { page_shift: 12, max_order: 4, two_zones: true, ..Setup::default() });
/// // A zeroed order-1 block, the region kept back, a cold free, a double free.
/// for op in [
///     Op::Alloc { order: 1, flags: 1, zone: 0 },
///     Op::AddRegion,
///     Op::Free { idx: 0, zero: false, cold: true },
///     Op::BadFree { kind: 4, idx: 0 },
/// ] {
///     h.apply(&op);
/// }
/// assert_eq!((h.ops, h.bad_frees), (4, 1));
/// h.finish();
/// ```
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `alloc_pages(order % (max+1), flags)`; `flags` bits: 1 zeroed,
    /// 2 only-zero, 4 high, 8 non-block, 16 cold, 32 compound, 64 keep the
    /// block zero (do not write a pattern); `zone`: 0 none, else a
    /// constraint to zone `zone - 1`.
    Alloc {
        /// Order (mod max_order + 1).
        order: u8,
        /// Flag bits.
        flags: u8,
        /// Zone constraint.
        zone: u8,
    },
    /// `alloc_bulk(zone, order, flags, count)`.
    AllocBulk {
        /// Zone (mod zones).
        zone: u8,
        /// Order (mod max_order + 1).
        order: u8,
        /// How many (mod 16).
        count: u8,
        /// Flag bits as for `Alloc`.
        flags: u8,
    },
    /// Frees live block `idx % live`; `zero`: clear it first and free it as
    /// still zero; `cold`: to the tail.
    Free {
        /// Which block.
        idx: u16,
        /// Free as zero.
        zero: bool,
        /// Free cold.
        cold: bool,
    },
    /// Frees up to `count` live blocks of `zone` in one `free_bulk`.
    FreeBulk {
        /// Zone (mod zones).
        zone: u8,
        /// How many.
        count: u8,
        /// Mark them still zero (cleared first).
        zero: bool,
    },
    /// `owner_of` an interior address of live block `idx`.
    OwnerOf {
        /// Which block.
        idx: u16,
        /// Byte offset into it (mod its size).
        offset: u32,
    },
    /// A bad free of kind `kind % 10` (0 not owned, 1 misaligned, 2 wrong
    /// order, 3 not head (interior), 4 double free of a free page, 5 not
    /// allocated, 6 huge order, 7 a block tagged as on a per-CPU list
    /// (single and bulk), 8 ABA double free (free a, free b, free a),
    /// 9 a duplicate inside one bulk free), near live block `idx` or free
    /// page `idx`. Each must be refused with the predicted error and leave
    /// the state as the model says.
    BadFree {
        /// Which mistake.
        kind: u8,
        /// Which block or page.
        idx: u16,
    },
    /// Adds the region kept back at setup (once).
    AddRegion,
    /// Adds memory added before (kind `kind % 4`: 0 a whole added region
    /// again, 1 a piece inside one (`at` pages in), 2 one straddling an
    /// added region's end, 3 the memmap): must be refused with
    /// `RegionError::Overlap` and change nothing.
    BadAddRegion {
        /// Which mistake.
        kind: u8,
        /// Which added region, and where in it.
        at: u16,
    },
    /// Sets the min watermark to `pct` percent of managed memory.
    SetMinFree {
        /// Percent (mod 25).
        pct: u8,
    },
    /// A purge pass with a page source that zeroes what it purges (as
    /// `MADV_DONTNEED` does): `trim_with` if `!decay`, else one
    /// `decay_with` scan after advancing the harness clock by `advance` ms
    /// (decay 100 ms, no retained pages). Every block purged must be one of
    /// the model's free blocks at or above the purge order (one below the
    /// largest); after a trim none of them is resident (all known zero).
    Purge {
        /// A decay scan instead of a trim.
        decay: bool,
        /// Clock advance (ms) before a decay scan.
        advance: u8,
    },
    /// Frees the `idx`-th live block (mod count) through
    /// `BuddySource::free_or_release` with a page source that zeroes what
    /// it purges: a block at or above the release order (the purge order)
    /// is purged before it is freed (and then known zero, counted as a
    /// purge), a smaller one freed as before.
    FreeRelease {
        /// Index into the live blocks.
        idx: u16,
    },
}

/// The page source of [`Op::FreeRelease`]: the harness's buddy, purging by
/// zeroing (what `MADV_DONTNEED` leaves behind).
struct Zeroing<'a>(&'a Buddy<TestPlatform>);

impl crate::BuddySource for Zeroing<'_> {
    type P = TestPlatform;
    fn buddy(&self) -> &Buddy<TestPlatform> {
        self.0
    }
    fn purge(&self, block: NonNull<u8>, bytes: usize) -> bool {
        // SAFETY: the caller holds the block (`free_or_release` checked it),
        // `bytes` long.
        unsafe { block.as_ptr().write_bytes(0, bytes) };
        true
    }
}

/// A live block in the model.
#[derive(Clone, Copy, Debug)]
struct Live {
    page: Page,
    zone: ZoneId,
    /// Byte pattern written into it (0: it reads as zero).
    pattern: u8,
    /// Value stored in its owner words.
    id: usize,
}

/// A region of the arena, in byte offsets.
#[derive(Clone, Copy, Debug)]
struct Region {
    start: usize,
    end: usize,
    zeroed: bool,
}

/// The harness: a real buddy over an arena, and the model.
///
/// ```
/// use buddy::testing::{Harness, Op, Setup};
/// use buddy::ZoneId;
/// let mut h = Harness::new(Setup { page_shift: 12, max_order: 3, min_free_pct: 5, ..Setup::default() });
/// let free = h.buddy().nr_free_pages(ZoneId::new(0));
/// // Checked against the model after each: free lists, contents, owner words.
/// h.apply(&Op::AllocBulk { zone: 0, order: 0, count: 8, flags: 0 });
/// assert_eq!(h.buddy().nr_free_pages(ZoneId::new(0)), free - 8);
/// h.apply(&Op::FreeBulk { zone: 0, count: 8, zero: false });
/// h.apply(&Op::Purge { decay: false, advance: 0 });
/// // Frees what is left and checks that everything merged back.
/// h.finish();
/// ```
pub struct Harness {
    buddy: Buddy<TestPlatform>,
    arena: *mut u8,
    arena_layout: Layout,
    memmap: Option<(*mut u8, Layout)>,
    page_shift: u32,
    max_order: Order,
    zone_split: Option<usize>,
    /// Spans as page ranges `[a, b)` (pfns).
    spans: Vec<(usize, usize)>,
    /// Free pages (pfns).
    free: BTreeSet<usize>,
    /// Managed pages (pfns), for "not allocated" probes.
    managed: BTreeSet<usize>,
    live: Vec<Live>,
    pending: Option<Region>,
    /// Regions added so far.
    added: Vec<Region>,
    next_id: usize,
    carve: bool,
    /// Model counters.
    allocs: u64,
    frees: u64,
    zeroed_requests: u64,
    /// The decay scans' clock (ms).
    clock: u64,
    /// Bytes purged so far (against `Stat::PURGED_BYTES`).
    purged_bytes: u64,
    /// Operations applied.
    pub ops: u64,
    /// Bad frees rejected as predicted.
    pub bad_frees: u64,
    /// Allocations that failed as predicted.
    pub failures: u64,
}

impl Harness {
    const BLOCKS: usize = 8;

    /// A buddy over a fresh arena of 8 largest blocks with three regions
    /// (unaligned edges, holes between them, the second one dirty and
    /// straddling the zone split, the third kept back for
    /// [`Op::AddRegion`]).
    pub fn new(setup: Setup) -> Harness {
        let page_shift = setup.page_shift.clamp(4, 12) as u32;
        let max_order = setup.max_order.clamp(2, 6);
        let page = 1usize << page_shift;
        let block = page << max_order;
        let arena_len = Self::BLOCKS * block;
        let arena_layout = Layout::from_size_align(arena_len, block).unwrap();
        // SAFETY: non-zero size.
        let arena = unsafe { alloc_zeroed(arena_layout) };
        assert!(!arena.is_null());
        let base = arena as usize;
        let zone_split = setup.two_zones.then_some(base + 4 * block);
        let mut cfg = Config::new(page, max_order);
        if let Some(split) = zone_split {
            cfg = cfg.with_zones(&[
                ZoneSpec {
                    name: "Low",
                    end: split,
                },
                ZoneSpec {
                    name: "High",
                    end: usize::MAX,
                },
            ]);
        }
        let ratio = if setup.reserve_ratio == 0 {
            0
        } else {
            setup.reserve_ratio.clamp(2, 64) as usize
        };
        cfg = cfg.with_tunables(Tunables {
            min_free_kbytes: Some(0),
            watermark_scale_factor: 10,
            lowmem_reserve_ratio: [ratio; MAX_ZONES],
        });
        cfg = cfg.with_purge(PurgePolicy {
            order: max_order - 1,
            decay_ms: Some(100),
            retain_pages: Some(0),
            release_order: Some(max_order - 1),
            max_resident_pages: None,
            resident_shift: None,
        });
        let buddy = Buddy::new(TestPlatform::pinned(1), cfg);
        let carve = page_shift >= 8;
        let r0 = Region {
            start: page + 5,
            end: 3 * block - 2 * page + 3,
            zeroed: true,
        };
        let r1 = Region {
            start: 3 * block + 3 * page,
            end: 6 * block,
            zeroed: false,
        };
        let r2 = Region {
            start: 6 * block + 2 * page,
            end: 8 * block - page,
            zeroed: true,
        };
        let mut h = Harness {
            buddy,
            arena,
            arena_layout,
            memmap: None,
            page_shift,
            max_order: Order::new(max_order).unwrap(),
            zone_split,
            spans: Vec::new(),
            free: BTreeSet::new(),
            managed: BTreeSet::new(),
            live: Vec::new(),
            pending: Some(r2),
            added: Vec::new(),
            next_id: 1,
            carve,
            allocs: 0,
            frees: 0,
            zeroed_requests: 0,
            ops: 0,
            bad_frees: 0,
            failures: 0,
            clock: 0,
            purged_bytes: 0,
        };
        if !carve {
            let mm_len = h.buddy.memmap_bytes(arena_len);
            let l = Layout::from_size_align(mm_len, Buddy::<TestPlatform>::MEMMAP_ALIGN).unwrap();
            // SAFETY: non-zero size.
            let mm = unsafe { alloc_zeroed(l) };
            assert!(!mm.is_null());
            // SAFETY: the arena and the memmap are ours for the harness's
            // life.
            unsafe { h.buddy.add_span(arena, arena_len, mm, true) }.unwrap();
            h.memmap = Some((mm, l));
            h.spans
                .push((base >> page_shift, (base + arena_len) >> page_shift));
        }
        h.add(r0);
        // Dirty the second region first: its blocks must not be marked zero
        // and its memmap (if carved) must be cleared.
        // SAFETY: inside the arena, not yet given to the buddy.
        unsafe { arena.add(r1.start).write_bytes(0xAA, r1.end - r1.start) };
        h.add(r1);
        let total = h.buddy.total_managed_pages();
        let min_kb = (total << page_shift) * setup.min_free_pct.min(20) as usize / 100 / 1024;
        h.buddy.set_tunables(Tunables {
            min_free_kbytes: Some(min_kb),
            ..h.buddy.tunables()
        });
        h.check();
        h
    }

    /// The buddy under test.
    pub fn buddy(&self) -> &Buddy<TestPlatform> {
        &self.buddy
    }

    fn add(&mut self, r: Region) {
        let page = 1usize << self.page_shift;
        let base = self.arena as usize;
        let s = (base + r.start).next_multiple_of(page);
        let e = (base + r.end) & !(page - 1);
        let free_start = if self.carve {
            self.spans
                .push((s >> self.page_shift, e >> self.page_shift));
            let mm = s.next_multiple_of(Buddy::<TestPlatform>::MEMMAP_ALIGN);
            (mm + self.buddy.memmap_bytes(e - s)).next_multiple_of(page)
        } else {
            s
        };
        // SAFETY: inside the arena, given once.
        let added = unsafe {
            self.buddy
                .add_region(self.arena.add(r.start), r.end - r.start, r.zeroed)
        }
        .expect("add_region");
        let pages: Vec<usize> = (free_start >> self.page_shift..e >> self.page_shift).collect();
        assert_eq!(added, pages.len(), "add_region: pages added");
        self.added.push(r);
        self.free.extend(pages.iter().copied());
        self.managed.extend(pages);
    }

    fn zone_of_pfn(&self, pfn: usize) -> ZoneId {
        match self.zone_split {
            Some(s) if (pfn << self.page_shift) >= s => ZoneId::new(1),
            Some(_) => ZoneId::new(0),
            None => ZoneId::new(0),
        }
    }

    fn nr_zones(&self) -> usize {
        if self.zone_split.is_some() {
            2
        } else {
            1
        }
    }

    /// The canonical free blocks of the model: `(pfn, order)`, sorted.
    fn canonical(&self) -> Vec<(usize, u8)> {
        let mut out = Vec::new();
        let max = self.max_order.get() as u32;
        let mut it = self.free.iter().copied().peekable();
        while let Some(a) = it.next() {
            // Maximal run of free pages inside one span.
            let span_end = self
                .spans
                .iter()
                .find(|(s, e)| a >= *s && a < *e)
                .map(|(_, e)| *e)
                .expect("free page outside every span");
            let mut b = a + 1;
            while b < span_end && it.peek() == Some(&b) {
                it.next();
                b += 1;
            }
            let mut p = a;
            while p < b {
                let align = if p == 0 { max } else { p.trailing_zeros() };
                let fit = usize::BITS - 1 - (b - p).leading_zeros();
                let k = align.min(fit).min(max);
                out.push((p, k as u8));
                p += 1 << k;
            }
        }
        out
    }

    fn actual(&self) -> Vec<(usize, u8)> {
        let mut v = Vec::new();
        for z in 0..self.nr_zones() {
            self.buddy.for_each_free_block(ZoneId::new(z), |a, o, _| {
                v.push((a >> self.page_shift, o.get()))
            });
        }
        v.sort_unstable();
        v
    }

    fn model_free_in(&self, zone: ZoneId) -> usize {
        self.free
            .iter()
            .filter(|&&p| self.zone_of_pfn(p) == zone)
            .count()
    }

    /// Checks the buddy against the model.
    fn check(&self) {
        self.buddy.check_invariants();
        assert_eq!(
            self.actual(),
            self.canonical(),
            "free blocks differ from the model"
        );
        for z in 0..self.nr_zones() {
            let zone = ZoneId::new(z);
            assert_eq!(
                self.buddy.nr_free_pages(zone),
                self.model_free_in(zone),
                "zone {z} free pages"
            );
        }
        #[cfg(feature = "stats")]
        assert_eq!(self.buddy.stat(Stat::ALLOC), self.allocs, "alloc count");
        #[cfg(feature = "stats")]
        assert_eq!(self.buddy.stat(Stat::FREE), self.frees, "free count");
        assert_eq!(self.buddy.stat(Stat::ZEROED_REQUEST), self.zeroed_requests);
        assert_eq!(self.buddy.stat(Stat::PURGED_BYTES), self.purged_bytes);
        assert_eq!(
            self.buddy.stat(Stat::ZEROED_NO_CLEAR) + self.buddy.stat(Stat::ZEROED_CLEARED),
            self.zeroed_requests
        );
    }

    fn flags_of(&self, bits: u8, zone: u8) -> AllocFlags {
        let mut f = AllocFlags::NONE;
        if bits & 1 != 0 {
            f |= AllocFlags::ZEROED;
        }
        if bits & 2 != 0 {
            f |= AllocFlags::ONLY_ZERO;
        }
        if bits & 4 != 0 {
            f |= AllocFlags::HIGH;
        }
        if bits & 8 != 0 {
            f |= AllocFlags::NONBLOCK;
        }
        if bits & 16 != 0 {
            f |= AllocFlags::COLD;
        }
        if bits & 32 != 0 {
            f |= AllocFlags::COMP;
        }
        if bits & 128 != 0 {
            f |= AllocFlags::MEMALLOC;
        }
        if zone != 0 {
            let z = (zone as usize - 1) % self.nr_zones();
            f |= AllocFlags::NONE.zone_max(ZoneId::new(z));
        }
        f
    }

    /// Whether the model's zone `z` passes the watermark `mark` (0: low,
    /// 1: min with the HIGH/NONBLOCK reductions, 2: none) and has a block
    /// of at least `order` (with `free` pages and canonical blocks `blocks`).
    fn zone_can(
        &self,
        z: usize,
        order: Order,
        flags: AllocFlags,
        highest: usize,
        blocks: &[(usize, u8)],
        mark: u8,
    ) -> bool {
        let info = self.buddy.zone_info(ZoneId::new(z));
        let free = self.model_free_in(ZoneId::new(z)) as isize;
        let mut min = info.watermarks.min as isize;
        if flags.contains(AllocFlags::HIGH) {
            min -= min / 2;
        }
        if flags.contains(AllocFlags::NONBLOCK) && !flags.contains(AllocFlags::NOMEMALLOC) {
            min -= min / 4;
        }
        if mark == 0 {
            min = info.watermarks.low as isize;
        }
        let wm = mark == 2
            || free - (order.pages() as isize - 1) > min + info.lowmem_reserve[highest] as isize;
        wm && blocks
            .iter()
            .any(|&(p, k)| k >= order.get() && self.zone_of_pfn(p).index() == z)
    }

    fn order_of(&self, o: u8) -> Order {
        Order::new(o % (self.max_order.get() + 1)).unwrap()
    }

    fn size_of(&self, o: Order) -> usize {
        o.pages() << self.page_shift
    }

    /// Takes a freshly allocated block into the model, checking it.
    fn take(&mut self, page: Page, want: Order, flags: AllocFlags, keep_zero: bool) -> ZoneId {
        assert_eq!(page.order, want);
        let a = page.addr();
        assert_eq!(a % self.size_of(want), 0, "block {a:#x} misaligned");
        let pfn = a >> self.page_shift;
        for p in pfn..pfn + want.pages() {
            assert!(
                self.free.remove(&p),
                "block {a:#x} overlaps a live block or unmanaged page {p:#x}"
            );
        }
        let zone = self.zone_of_pfn(pfn);
        assert_eq!(self.zone_of_pfn(pfn + want.pages() - 1), zone);
        let size = self.size_of(want);
        // SAFETY: the block is ours.
        let bytes = unsafe { std::slice::from_raw_parts_mut(page.ptr.as_ptr(), size) };
        if flags.contains(AllocFlags::ZEROED) || page.zero {
            assert!(
                bytes.iter().all(|&b| b == 0),
                "zeroed/known-zero block {a:#x} not zero"
            );
        }
        let owner = self
            .buddy
            .owner_of(page.ptr.as_ptr())
            .expect("owner_of head");
        assert_eq!(owner.head, page.ptr);
        assert_eq!(owner.order, want);
        let o = owner.owner;
        assert_eq!(
            o.pair().load(Ordering::Relaxed),
            DWord::new(0, 0),
            "owner words not cleared"
        );
        assert_eq!(o.data().load(Ordering::Relaxed), 0);
        assert_eq!(o.link().load(Ordering::Relaxed), 0);
        assert_eq!(o.tag().load(Ordering::Relaxed), 0);
        let id = self.next_id;
        self.next_id += 1;
        o.pair().store(DWord::new(id, !id), Ordering::Relaxed);
        o.data().store(id, Ordering::Relaxed);
        o.link().store(id ^ 0x5a5a, Ordering::Relaxed);
        o.tag().store(id as u32, Ordering::Relaxed);
        let zeroish = keep_zero && (flags.contains(AllocFlags::ZEROED) || page.zero);
        let pattern = if zeroish { 0 } else { (id % 251 + 1) as u8 };
        if pattern != 0 {
            bytes.fill(pattern);
        }
        self.live.push(Live {
            page,
            zone,
            pattern,
            id,
        });
        self.allocs += 1;
        zone
    }

    /// Checks a live block's contents and owner words, and forgets it.
    fn release(&mut self, i: usize, zero: bool) -> Live {
        let l = self.live.swap_remove(i);
        let size = self.size_of(l.page.order);
        // SAFETY: the block is ours.
        let bytes = unsafe { std::slice::from_raw_parts_mut(l.page.ptr.as_ptr(), size) };
        assert!(
            bytes.iter().all(|&b| b == l.pattern),
            "block {:p} contents changed",
            l.page.ptr
        );
        let o = self.buddy.owner_of(l.page.ptr.as_ptr()).unwrap().owner;
        assert_eq!(o.pair().load(Ordering::Relaxed), DWord::new(l.id, !l.id));
        assert_eq!(
            o.data().load(Ordering::Relaxed),
            l.id,
            "owner words changed while held"
        );
        assert_eq!(o.link().load(Ordering::Relaxed), l.id ^ 0x5a5a);
        assert_eq!(o.tag().load(Ordering::Relaxed), l.id as u32);
        if zero && l.pattern != 0 {
            bytes.fill(0);
        }
        let pfn = l.page.addr() >> self.page_shift;
        for p in pfn..pfn + l.page.order.pages() {
            assert!(self.free.insert(p));
        }
        self.frees += 1;
        l
    }

    /// Applies one operation and checks everything.
    pub fn apply(&mut self, op: &Op) {
        self.ops += 1;
        match *op {
            Op::Alloc { order, flags, zone } => self.op_alloc(order, flags, zone),
            Op::AllocBulk {
                zone,
                order,
                count,
                flags,
            } => self.op_alloc_bulk(zone, order, count, flags),
            Op::Free { idx, zero, cold } => {
                if self.live.is_empty() {
                    return;
                }
                let i = idx as usize % self.live.len();
                let l = self.release(i, zero);
                let mut ff = FreeFlags::NONE;
                if zero {
                    ff = ff | FreeFlags::ZERO;
                }
                if cold {
                    ff = ff | FreeFlags::COLD;
                }
                // SAFETY: the model's block, given up.
                unsafe { self.buddy.free_pages_flags(l.page.ptr, l.page.order, ff) };
            }
            Op::FreeBulk { zone, count, zero } => {
                let z = ZoneId::new(zone as usize % self.nr_zones());
                let mut pages = Vec::new();
                let mut i = 0;
                while i < self.live.len() && pages.len() < count as usize {
                    if self.live[i].zone == z {
                        let l = self.release(i, zero);
                        // Not zero: the `Page` as handed out, whose `zero`
                        // may still say true though the block was written
                        // (`free_bulk` must not believe it).
                        pages.push(if zero {
                            Page { zero, ..l.page }
                        } else {
                            l.page
                        });
                    } else {
                        i += 1;
                    }
                }
                let n = pages.len();
                // SAFETY: the model's blocks, given up; with `zero`, cleared
                // by `release`.
                let freed = unsafe {
                    if zero {
                        self.buddy.free_bulk_keep_zero(z, pages)
                    } else {
                        self.buddy.free_bulk(z, pages)
                    }
                };
                assert_eq!(freed, n);
            }
            Op::OwnerOf { idx, offset } => {
                if self.live.is_empty() {
                    return;
                }
                let l = self.live[idx as usize % self.live.len()];
                let size = self.size_of(l.page.order);
                let a = l.page.ptr.as_ptr().wrapping_add(offset as usize % size);
                let r = self.buddy.owner_of(a).expect("owner_of interior address");
                assert_eq!(r.head, l.page.ptr);
                assert_eq!(r.order, l.page.order);
                assert_eq!(r.owner.data().load(Ordering::Relaxed), l.id);
            }
            Op::BadFree { kind, idx } => self.op_bad_free(kind, idx),
            Op::AddRegion => {
                if let Some(r) = self.pending.take() {
                    self.add(r);
                }
            }
            Op::BadAddRegion { kind, at } => self.op_bad_add_region(kind, at),
            Op::SetMinFree { pct } => {
                let total = self.buddy.total_managed_pages();
                let kb = (total << self.page_shift) * (pct % 25) as usize / 100 / 1024;
                self.buddy.set_tunables(Tunables {
                    min_free_kbytes: Some(kb),
                    ..self.buddy.tunables()
                });
            }
            Op::Purge { decay, advance } => self.op_purge(decay, advance),
            Op::FreeRelease { idx } => {
                if self.live.is_empty() {
                    return;
                }
                let i = idx as usize % self.live.len();
                let l = self.release(i, false);
                let order = l.page.order;
                let released = self
                    .buddy
                    .config()
                    .release_order()
                    .is_some_and(|r| order >= r);
                let purges = self.buddy.stat(Stat::PURGE);
                // SAFETY: the model's block, given up.
                unsafe {
                    crate::BuddySource::free_or_release(
                        &Zeroing(&self.buddy),
                        l.page.ptr,
                        order,
                        FreeFlags::NONE,
                    )
                }
                .expect("free_or_release of a live block");
                assert_eq!(
                    self.buddy.stat(Stat::PURGE),
                    purges + released as u64,
                    "released at once iff at or above the release order"
                );
                if released {
                    self.purged_bytes += self.size_of(order) as u64;
                }
            }
        }
        self.check();
    }

    fn op_purge(&mut self, decay: bool, advance: u8) {
        let blocks: BTreeSet<(usize, u8)> = self.canonical().into_iter().collect();
        let min = self.buddy.config().purge_order();
        let shift = self.page_shift;
        let mut seen = 0usize;
        let purge = |p: NonNull<u8>, n: usize| {
            let pfn = p.as_ptr() as usize >> shift;
            let o = (n >> shift).trailing_zeros() as u8;
            assert!(
                o >= min.get() && blocks.contains(&(pfn, o)),
                "purged {p:p} ({n} bytes): not a free block of the model at or above {min}"
            );
            // SAFETY: a free block the pass took off the lists.
            unsafe { p.as_ptr().write_bytes(0, n) };
            seen += n;
            true
        };
        let bytes = if decay {
            self.clock += advance as u64;
            self.buddy.decay_with(self.clock, purge)
        } else {
            self.buddy.trim_with(purge)
        };
        assert_eq!(bytes, seen);
        self.purged_bytes += bytes as u64;
        if !decay {
            for z in 0..self.nr_zones() {
                self.buddy
                    .for_each_free_block(ZoneId::new(z), |a, o, zero| {
                        assert!(
                            o < min || zero,
                            "free block {a:#x} ({o}) left resident by a trim"
                        );
                    });
            }
        }
    }

    fn op_alloc(&mut self, order: u8, bits: u8, zone: u8) {
        let order = self.order_of(order);
        let flags = self.flags_of(bits, zone);
        let highest = flags
            .max_zone()
            .map_or(self.nr_zones() - 1, |z| z.index().min(self.nr_zones() - 1));
        let blocks = self.canonical();
        // get_page_from_freelist: the low pass (when there is a zone to
        // fall back to), the min pass, then MEMALLOC's no-watermark pass.
        let memalloc = flags.contains(AllocFlags::MEMALLOC);
        let can_at = |m: u8| -> Vec<bool> {
            (0..self.nr_zones())
                .map(|z| z <= highest && self.zone_can(z, order, flags, highest, &blocks, m))
                .collect()
        };
        let low = if highest > 0 {
            can_at(0)
        } else {
            std::vec![false; highest + 1]
        };
        let can = can_at(if memalloc { 2 } else { 1 });
        let min = can_at(1);
        let expect = [&low, &min, &can]
            .iter()
            .find_map(|c| (0..=highest).rev().find(|&z| c[z]));
        let cleared_before = self.buddy.stat(Stat::BYTES_CLEARED);
        let noclear_before = self.buddy.stat(Stat::ZEROED_NO_CLEAR);
        let r = self.buddy.alloc_pages(order, flags);
        let only_zero = flags.contains(AllocFlags::ONLY_ZERO);
        match r {
            Some(page) => {
                let z = self.take(page, order, flags, bits & 64 != 0);
                if only_zero {
                    assert!(
                        can[z.index()],
                        "ONLY_ZERO served by a zone that could not serve it"
                    );
                    assert_eq!(
                        self.buddy.stat(Stat::BYTES_CLEARED),
                        cleared_before,
                        "ONLY_ZERO cleared"
                    );
                } else {
                    assert_eq!(Some(z.index()), expect, "served by the wrong zone");
                }
                if flags.contains(AllocFlags::ZEROED) {
                    self.zeroed_requests += 1;
                    let cleared = self.buddy.stat(Stat::BYTES_CLEARED) - cleared_before;
                    assert!(cleared as usize <= self.size_of(order));
                    let noclear = self.buddy.stat(Stat::ZEROED_NO_CLEAR) - noclear_before;
                    assert_eq!(noclear == 1, cleared == 0);
                }
            }
            None => {
                self.failures += 1;
                if !only_zero {
                    assert_eq!(
                        expect, None,
                        "allocation failed though zone {expect:?} could serve it"
                    );
                }
            }
        }
    }

    fn op_alloc_bulk(&mut self, zone: u8, order: u8, count: u8, bits: u8) {
        let z = ZoneId::new(zone as usize % self.nr_zones());
        let order = self.order_of(order);
        let flags =
            self.flags_of(bits, 0) | AllocFlags::NONE.zone_max(ZoneId::new(self.nr_zones() - 1));
        let count = (count % 16) as usize;
        let mut got = Vec::new();
        let n = self
            .buddy
            .alloc_bulk(z, order, flags, count, |p| got.push(p));
        assert_eq!(n, got.len());
        assert!(n <= count);
        for p in got {
            let zz = self.take(p, order, AllocFlags::NONE, bits & 64 != 0);
            assert_eq!(zz, z, "bulk block from another zone");
            if flags.contains(AllocFlags::ONLY_ZERO) {
                assert!(p.zero, "ONLY_ZERO bulk block not known zero");
            }
        }
        if n < count && !flags.contains(AllocFlags::ONLY_ZERO) {
            let blocks = self.canonical();
            let highest = self.nr_zones() - 1;
            assert!(
                !self.zone_can(z.index(), order, flags, highest, &blocks, 1),
                "bulk stopped early though the zone could serve more"
            );
        }
    }

    fn op_bad_add_region(&mut self, kind: u8, at: u16) {
        if self.added.is_empty() {
            return;
        }
        let page = 1usize << self.page_shift;
        let r = self.added[at as usize % self.added.len()];
        let s = r.start.next_multiple_of(page);
        let e = r.end & !(page - 1);
        let pages = (e - s) / page;
        let (start, len): (*mut u8, usize) = match kind % 4 {
            0 => (self.arena.wrapping_add(r.start), r.end - r.start),
            1 => {
                let k = at as usize % (pages - 1);
                (self.arena.wrapping_add(s + k * page), 2 * page)
            }
            2 => (self.arena.wrapping_add(e - 2 * page), 3 * page),
            _ => match self.memmap {
                Some((mm, l)) => (mm, l.size()),
                // Carved: the memmap is the region's first pages.
                None => (self.arena.wrapping_add(s), page),
            },
        };
        let before = self.actual();
        let managed = self.buddy.total_managed_pages();
        // SAFETY: refused before anything is touched (that is what is
        // checked); the memory is the harness's.
        let r = unsafe { self.buddy.add_region(start, len, false) };
        assert_eq!(
            r,
            Err(crate::RegionError::Overlap),
            "re-adding {start:p} + {len:#x} (kind {kind}) not refused"
        );
        assert_eq!(
            self.actual(),
            before,
            "a refused add changed the free lists"
        );
        assert_eq!(self.buddy.total_managed_pages(), managed);
    }

    /// Bad frees that need more than one call (kinds 6..=9 of
    /// [`Op::BadFree`]); true if `kind` was one of them.
    fn op_bad_free_multi(&mut self, kind: u8, idx: u16) -> bool {
        match kind % 10 {
            6 => {
                // Huge order: above max_order, up to the largest there is.
                let Some(l) = self.pick_live(idx) else {
                    return true;
                };
                let max = self.max_order.get();
                let span = crate::ORDER_LIMIT - max;
                let huge = Order::new(max + 1 + (idx as u8 % span)).unwrap();
                let before = self.actual();
                // SAFETY: refused (checked).
                let e = unsafe { self.buddy.try_free_pages(l.page.ptr, huge, FreeFlags::NONE) }
                    .expect_err("free with a huge order accepted");
                assert_eq!(e.kind, FreeErrorKind::BadOrder, "{e}");
                assert!(self.buddy.alloc_pages(huge, AllocFlags::NONE).is_none());
                assert_eq!(self.actual(), before);
            }
            7 => {
                // A block that sits on a per-CPU list (pcp's owner tag).
                let Some(l) = self.pick_live(idx) else {
                    return true;
                };
                let o = self.buddy.owner_of(l.page.ptr.as_ptr()).unwrap().owner;
                let tag = o.tag().load(Ordering::Relaxed);
                o.tag()
                    .store(crate::PCP_TAG | (idx as u32 & 0xff), Ordering::Relaxed);
                let before = self.actual();
                // SAFETY: refused (checked).
                let e = unsafe {
                    self.buddy
                        .try_free_pages(l.page.ptr, l.page.order, FreeFlags::NONE)
                }
                .expect_err("free of a pcp-listed block accepted");
                assert_eq!(e.kind, FreeErrorKind::OnPcpList, "{e}");
                // SAFETY: refused (checked).
                let e = unsafe { self.buddy.try_free_bulk(l.zone, [l.page]) }
                    .expect_err("bulk free of a pcp-listed block accepted");
                assert_eq!(e.kind, FreeErrorKind::OnPcpList, "{e}");
                assert_eq!(self.actual(), before);
                o.tag().store(tag, Ordering::Relaxed);
            }
            8 => {
                // ABA: free a, free b, free a again.
                if self.live.is_empty() {
                    return true;
                }
                let a = self.release(idx as usize % self.live.len(), false);
                // SAFETY: the model's block, given up.
                unsafe { self.buddy.free_pages(a.page.ptr, a.page.order) };
                if !self.live.is_empty() {
                    let b = self.release((idx as usize / 7) % self.live.len(), false);
                    // SAFETY: as above.
                    unsafe { self.buddy.free_pages(b.page.ptr, b.page.order) };
                }
                let before = self.actual();
                // SAFETY: refused (checked).
                let e = unsafe {
                    self.buddy
                        .try_free_pages(a.page.ptr, a.page.order, FreeFlags::NONE)
                }
                .expect_err("ABA double free accepted");
                assert!(matches!(e.kind, FreeErrorKind::DoubleFree { .. }), "{e}");
                assert_eq!(self.actual(), before);
            }
            9 => {
                // The same block twice in one bulk free: the first is freed,
                // the second refused.
                if self.live.is_empty() {
                    return true;
                }
                let a = self.release(idx as usize % self.live.len(), false);
                // SAFETY: the model's block, given up once; the duplicate is
                // refused (checked).
                let e = unsafe { self.buddy.try_free_bulk(a.zone, [a.page, a.page]) }
                    .expect_err("duplicate in a bulk free accepted");
                assert!(matches!(e.kind, FreeErrorKind::DoubleFree { .. }), "{e}");
            }
            _ => return false,
        }
        self.bad_frees += 1;
        true
    }

    fn op_bad_free(&mut self, kind: u8, idx: u16) {
        if self.op_bad_free_multi(kind, idx) {
            return;
        }
        let page = 1usize << self.page_shift;
        let before = self.actual();
        let (addr, order, want): (usize, Order, fn(FreeErrorKind) -> bool) = match kind % 10 {
            0 => (
                self.arena as usize + Self::BLOCKS * (page << self.max_order.get()) + 64 * page,
                Order::ZERO,
                |k| k == FreeErrorKind::NotOwned,
            ),
            1 => {
                let Some(l) = self.pick_live(idx) else { return };
                (l.page.addr() + page / 2, Order::ZERO, |k| {
                    k == FreeErrorKind::Misaligned
                })
            }
            2 => {
                let Some(l) = self.pick_live(idx) else { return };
                if l.page.order == Order::ZERO {
                    return;
                }
                (l.page.addr(), Order::ZERO, |k| {
                    matches!(k, FreeErrorKind::WrongOrder { .. })
                })
            }
            3 => {
                let Some(l) = self.pick_live(idx) else { return };
                if l.page.order == Order::ZERO {
                    return;
                }
                (l.page.addr() + page, Order::ZERO, |k| {
                    matches!(k, FreeErrorKind::NotHead { .. })
                })
            }
            4 => {
                if self.free.is_empty() {
                    return;
                }
                let p = *self
                    .free
                    .iter()
                    .nth(idx as usize % self.free.len())
                    .unwrap();
                (p << self.page_shift, Order::ZERO, |k| {
                    matches!(k, FreeErrorKind::DoubleFree { .. })
                })
            }
            _ => {
                // A page in a span that is not managed (memmap or hole).
                let span_pages: Vec<usize> = self
                    .spans
                    .iter()
                    .flat_map(|&(a, b)| a..b)
                    .filter(|p| !self.managed.contains(p))
                    .collect();
                if span_pages.is_empty() {
                    return;
                }
                let p = span_pages[idx as usize % span_pages.len()];
                (p << self.page_shift, Order::ZERO, |k| {
                    k == FreeErrorKind::NotAllocated
                })
            }
        };
        // An address only: a rejected free never dereferences it.
        let ptr = NonNull::new(std::ptr::without_provenance_mut(addr)).unwrap();
        // SAFETY: a bad free is rejected (that is what is checked); the
        // addresses never head a live block of that order.
        let r = unsafe { self.buddy.try_free_pages(ptr, order, FreeFlags::NONE) };
        let e = r.expect_err("bad free accepted");
        assert!(want(e.kind), "bad free {addr:#x}: unexpected {e}");
        assert_eq!(e.addr, addr);
        assert_eq!(
            self.actual(),
            before,
            "rejected free changed the free lists"
        );
        self.bad_frees += 1;
    }

    fn pick_live(&self, idx: u16) -> Option<Live> {
        if self.live.is_empty() {
            None
        } else {
            Some(self.live[idx as usize % self.live.len()])
        }
    }

    /// Frees everything and checks that all memory merged back into the
    /// canonical (largest possible) blocks, and that every whole,
    /// fully-managed largest block is one free block.
    pub fn finish(mut self) {
        while !self.live.is_empty() {
            let l = self.release(self.live.len() - 1, false);
            // SAFETY: the model's block, given up.
            unsafe { self.buddy.free_pages(l.page.ptr, l.page.order) };
        }
        self.check();
        assert_eq!(self.free, self.managed, "pages lost");
        let max = self.max_order.get();
        let actual = self.actual();
        let bp = 1usize << max;
        let first = self.arena as usize >> self.page_shift;
        for b in 0..Self::BLOCKS {
            let p = first + b * bp;
            let whole = (p..p + bp).all(|q| self.managed.contains(&q))
                && self.spans.iter().any(|&(s, e)| p >= s && p + bp <= e);
            if whole {
                assert!(
                    actual.contains(&(p, max)),
                    "largest block {b} did not merge back"
                );
            }
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts; the buddy is not
        // used after this (it is dropped with the harness and owns nothing).
        unsafe {
            dealloc(self.arena, self.arena_layout);
            if let Some((mm, l)) = self.memmap {
                dealloc(mm, l);
            }
        }
    }
}
