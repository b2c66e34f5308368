//! [`GlobalBuddy`]: a buddy that grows from the OS, usable as
//! `#[global_allocator]` (feature `std`).
//!
//! # Memory source
//!
//! The first allocation reserves one large virtual range (`PROT_NONE`,
//! `MAP_NORESERVE`: no memory, no commit charge):
//!
//! ```text
//! reservation: [ memmap (PROT_NONE until needed) | (pad, unmapped) | heap (MAX_ORDER-aligned) ... ]
//!                 ^ descriptors of heap pages          ^ span start
//! ```
//!
//! The heap is one span, so address → descriptor stays one subtraction and a
//! shift. Growing maps the next MAX_ORDER-aligned blocks of the heap
//! read-write (`MAP_FIXED` over the reservation: fresh zero pages, so they
//! are added as known-zero), and the memmap pages that describe them (also
//! fresh, and an all-zero descriptor is valid: only descriptors of mapped
//! heap pages cost memory). When a reservation is full, another one becomes
//! a new span. Under a finite `RLIMIT_AS` (reservations count against it)
//! a reservation is sized to the heap so far, at most a sixteenth of the
//! limit, so the rest stays available to direct mappings and the program;
//! the alignment pad is unmapped again. A refused reservation is retried by
//! later requests (each tries only the smallest reservation that serves it
//! until one succeeds): growth resumes once memory is freed or limits are
//! raised.
//!
//! When no reservation can be made (the address space left is too small
//! or fragmented), a request that fits a block is served by a direct
//! mapping of the block's size instead of failing, as long as `mmap` grants
//! one; its `dealloc` finds it in the record below.
//!
//! Requests above the largest block (or aligned beyond it) are direct
//! mappings, recorded (address → length, in a table in its own mapping) and
//! unmapped on free only if the record agrees: a `dealloc` with a large
//! layout of an address that is not a live direct mapping of this
//! allocator, or with another length, aborts with a message naming
//! `GlobalBuddy`, the address and the problem.
//!
//! # Rules kept on the allocation path
//!
//! No panics (errors become null or, for a bad `dealloc`, a message on
//! stderr written with `write(2)` and `abort()`), no call to the global
//! allocator (only `mmap`/`munmap` and the buddy), and `alloc_zeroed`
//! takes known-zero blocks without clearing them.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicU64};

use local_lock::bits::checked_align_up;
use local_lock::os;
use local_lock::std_platform::StdCpu;
use local_lock::sync::atomic::{AtomicUsize, Ordering};
use local_lock::sync::{SpinLock, SpinLockGuard};

use crate::buddy::{Block, BlockRef, Buddy};
use crate::error::FreeError;
use crate::source::{BuddySource, PageAlloc};
use crate::span::MAX_SPANS;
use crate::types::{AllocFlags, Config, FreeFlags, Order, Tunables, CAP_CHECK_MS};

mod private;
mod purge;
mod remap;
mod tags;

/// The std heap's shape: 4 KiB pages, 4 MiB blocks, one zone, no min
/// watermark (the heap grows instead of keeping a reserve).
pub const GLOBAL_CONFIG: Config = Config::new(4096, 10).with_tunables(Tunables::NO_MIN);

/// Heap bytes a reservation tries for (halved until `mmap` agrees).
const RESERVE_BYTES: usize = if usize::BITS >= 64 { 1 << 36 } else { 1 << 28 };

/// Under a finite `RLIMIT_AS` (which counts `PROT_NONE` reservations too),
/// a reservation takes at most this fraction of the limit (at first 1/64,
/// then as much as the heap has grown), so the address
/// space the heap has not used yet stays available to direct mappings and
/// the rest of the process; the heap grows by further reservations (up to
/// [`MAX_SPANS`]).
const RLIMIT_SHARE: usize = 16;

/// The address-space limit (`RLIMIT_AS`), if finite.
fn as_limit() -> Option<usize> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(usize::try_from(r.rlim_cur).unwrap_or(usize::MAX))
}

/// One reserved range (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Reservation {
    /// Start of the reservation (the memmap).
    base: *mut u8,
    /// Bytes reserved at `base`: the memmap, the alignment pad, the heap
    /// and the slack after it (the pad and the slack never mapped; unmapped
    /// at once under `RLIMIT_AS`: `munmap` of the whole skips them).
    len: usize,
    /// First heap byte (the span start).
    heap: *mut u8,
    /// Heap bytes reserved.
    cap: usize,
    /// Heap bytes mapped and added.
    populated: usize,
    /// Memmap bytes mapped.
    memmap_mapped: usize,
    /// The buddy span index.
    span: usize,
}

/// What the grow lock protects.
struct Grow {
    /// Every reservation, the last one current.
    res: [Option<Reservation>; MAX_SPANS],
    /// Reservations made.
    nr: usize,
    /// Heap bytes mapped over all reservations.
    total: usize,
    /// Set when the OS refused a reservation: later attempts try only the
    /// smallest reservation that serves their request (one `mmap` each, the
    /// back-off) until one succeeds; never a permanent stop, since memory
    /// may be freed or limits raised meanwhile.
    failed: bool,
}

// SAFETY: the raw pointers name OS mappings owned by the `GlobalBuddy`;
// they are only used under the grow lock.
unsafe impl Send for Grow {}

/// A buddy allocator that grows from the OS: `#[global_allocator]`-ready.
///
/// ```no_run
/// #[global_allocator]
/// static HEAP: buddy::GlobalBuddy = buddy::GlobalBuddy::new();
/// ```
///
/// Every `Layout` is honoured (blocks are naturally aligned; anything
/// larger than the largest block, or aligned beyond it, is a direct
/// mapping). Page-granular: a small object takes a whole 4 KiB page (SLUB,
/// built on top, is the object allocator).
pub struct GlobalBuddy {
    /// The page allocator.
    buddy: Buddy<StdCpu>,
    /// Serialises growth (outside the buddy's locks).
    grow: SpinLock<Grow>,
    /// Growth generation: a failed allocation that sees it changed retries
    /// instead of growing again.
    gen: AtomicUsize,
    /// Live direct mappings.
    direct: AtomicUsize,
    /// The clock time (ms) before which no decay scan runs (scans run at
    /// most every quarter of the decay time).
    next_decay: AtomicU64,
    /// A `fn()` run at each due decay tick before the scan (null: none):
    /// the layers above's idle shrink ([`set_decay_hook`](Self::set_decay_hook)).
    decay_hook: AtomicPtr<()>,
    /// The clock time (ms) before which no check of the policy's
    /// `max_resident_pages` runs.
    next_cap: AtomicU64,
    /// Pages of large blocks freed since the last check of the resident
    /// cap by bytes ([`decay_large`](Self::decay_large)).
    large_freed: AtomicUsize,
    /// Large frees so far (see [`decay_large`](Self::decay_large)).
    large_frees: AtomicUsize,
    /// Address → length of every live direct mapping (innermost lock: no
    /// other lock is taken under it).
    direct_table: SpinLock<DirectTable>,
    /// The page map of the first reservation (see [`PageAlloc::page_tag`]).
    tags: tags::PageTags,
    /// Pages for metadata never handed to users ([`PageAlloc::alloc_private`]).
    private: private::PrivatePages,
}

/// The record of the live direct mappings (address → length), so that a
/// `dealloc` with a large layout unmaps only what this allocator mapped for
/// that block: an open-addressing hash table (linear probing) in its own
/// anonymous mapping (never the global allocator), doubled when half full.
/// Slot `(0, _)` is empty, `(1, _)` a deleted entry (addresses are page
/// aligned, so neither is a mapping).
struct DirectTable {
    /// `cap` slots of `(address, length)`; null before the first mapping.
    slots: *mut [usize; 2],
    /// Slots (a power of two, or 0).
    cap: usize,
    /// Live entries.
    live: usize,
    /// Live and deleted entries (the probe chains' length bound).
    used: usize,
}

// SAFETY: the table's memory is an anonymous mapping owned by the table and
// only touched under the `GlobalBuddy::direct_table` lock.
unsafe impl Send for DirectTable {}

/// A deleted slot.
const TOMB: usize = 1;
/// Slots of the first table (one 8 KiB mapping on 64-bit).
const DIRECT_MIN_CAP: usize = 512;

impl DirectTable {
    const fn new() -> DirectTable {
        DirectTable {
            slots: ptr::null_mut(),
            cap: 0,
            live: 0,
            used: 0,
        }
    }

    #[inline]
    fn hash(&self, addr: usize) -> usize {
        let h = ((addr >> 12) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 32) as usize & (self.cap - 1)
    }

    /// The slot holding `addr`, if any.
    fn find(&self, addr: usize) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = self.hash(addr);
        for _ in 0..self.cap {
            // SAFETY: `i < cap`, slots of our live table.
            let [a, _] = unsafe { *self.slots.add(i) };
            if a == addr {
                return Some(i);
            }
            if a == 0 {
                return None;
            }
            i = (i + 1) & (self.cap - 1);
        }
        None
    }

    /// The length recorded for `addr`.
    fn get(&self, addr: usize) -> Option<usize> {
        // SAFETY: a slot index of our live table.
        self.find(addr).map(|i| unsafe { (*self.slots.add(i))[1] })
    }

    /// Forgets `addr` (which is recorded).
    fn remove(&mut self, addr: usize) {
        if let Some(i) = self.find(addr) {
            // SAFETY: a slot index of our live table.
            unsafe { *self.slots.add(i) = [TOMB, 0] };
            self.live -= 1;
        }
    }

    /// Records `addr` (page aligned, not recorded) of `len` bytes; false if
    /// the table could not grow.
    fn insert(&mut self, addr: usize, len: usize) -> bool {
        if (self.used + 1) * 2 > self.cap && !self.rehash() {
            return false;
        }
        let mut i = self.hash(addr);
        loop {
            // SAFETY: `i < cap`, slots of our live table.
            let slot = unsafe { &mut *self.slots.add(i) };
            if slot[0] == 0 || slot[0] == TOMB {
                if slot[0] == 0 {
                    self.used += 1;
                }
                *slot = [addr, len];
                self.live += 1;
                return true;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    /// Moves the live entries to a fresh table with room for twice as many
    /// (dropping deleted slots); false if `mmap` refuses.
    fn rehash(&mut self) -> bool {
        let want = ((self.live + 1) * 4)
            .next_power_of_two()
            .max(DIRECT_MIN_CAP);
        let slot = core::mem::size_of::<[usize; 2]>();
        let Some(bytes) = want.checked_mul(slot) else {
            return false;
        };
        // SAFETY: a fresh anonymous mapping anywhere.
        let p = unsafe {
            os::map(
                ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                0,
            )
        };
        if p.is_null() {
            return false;
        }
        let old = core::mem::replace(
            self,
            DirectTable {
                slots: p.cast(),
                cap: want,
                live: 0,
                used: 0,
            },
        );
        for i in 0..old.cap {
            // SAFETY: `i < old.cap`, slots of the old table.
            let [a, l] = unsafe { *old.slots.add(i) };
            if a > TOMB {
                self.insert(a, l);
            }
        }
        old.release();
        true
    }

    /// Unmaps the table's memory.
    fn release(&self) {
        if !self.slots.is_null() {
            let bytes = self.cap * core::mem::size_of::<[usize; 2]>();
            // SAFETY: the table's own mapping, no longer used.
            unsafe { os::unmap(self.slots.cast(), bytes) };
        }
    }
}

/// `GlobalBuddy::next_decay` while the decay is paused
/// ([`GlobalBuddy::set_decay_paused`]): no clock reading reaches it.
const DECAY_PAUSED: u64 = u64::MAX;

/// Large frees between two time-based decay checks from
/// [`GlobalBuddy::decay_large`] (the cap is checked by its own count).
pub const DECAY_LARGE_EVERY: usize = 16;

/// A monotonic clock in milliseconds (`CLOCK_MONOTONIC_COARSE`: the
/// kernel's tick, a few ms of resolution, enough for the decay's seconds
/// and the cap's 10 ms; measured 5-6 ns a read here against 47-73 ns for
/// `CLOCK_MONOTONIC` on this VM, whose clock source is slow to read).
/// 0 if it fails.
fn now_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// A bad `dealloc`: report on stderr without allocating, then abort (a
/// global allocator must not unwind).
#[cold]
#[inline(never)]
fn abort_bad_free(e: FreeError) -> ! {
    local_lock::std_platform::die(format_args!("{e}"))
}

impl GlobalBuddy {
    /// An empty heap with [`GLOBAL_CONFIG`]; memory is reserved on first
    /// use.
    ///
    /// ```
    /// # // miri cannot reserve the heap (no getrlimit, mmap).
    /// # #[cfg(not(miri))] {
    /// use core::alloc::{GlobalAlloc, Layout};
    /// static HEAP: buddy::GlobalBuddy = buddy::GlobalBuddy::new();
    /// let layout = Layout::from_size_align(3 * 4096, 4096).unwrap();
    /// // SAFETY: a layout of non-zero size.
    /// let p = unsafe { HEAP.alloc_zeroed(layout) };
    /// assert!(!p.is_null());
    /// // SAFETY: `alloc_zeroed` gave 3 pages that read as zero.
    /// assert!(unsafe { core::slice::from_raw_parts(p, 3 * 4096) }.iter().all(|&b| b == 0));
    /// // Rounded up to a naturally aligned block of 4 pages, from mapped heap.
    /// let block = HEAP.buddy().owner_of(p).unwrap();
    /// assert_eq!((block.head.as_ptr(), block.order.pages()), (p, 4));
    /// assert!(HEAP.heap_bytes() >= 4 * 4096);
    /// // SAFETY: allocated above with this layout, freed once.
    /// unsafe { HEAP.dealloc(p, layout) };
    /// # }
    /// ```
    pub const fn new() -> Self {
        Self::with_config(GLOBAL_CONFIG)
    }

    /// An empty heap of another shape (its largest block must be at least
    /// the OS page size for growth to work; smaller ones only serve direct
    /// mappings).
    pub const fn with_config(config: Config) -> Self {
        GlobalBuddy {
            buddy: Buddy::new(StdCpu::new(), config),
            grow: SpinLock::new(Grow {
                res: [None; MAX_SPANS],
                nr: 0,
                total: 0,
                failed: false,
            }),
            gen: AtomicUsize::new(0),
            direct: AtomicUsize::new(0),
            next_decay: AtomicU64::new(0),
            decay_hook: AtomicPtr::new(ptr::null_mut()),
            next_cap: AtomicU64::new(0),
            large_freed: AtomicUsize::new(0),
            large_frees: AtomicUsize::new(0),
            direct_table: SpinLock::new(DirectTable::new()),
            tags: tags::PageTags::new(),
            private: private::PrivatePages::new(),
        }
    }

    /// The page allocator underneath (statistics, buddyinfo, owner words).
    pub fn buddy(&self) -> &Buddy<StdCpu> {
        &self.buddy
    }

    /// Heap bytes mapped from the OS so far (excluding direct mappings).
    pub fn heap_bytes(&self) -> usize {
        self.lock_grow().total
    }

    /// Live direct mappings (requests above the largest block).
    pub fn direct_mappings(&self) -> usize {
        self.direct.load(Ordering::Relaxed)
    }

    /// Maps more heap for a block of `order` after an allocation from
    /// [`buddy`](Self::buddy) failed (for layers on top, e.g. pcp refills).
    /// False when the OS refuses. Never calls the global allocator.
    pub fn grow_for(&self, order: Order) -> bool {
        let gen = self.gen.load(Ordering::Acquire);
        self.grow(self.buddy.config().block_size(order), gen)
    }

    /// The grow lock (held across `mmap`): contended, it spins briefly and
    /// then sleeps on a futex (see `SpinLock`).
    fn lock_grow(&self) -> SpinLockGuard<'_, Grow> {
        self.grow.lock()
    }

    /// The direct-mapping table's lock (waits as `lock_grow` does).
    fn lock_direct(&self) -> SpinLockGuard<'_, DirectTable> {
        self.direct_table.lock()
    }

    /// Records the direct mapping `[p, p + len)`; on failure unmaps it and
    /// returns null.
    fn record_direct(&self, p: *mut u8, len: usize) -> *mut u8 {
        if self.lock_direct().insert(p as usize, len) {
            self.direct.fetch_add(1, Ordering::Relaxed);
            p
        } else {
            // SAFETY: our own fresh mapping, never handed out.
            unsafe { os::unmap(p, len) };
            ptr::null_mut()
        }
    }

    /// `dealloc` of a layout above the largest block: unmaps `ptr` if it
    /// is a live direct mapping of this allocator of the layout's length;
    /// anything else aborts with a message (never an `munmap` of memory
    /// this allocator did not map for that block).
    #[cold]
    fn dealloc_direct(&self, ptr: *mut u8, layout: Layout) {
        let a = ptr as usize;
        let size = checked_align_up(layout.size().max(1), os::page_size()).unwrap_or(0);
        let mut t = self.lock_direct();
        match t.get(a) {
            Some(len) if len == size => {
                t.remove(a);
                drop(t);
                // SAFETY: our own live direct mapping of `len` bytes, given
                // back by its holder (and forgotten above, so it is unmapped
                // once).
                unsafe { os::unmap(ptr, len) };
                self.direct.fetch_sub(1, Ordering::Relaxed);
            }
            Some(len) => {
                drop(t);
                local_lock::std_platform::die(format_args!(
                    "GlobalBuddy: bad dealloc of {a:#x}: freed with size {} ({size} bytes mapped) but the direct mapping there is {len} bytes",
                    layout.size()
                ))
            }
            None => {
                drop(t);
                local_lock::std_platform::die(format_args!(
                    "GlobalBuddy: bad dealloc of {a:#x} (size {}, align {}): not a direct mapping of this allocator (already freed, a heap block freed with a large layout, or foreign)",
                    layout.size(),
                    layout.align()
                ))
            }
        }
    }

    /// Allocates `layout` with `flags`; null on exhaustion.
    #[inline]
    fn alloc_flags(&self, layout: Layout, flags: AllocFlags) -> *mut u8 {
        let cfg = self.buddy.config();
        let Some(order) = cfg.order_for(layout.size(), layout.align()) else {
            return self.alloc_direct(layout);
        };
        loop {
            let gen = self.gen.load(Ordering::Acquire);
            if let Some(p) = self.buddy.alloc_pages(order, flags) {
                self.note_large_alloc(order);
                return p.ptr.as_ptr();
            }
            if !self.grow(cfg.block_size(order), gen) {
                return self.alloc_block_direct(order, layout.align());
            }
        }
    }

    /// A block of `order` (aligned to `align`) as a direct mapping of its
    /// own, for when the heap cannot grow (no reservation fits the address
    /// space left, e.g. under `RLIMIT_AS`): small requests keep working as
    /// long as `mmap` grants small mappings. Recorded like any direct
    /// mapping (its length is the block size, so `realloc` within the order
    /// stays in place); freed by [`free_block_direct`](Self::free_block_direct).
    /// Fresh anonymous memory: it reads as zero. Null if `mmap` refuses.
    #[cold]
    pub fn alloc_block_direct(&self, order: Order, align: usize) -> *mut u8 {
        let size = self.buddy.config().block_size(order);
        match Layout::from_size_align(size, align.max(1)) {
            Ok(l) => self.alloc_direct(l),
            Err(_) => ptr::null_mut(),
        }
    }

    /// Unmaps a block [`alloc_block_direct`](Self::alloc_block_direct)
    /// returned for `order`; false (and nothing happens) if `ptr` is no
    /// such live mapping.
    ///
    /// # Safety
    ///
    /// If `ptr` is such a mapping, the caller holds it and will not use it
    /// again.
    #[cold]
    pub unsafe fn free_block_direct(&self, ptr: *mut u8, order: Order) -> bool {
        let Some(len) = checked_align_up(self.buddy.config().block_size(order), os::page_size())
        else {
            return false;
        };
        // SAFETY: forwarded contract.
        unsafe { self.unmap_recorded(ptr, |l| l == len) }
    }

    /// The length of the live direct mapping (a request above the largest
    /// block, or a block served directly when the heap could not grow)
    /// that starts at `addr`, if any: what a size-less `free` or
    /// `malloc_usable_size` needs.
    pub fn direct_size(&self, addr: *const u8) -> Option<usize> {
        if self.direct.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.lock_direct().get(addr as usize)
    }

    /// Unmaps the live direct mapping that starts at `ptr`, whatever its
    /// length (a size-less `free`); false (and nothing happens) if there
    /// is none.
    ///
    /// # Safety
    ///
    /// If `ptr` is such a mapping, the caller holds it and will not use it
    /// again.
    #[cold]
    pub unsafe fn free_direct(&self, ptr: *mut u8) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.unmap_recorded(ptr, |_| true) }
    }

    /// Forgets and unmaps the recorded direct mapping at `ptr` if there is
    /// one whose length `ok` accepts; false (and nothing happens)
    /// otherwise.
    ///
    /// # Safety
    ///
    /// As [`free_direct`](Self::free_direct).
    unsafe fn unmap_recorded(&self, ptr: *mut u8, ok: impl Fn(usize) -> bool) -> bool {
        let a = ptr as usize;
        let mut t = self.lock_direct();
        let Some(len) = t.get(a).filter(|&l| ok(l)) else {
            return false;
        };
        t.remove(a);
        drop(t);
        // SAFETY: our own live direct mapping of `len` bytes, given back by
        // its holder and forgotten above (unmapped once).
        unsafe { os::unmap(ptr, len) };
        self.direct.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Maps more heap (at least `need` bytes) unless another thread grew it
    /// since generation `gen`. False when the OS refuses.
    #[cold]
    #[inline(never)]
    fn grow(&self, need: usize, gen: usize) -> bool {
        self.decay();
        let mut g = self.lock_grow();
        if self.gen.load(Ordering::Acquire) != gen {
            return true;
        }
        let cfg = *self.buddy.config();
        let unit = cfg.max_block_size().max(os::page_size());
        let Some(need) = checked_align_up(need.max(1), unit) else {
            return false;
        };
        let step = (g.total / 8).clamp(unit, 16 * unit);
        let want = need.max(checked_align_up(step, unit).unwrap_or(need));
        // Room in the current reservation?
        let cur = if g.nr == 0 { None } else { g.res[g.nr - 1] };
        let (mut r, idx) = match cur {
            Some(r) if r.cap - r.populated >= need => (r, g.nr - 1),
            _ => {
                if g.nr == MAX_SPANS {
                    return false;
                }
                let Some(r) = self.reserve(&cfg, need, g.total, g.failed) else {
                    g.failed = true;
                    return false;
                };
                g.failed = false;
                self.tags.cover(r.heap, r.cap, cfg.page_shift());
                let n = g.nr;
                g.res[n] = Some(r);
                g.nr += 1;
                (r, g.nr - 1)
            }
        };
        let bytes = want.min(r.cap - r.populated);
        // Memmap pages for the new heap pages.
        let desc = core::mem::size_of::<crate::desc::PageDesc>();
        let pages_after = (r.populated + bytes) >> cfg.page_shift();
        let Some(mm_need) = checked_align_up(pages_after * desc, os::page_size()) else {
            return false;
        };
        if mm_need > r.memmap_mapped {
            // SAFETY: inside our reservation's memmap part.
            let p = unsafe {
                os::map(
                    r.base.add(r.memmap_mapped),
                    mm_need - r.memmap_mapped,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED,
                )
            };
            if p.is_null() {
                return false;
            }
            r.memmap_mapped = mm_need;
        }
        // SAFETY: inside our reservation's heap part.
        let heap = unsafe { r.heap.add(r.populated) };
        // SAFETY: as above.
        let p = unsafe {
            os::map(
                heap,
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED,
            )
        };
        if p.is_null() {
            g.res[idx] = Some(r);
            return false;
        }
        r.populated += bytes;
        // SAFETY: the memmap now covers the new pages (fresh zero bytes are
        // valid descriptors), and the heap pages are mapped.
        unsafe {
            self.buddy
                .grow_span(r.span, r.populated >> cfg.page_shift())
        };
        // SAFETY: fresh anonymous memory, read-write, zero, ours alone,
        // inside the populated part of the span.
        let added = unsafe { self.buddy.add_region(heap, bytes, true) };
        g.res[idx] = Some(r);
        if added.is_err() {
            return false;
        }
        g.total += bytes;
        self.gen.fetch_add(1, Ordering::Release);
        true
    }

    /// Reserves a range for a heap of at least `need` bytes: the largest
    /// that `mmap` grants, up to [`RESERVE_BYTES`] and, under a finite
    /// `RLIMIT_AS`, to the larger of the `heap` bytes mapped so far and
    /// 1/64 of the limit, at most 1/[`RLIMIT_SHARE`] of it (halved until it
    /// fits); only `need` when `min_only` (after a refusal). The alignment
    /// pad and the slack stay reserved (address space only) unless an
    /// address-space limit counts them.
    fn reserve(
        &self,
        cfg: &Config,
        need: usize,
        heap: usize,
        min_only: bool,
    ) -> Option<Reservation> {
        let unit = cfg.max_block_size().max(os::page_size());
        let desc = core::mem::size_of::<crate::desc::PageDesc>();
        let limit = as_limit();
        let top = match limit {
            // Geometric: as large as the heap so far, between 1/64 and
            // 1/RLIMIT_SHARE of the limit.
            Some(l) => (l / 64).max(heap).min(l / RLIMIT_SHARE) & !(unit - 1),
            None => RESERVE_BYTES,
        }
        .clamp(unit, RESERVE_BYTES);
        let mut cap = if min_only { need } else { top.max(need) };
        loop {
            let mm = checked_align_up((cap >> cfg.page_shift()) * desc, os::page_size())?;
            let len = mm.checked_add(cap)?.checked_add(unit - os::page_size())?;
            // SAFETY: a fresh PROT_NONE reservation anywhere.
            let base =
                unsafe { os::map(ptr::null_mut(), len, libc::PROT_NONE, libc::MAP_NORESERVE) };
            if !base.is_null() {
                let heap_addr = checked_align_up(base as usize + mm, unit)?;
                let heap = base.wrapping_add(heap_addr - base as usize);
                // Without an address-space limit the alignment pad and the
                // slack after the heap stay in the reservation (PROT_NONE,
                // MAP_NORESERVE: address space only): unmapping them took
                // two system calls of every process's start, about 4 us
                // each here. Under `RLIMIT_AS` they count: unmapped.
                if limit.is_some() {
                    let pad = heap_addr - (base as usize + mm);
                    let tail = len - mm - pad - cap;
                    // SAFETY: trimming our own fresh reservation
                    // (page-aligned pieces outside the memmap and the
                    // heap).
                    unsafe {
                        if pad > 0 {
                            os::unmap(base.add(mm), pad);
                        }
                        if tail > 0 {
                            os::unmap(heap.add(cap), tail);
                        }
                    }
                }
                // SAFETY: the memmap will be mapped before the span covers
                // any page; the range is fresh, so it overlaps no span.
                let span = unsafe {
                    self.buddy
                        .add_reserved_span(heap, cap >> cfg.page_shift(), base)
                };
                let Some(span) = span else {
                    // SAFETY: our own fresh mapping (pieces of it already
                    // unmapped are skipped by `munmap`).
                    unsafe { os::unmap(base, len) };
                    return None;
                };
                return Some(Reservation {
                    base,
                    len,
                    heap,
                    cap,
                    populated: 0,
                    memmap_mapped: 0,
                    span,
                });
            }
            if cap <= need {
                return None;
            }
            cap = ((cap / 2) & !(unit - 1)).max(need);
        }
    }

    /// A direct mapping for a request above the largest block.
    #[cold]
    fn alloc_direct(&self, layout: Layout) -> *mut u8 {
        let Some(size) = checked_align_up(layout.size().max(1), os::page_size()) else {
            return ptr::null_mut();
        };
        let p = os::map_aligned(size, layout.align(), libc::PROT_READ | libc::PROT_WRITE, 0);
        if p.is_null() {
            return p;
        }
        self.record_direct(p, size)
    }
}

// The std heap's growth hook: map more when the buddy is exhausted.
impl BuddySource for GlobalBuddy {
    type P = StdCpu;
    #[inline(always)]
    fn buddy(&self) -> &Buddy<StdCpu> {
        GlobalBuddy::buddy(self)
    }
    fn grow(&self, order: Order) -> bool {
        self.grow_for(order)
    }
    /// `madvise(MADV_DONTNEED)`: the heap is private anonymous memory, so
    /// the block reads as zero afterwards. Refused for blocks smaller than
    /// (or not aligned to) an OS page.
    fn purge(&self, block: NonNull<u8>, bytes: usize) -> bool {
        let page = os::page_size();
        if !bytes.is_multiple_of(page) || !(block.as_ptr() as usize).is_multiple_of(page) {
            return false;
        }
        // SAFETY: a free heap block nobody holds (the buddy's purge pass
        // took it off the free lists), whole OS pages of our private
        // anonymous heap mapping.
        unsafe { os::purge(block.as_ptr(), bytes) }
    }
    /// The buddy's purge pass with [`purge`](Self::purge) and, for each
    /// block purged, its tail pages' memmap pages (see
    /// `GlobalBuddy::purge_memmap`).
    fn trim(&self) -> usize {
        self.buddy.trim_with(|p, n| self.purge_free(p, n))
    }
    /// [`GlobalBuddy::decay`]: pcp's batch frees and drains reach the
    /// buddy through `free_bulk`, not through this heap's `dealloc`, and
    /// give the decay its chance here.
    #[inline]
    fn maybe_decay(&self) -> usize {
        self.decay()
    }
    /// [`GlobalBuddy::decay_large`].
    fn after_large_free(&self, order: Order) -> usize {
        self.decay_large(order)
    }
}

// SAFETY: the buddy's blocks and owner words (growing the heap through its
// own hook when the buddy is exhausted).
unsafe impl PageAlloc for GlobalBuddy {
    #[inline]
    fn page_size(&self) -> usize {
        self.buddy.config().page_size()
    }
    #[inline]
    fn max_order(&self) -> Order {
        self.buddy.config().max_order()
    }
    #[inline]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        let b = self.alloc_or_grow(order, flags);
        if b.is_some() {
            self.note_large_alloc(order);
        }
        b
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.buddy.free_pages(ptr, order) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.buddy.owner_of(addr)
    }
    fn alloc_direct(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let l = Layout::from_size_align(size.max(1), align.max(1)).ok()?;
        NonNull::new(GlobalBuddy::alloc_direct(self, l))
    }
    fn direct_size(&self, addr: *const u8) -> Option<usize> {
        GlobalBuddy::direct_size(self, addr)
    }
    unsafe fn free_direct(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: forwarded.
        unsafe { GlobalBuddy::free_direct(self, ptr.as_ptr()) }
    }
    /// Sheaves and other metadata come from the heap's private pool (its own mappings).
    const PRIVATE_META: bool = true;
    fn alloc_private(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.private.alloc(bytes)
    }
    unsafe fn free_private(&self, ptr: NonNull<u8>, bytes: usize) {
        // SAFETY: forwarded.
        unsafe { self.private.free(ptr, bytes) }
    }
    fn has_page_tags(&self) -> bool {
        true
    }
    #[inline(always)]
    fn page_tag(&self, addr: *const u8) -> u8 {
        self.tags.get(addr.addr())
    }
    fn set_page_tags(&self, head: NonNull<u8>, order: Order, tag: u8) {
        self.tags.set(head.as_ptr().addr(), order.pages(), tag)
    }
    fn page_map(&self) -> Option<crate::PageMapView> {
        self.tags.view()
    }
}

impl Default for GlobalBuddy {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for GlobalBuddy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GlobalBuddy")
            .field("buddy", &self.buddy)
            .field("direct", &self.direct_mappings())
            .finish()
    }
}

impl Drop for GlobalBuddy {
    /// Unmaps the reservations (live direct mappings belong to their
    /// holders).
    fn drop(&mut self) {
        self.direct_table.get_mut().release();
        let g = self.grow.get_mut();
        for r in g.res.iter().flatten() {
            // SAFETY: our own reservation (memmap and heap); `&mut self`
            // means no allocator call is running, and blocks handed out die
            // with the heap.
            unsafe { os::unmap(r.base, r.len) };
        }
    }
}

// SAFETY: `alloc` returns blocks of at least `layout.size()` bytes aligned
// to `layout.align()` (buddy blocks are naturally aligned and at least
// `max(size, align)` rounded to a power-of-two number of pages; direct
// mappings are trimmed to the alignment), or null; `dealloc` returns them
// to where they came from (the layout tells: a layout that fits a block was
// served by the buddy, a larger one by a direct mapping). Nothing here
// unwinds or calls the global allocator.
unsafe impl GlobalAlloc for GlobalBuddy {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        crate::fork::register(self); // fork handlers (issue #14 item 13)
        self.alloc_flags(layout, AllocFlags::NONE)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        crate::fork::register(self); // fork handlers (issue #14 item 13)
        self.alloc_flags(layout, AllocFlags::ZEROED)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(p) = NonNull::new(ptr) else { return };
        match self.buddy.config().order_for(layout.size(), layout.align()) {
            Some(order) => {
                // A block at or above the release order goes back to the OS
                // at once (`free_or_release`); the common case calls the
                // buddy directly (inlined: 60 instructions less per pair).
                let release = self
                    .buddy
                    .config()
                    .release_order()
                    .is_some_and(|r| order >= r);
                // SAFETY: GlobalAlloc's contract: `ptr` came from `alloc`
                // with this layout, which the buddy served (layouts with an
                // order never go to a direct mapping). A bad pointer is
                // caught by the descriptor check (before any purge).
                let r = unsafe {
                    if release {
                        self.free_or_release(p, order, FreeFlags::NONE)
                    } else {
                        self.buddy.try_free_pages(p, order, FreeFlags::NONE)
                    }
                };
                match r {
                    // A large block freed: a slow path, where the resident
                    // cap is checked and the decay runs.
                    Ok(()) if order >= self.buddy.config().purge_order() => {
                        self.decay_large(order);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        // Not in the heap: a block served as a direct mapping
                        // when the heap could not grow?
                        if !self.buddy.owns(ptr) {
                            // SAFETY: GlobalAlloc's contract: if `ptr` is such
                            // a mapping, it is this block, given up.
                            if unsafe { self.free_block_direct(ptr, order) } {
                                return;
                            }
                        }
                        abort_bad_free(e)
                    }
                }
            }
            // A layout above the largest block: a direct mapping, checked
            // against the record of them.
            None => self.dealloc_direct(ptr, layout),
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let cfg = self.buddy.config();
        let old = cfg.order_for(layout.size(), layout.align());
        if old.is_some() && old == cfg.order_for(new_size, layout.align()) {
            // The block already has room: same order.
            return ptr;
        }
        // SAFETY: `new_size` with the old alignment is a valid layout
        // (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the copied length and do not
            // overlap (`new` was just allocated).
            unsafe {
                ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

impl GlobalBuddy {
    /// Takes every lock of the heap in the lock order and keeps them, for
    /// `fork`: the grow lock, then the buddy's resize and zone locks, then
    /// the direct-mapping record.
    pub(crate) fn fork_lock(&self) {
        self.grow.lock_for_fork();
        self.buddy.fork_lock();
        // The direct-mapping record's lock is a leaf (nothing is taken
        // under it), so it comes last.
        self.direct_table.lock_for_fork();
        self.private.lock_for_fork();
    }

    /// Releases what [`fork_lock`](Self::fork_lock) took.
    ///
    /// # Safety
    ///
    /// Taken by `fork_lock` on this thread (in a forked child: on the
    /// thread that forked).
    pub(crate) unsafe fn fork_unlock(&self) {
        // SAFETY: caller's contract.
        unsafe {
            self.private.force_unlock();
            self.direct_table.force_unlock();
            self.buddy.fork_unlock();
            self.grow.force_unlock();
        }
    }
}
