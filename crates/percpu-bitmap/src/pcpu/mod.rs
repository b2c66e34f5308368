//! The allocator: [`PcpuAllocator`], the data `pcpu_lock` protects (slot
//! lists, lookup table, counters), the two locks, the constructors
//! (`pcpu_setup_first_chunk`), slot placement (`pcpu_chunk_relocate`,
//! `pcpu_isolate_chunk`, `pcpu_reintegrate_chunk`) and teardown.
//!
//! The paths live in the submodules, each an `impl` block of
//! `PcpuAllocator`, layered so that none calls up or sideways into a later
//! one:
//!
//! * `config`: [`Config`] and the unit and slot geometry;
//! * `stats`: [`Stats`] (`percpu-stats.c`);
//! * `populate`: chunk creation and destruction, page (de)population
//!   (`percpu-vm.c`);
//! * `free`: `free_percpu` and `pcpu_free_area`'s bookkeeping;
//! * `alloc`: `pcpu_alloc` (uses `populate`, and `free` to undo an area
//!   whose pages could not be populated);
//! * `balance`: `pcpu_balance_workfn` (uses `populate`).

use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{null_mut, NonNull};

use local_lock::{IrqFlags, Platform};

use crate::chunk::{Chunk, ChunkKind, ChunkState, LIST_NONE};
use crate::chunk_map::ChunkMap;
use crate::error::PcpuError;
use crate::source::ChunkSource;
use crate::types::{PcpuPtr, BLOCK_BITS, MIN_ALLOC_SIZE, PAGE_SIZE};
use local_lock::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use local_lock::sync::{SpinLock, SpinLockGuard};

mod alloc;
mod balance;
mod config;
mod free;
mod populate;
mod stats;

pub(crate) use config::{size_to_slot_raw, Geometry, MAX_SLOTS};
pub use config::{Config, MAX_UNITS};
pub use stats::Stats;

// ---------------------------------------------------------------------
// Lists and the locked data
// ---------------------------------------------------------------------

/// A doubly linked list of chunks through `Chunk::{next, prev}`.
#[derive(Clone, Copy)]
pub(crate) struct ChunkList {
    pub head: *mut Chunk,
    pub tail: *mut Chunk,
}

impl ChunkList {
    const EMPTY: ChunkList = ChunkList {
        head: null_mut(),
        tail: null_mut(),
    };

    fn is_empty(&self) -> bool {
        self.head.is_null()
    }
}

/// Everything `pcpu_lock` protects.
pub(crate) struct Inner {
    /// `pcpu_chunk_lists[]`: chunks by slot (see the crate docs).
    pub slots: [ChunkList; MAX_SLOTS],
    /// Bit `s` set iff `slots[s]` is non-empty (lets a request skip empty
    /// slots with one `trailing_zeros`).
    pub nonempty: u64,
    /// `pcpu_first_chunk`: the dynamic region of the first chunk.
    pub first: *mut Chunk,
    /// `pcpu_reserved_chunk`: the reserved region (on no list).
    pub reserved: *mut Chunk,
    /// Address -> dynamic chunk.
    pub map: ChunkMap,
    /// `pcpu_nr_empty_pop_pages`: wholly free populated pages of the chunks
    /// that serve atomic requests (not reserved, not isolated).
    pub nr_empty_pop_pages: isize,
    /// `pcpu_nr_populated`: populated pages of every chunk.
    pub nr_populated: usize,
    /// Statistics.
    pub stats: Stats,
}

// SAFETY: the raw chunk pointers are owned by the allocator and only
// dereferenced under `pcpu_lock` (or with exclusive ownership), so the data
// may be handed between threads.
unsafe impl Send for Inner {}

impl Inner {
    const fn new() -> Self {
        Inner {
            slots: [ChunkList::EMPTY; MAX_SLOTS],
            nonempty: 0,
            first: null_mut(),
            reserved: null_mut(),
            map: ChunkMap::new(),
            nr_empty_pop_pages: 0,
            nr_populated: 0,
            stats: Stats {
                nr_alloc: 0,
                nr_dealloc: 0,
                nr_cur_alloc: 0,
                nr_max_alloc: 0,
                min_alloc_size: 0,
                max_alloc_size: 0,
                nr_chunks: 0,
                nr_max_chunks: 0,
                chunks_created: 0,
                chunks_destroyed: 0,
                nr_populated: 0,
                nr_empty_pop_pages: 0,
                atomic_failures: 0,
                balance_runs: 0,
            },
        }
    }

    /// `list_del_init`.
    ///
    /// # Safety
    ///
    /// `c` is a live chunk whose links belong to this `Inner`.
    unsafe fn unlink(&mut self, c: *mut Chunk) {
        // SAFETY: caller; neighbours are live chunks of the same list.
        unsafe {
            let l = (*c).list;
            if l == LIST_NONE {
                return;
            }
            let (prev, next) = ((*c).prev, (*c).next);
            if prev.is_null() {
                self.slots[l as usize].head = next;
            } else {
                (*prev).next = next;
            }
            if next.is_null() {
                self.slots[l as usize].tail = prev;
            } else {
                (*next).prev = prev;
            }
            if self.slots[l as usize].head.is_null() {
                self.nonempty &= !(1u64 << l);
            }
            (*c).prev = null_mut();
            (*c).next = null_mut();
            (*c).list = LIST_NONE;
        }
    }

    /// `list_move` (front) / `list_move_tail`.
    ///
    /// # Safety
    ///
    /// As for [`unlink`](Self::unlink).
    unsafe fn list_move(&mut self, c: *mut Chunk, slot: usize, front: bool) {
        // SAFETY: caller.
        unsafe {
            self.unlink(c);
            self.nonempty |= 1u64 << slot;
            let list = &mut self.slots[slot];
            (*c).list = slot as u16;
            if front {
                (*c).next = list.head;
                if !list.head.is_null() {
                    (*list.head).prev = c;
                } else {
                    list.tail = c;
                }
                list.head = c;
            } else {
                (*c).prev = list.tail;
                if !list.tail.is_null() {
                    (*list.tail).next = c;
                } else {
                    list.head = c;
                }
                list.tail = c;
            }
        }
    }
}

/// `pcpu_lock` held with IRQs saved (`spin_lock_irqsave`); dropping it
/// unlocks, then restores the IRQ state. `!Send`.
pub(crate) struct DataGuard<'a, P: Platform> {
    g: ManuallyDrop<SpinLockGuard<'a, Inner>>,
    flags: IrqFlags,
    platform: &'a P,
    _not_send: PhantomData<*mut ()>,
}

impl<P: Platform> Deref for DataGuard<'_, P> {
    type Target = Inner;
    #[inline(always)]
    fn deref(&self) -> &Inner {
        &self.g
    }
}

impl<P: Platform> DerefMut for DataGuard<'_, P> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.g
    }
}

impl<P: Platform> Drop for DataGuard<'_, P> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: `g` is not used again; the flags come from the irq_save
        // made just before taking the lock, restored in reverse order.
        unsafe {
            ManuallyDrop::drop(&mut self.g);
            self.platform.irq_restore(self.flags);
        }
    }
}

// ---------------------------------------------------------------------
// The allocator
// ---------------------------------------------------------------------

/// The percpu area allocator (see the crate docs for the design).
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{Config, HeapSource, PcpuAllocator};
///
/// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(4)).unwrap();
/// assert_eq!((a.nr_units(), a.unit_size()), (4, 64 << 10));
/// // `alloc_percpu(u64)`: one zeroed u64 per unit.
/// let p = a.alloc(8, 8).unwrap();
/// for cpu in 0..a.nr_units() {
///     let v = a.per_cpu_ptr(p, cpu).cast::<u64>();
///     // SAFETY: 8 live bytes in every unit, only this thread uses them.
///     unsafe {
///         assert_eq!(v.read(), 0);
///         v.write(10 * cpu as u64);
///     }
/// }
/// // SAFETY: as above.
/// let sum: u64 = (0..4).map(|cpu| unsafe { a.per_cpu_ptr(p, cpu).cast::<u64>().read() }).sum();
/// assert_eq!(sum, 60);
/// assert_eq!(a.try_free(p), Ok(8));
/// assert_eq!(a.stats().nr_cur_alloc, 0);
/// ```
pub struct PcpuAllocator<P: Platform, S: ChunkSource> {
    platform: P,
    source: S,
    geo: Geometry,
    on_balance_request: Option<fn()>,
    /// Unit 0 of the first chunk's memory and its static size.
    static_area: Option<(NonNull<u8>, usize)>,
    /// `pcpu_alloc_mutex`: serialises chunk creation and destruction,
    /// (de)population and non-atomic allocations.
    slow: SpinLock<()>,
    /// `pcpu_lock`: all allocator data (taken with IRQs saved).
    data: SpinLock<Inner>,
    /// Balance work requested and not yet run.
    balance_requested: AtomicBool,
    /// `pcpu_atomic_alloc_failed`.
    atomic_alloc_failed: AtomicBool,
    /// Atomic failures (outside the lock, best effort like the flag).
    atomic_failures: AtomicUsize,
}

// SAFETY: the allocator's shared state is behind `slow`/`data` (and
// atomics); chunk memory is handed out as raw pointers whose use is the
// caller's business; P and S are shared by `&self` methods, hence Sync.
unsafe impl<P: Platform + Send, S: ChunkSource + Send> Send for PcpuAllocator<P, S> {}
// SAFETY: as above.
unsafe impl<P: Platform, S: ChunkSource> Sync for PcpuAllocator<P, S> {}

impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    local_lock::const_fn! {
        /// An allocator without a first chunk: every area comes from dynamic
        /// chunks of `nr_units` units of `unit_size` bytes (one group).
        /// Usable in a `static`.
        ///
        /// # Panics
        ///
        /// If the geometry is invalid (at compile time in a `const`).
        pub fn new_dynamic(platform: P, source: S, unit_size: usize, nr_units: usize) -> Self {
            let geo = match Geometry::new(unit_size, nr_units, 0, 0) {
                Ok(g) => g,
                Err(_) => panic!("PcpuAllocator::new_dynamic: invalid unit_size or nr_units"),
            };
            PcpuAllocator {
                platform,
                source,
                geo,
                on_balance_request: None,
                static_area: None,
                slow: SpinLock::new(()),
                data: SpinLock::new(Inner::new()),
                balance_requested: AtomicBool::new(false),
                atomic_alloc_failed: AtomicBool::new(false),
                atomic_failures: AtomicUsize::new(0),
            }
        }
    }

    /// An allocator as `config` says (`pcpu_setup_first_chunk`): with a
    /// first chunk (static | reserved | dynamic, fully populated, immutable)
    /// if the config asks for one.
    pub fn new(platform: P, source: S, config: Config) -> Result<Self, PcpuError> {
        let nr_units = if config.nr_units == 0 {
            platform.nr_cpus()
        } else {
            config.nr_units
        };
        let geo = Geometry::new(
            config.unit_size,
            nr_units,
            config.units_per_group,
            config.atom_size,
        )?;
        let mut a = PcpuAllocator {
            platform,
            source,
            geo,
            on_balance_request: config.on_balance_request,
            static_area: None,
            slow: SpinLock::new(()),
            data: SpinLock::new(Inner::new()),
            balance_requested: AtomicBool::new(false),
            atomic_alloc_failed: AtomicBool::new(false),
            atomic_failures: AtomicUsize::new(0),
        };
        let static_size = config.static_size.next_multiple_of(MIN_ALLOC_SIZE);
        let reserved_size = config.reserved_size.next_multiple_of(MIN_ALLOC_SIZE);
        let dyn_size = config.dyn_size.next_multiple_of(MIN_ALLOC_SIZE);
        if static_size + reserved_size + dyn_size > 0 {
            if dyn_size == 0 {
                return Err(PcpuError::BadConfig(
                    "the first chunk needs a dynamic region",
                ));
            }
            if static_size + reserved_size + dyn_size > geo.unit_size {
                return Err(PcpuError::BadConfig(
                    "static + reserved + dynamic exceed unit_size",
                ));
            }
            a.setup_first_chunk(static_size, reserved_size, dyn_size)?;
        }
        Ok(a)
    }

    /// `pcpu_alloc_first_chunk` for the reserved and dynamic regions.
    fn setup_first_chunk(
        &mut self,
        static_size: usize,
        reserved_size: usize,
        dyn_size: usize,
    ) -> Result<(), PcpuError> {
        let geo = self.geo;
        let mem = self
            .source
            .alloc_pages(geo.span_pages(), geo.chunk_align)
            .ok_or(PcpuError::NoMemory)?;
        let used_pages = (static_size + reserved_size + dyn_size).div_ceil(PAGE_SIZE);
        for cpu in 0..geo.nr_units {
            // SAFETY: the unit's first `used_pages` pages lie in `mem`.
            let ok = unsafe {
                self.source.populate_node(
                    NonNull::new_unchecked(mem.as_ptr().add(geo.unit_offset(cpu))),
                    used_pages,
                    self.platform.cpu_to_node(cpu),
                )
            };
            if !ok {
                // SAFETY: nothing uses `mem` yet.
                unsafe {
                    self.source
                        .free_pages(mem, geo.span_pages(), geo.chunk_align)
                };
                return Err(PcpuError::NoMemory);
            }
        }
        let region = |tmp: usize, map_size: usize, kind: ChunkKind| -> Option<NonNull<Chunk>> {
            let aligned = tmp & !(PAGE_SIZE - 1);
            let start_offset = tmp - aligned;
            let region_size = (start_offset + map_size).next_multiple_of(PAGE_SIZE);
            // SAFETY: `aligned` is inside unit 0 of `mem`.
            let base = unsafe { NonNull::new_unchecked(mem.as_ptr().add(aligned)) };
            let c = Chunk::create(&self.source, region_size / PAGE_SIZE, kind, base)?;
            // SAFETY: the chunk was just created and is ours alone.
            unsafe { Chunk::ctx(c).init_first(start_offset, map_size) };
            Some(c)
        };
        let reserved = if reserved_size > 0 {
            match region(static_size, reserved_size, ChunkKind::Reserved) {
                Some(c) => c.as_ptr(),
                None => {
                    // SAFETY: nothing uses `mem` yet.
                    unsafe {
                        self.source
                            .free_pages(mem, geo.span_pages(), geo.chunk_align)
                    };
                    return Err(PcpuError::NoMemory);
                }
            }
        } else {
            null_mut()
        };
        let Some(first) = region(static_size + reserved_size, dyn_size, ChunkKind::First) else {
            // SAFETY: nothing uses `mem` or the reserved chunk yet.
            unsafe {
                if let Some(r) = NonNull::new(reserved) {
                    Chunk::destroy_meta(&self.source, r);
                }
                self.source
                    .free_pages(mem, geo.span_pages(), geo.chunk_align);
            }
            return Err(PcpuError::NoMemory);
        };
        // The first chunk owns the memory (freed when the allocator drops).
        // SAFETY: `first` is ours alone.
        unsafe { (*first.as_ptr()).mem = Some((mem, geo.span_pages(), geo.chunk_align)) };
        self.static_area = Some((mem, static_size));
        let inner = self.data.get_mut();
        inner.first = first.as_ptr();
        inner.reserved = reserved;
        // SAFETY: both chunks are live and ours alone.
        unsafe {
            inner.nr_empty_pop_pages = (*first.as_ptr()).st.nr_empty_pop_pages;
            inner.nr_populated = (*first.as_ptr()).st.nr_populated
                + NonNull::new(reserved).map_or(0, |r| (*r.as_ptr()).st.nr_populated);
        }
        let geo = self.geo;
        let inner = self.data.get_mut();
        // SAFETY: `first` is live; relocate(-1) puts it on its slot.
        unsafe { relocate(&geo, inner, first, -1) };
        Ok(())
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The chunk source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Units per chunk (possible CPUs).
    #[inline]
    pub fn nr_units(&self) -> usize {
        self.geo.nr_units
    }

    /// Bytes per unit.
    #[inline]
    pub fn unit_size(&self) -> usize {
        self.geo.unit_size
    }

    /// Offset of `cpu`'s unit from unit 0 (`pcpu_unit_offsets[cpu]`).
    ///
    /// # Panics
    ///
    /// If `cpu >= nr_units()`.
    #[inline]
    pub fn unit_offset(&self, cpu: usize) -> usize {
        assert!(
            cpu < self.geo.nr_units,
            "percpu: CPU {cpu} has no unit (nr_units = {})",
            self.geo.nr_units
        );
        self.geo.unit_offset(cpu)
    }

    /// `per_cpu_ptr(p, cpu)`: `cpu`'s copy of the area `p`
    /// (`p + unit_offset(cpu)`). Dereferencing it is the caller's
    /// business: valid for the area's size while `p` is live.
    ///
    /// # Panics
    ///
    /// If `cpu >= nr_units()`.
    #[inline]
    pub fn per_cpu_ptr(&self, p: PcpuPtr, cpu: usize) -> NonNull<u8> {
        let q = p.as_ptr().as_ptr().wrapping_add(self.unit_offset(cpu));
        // SAFETY: `p` is non-null and a unit offset keeps it inside the
        // chunk's reservation, which does not wrap.
        unsafe { NonNull::new_unchecked(q) }
    }

    /// The first chunk's static region (unit 0's copy) and its size, if
    /// any: valid in every unit, zeroed at start, never handed out.
    pub fn static_area(&self) -> Option<(PcpuPtr, usize)> {
        match self.static_area {
            Some((p, n)) if n > 0 => Some((PcpuPtr(p), n)),
            _ => None,
        }
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        let g = self.lock_data();
        let mut s = g.stats;
        s.nr_populated = g.nr_populated;
        s.nr_empty_pop_pages = g.nr_empty_pop_pages;
        s.nr_chunks = g.map.len();
        s.atomic_failures = self.atomic_failures.load(Ordering::Relaxed) as u64;
        s
    }

    /// Whether balance work was requested since the last
    /// [`balance`](Self::balance).
    pub fn balance_requested(&self) -> bool {
        self.balance_requested.load(Ordering::Relaxed)
    }

    /// `spin_lock_irqsave(&pcpu_lock)`.
    #[inline(always)]
    pub(crate) fn lock_data(&self) -> DataGuard<'_, P> {
        let flags = self.platform.irq_save();
        let g = self.data.lock();
        DataGuard {
            g: ManuallyDrop::new(g),
            flags,
            platform: &self.platform,
            _not_send: PhantomData,
        }
    }

    /// `mutex_lock(&pcpu_alloc_mutex)`: waits while another context
    /// creates, populates or balances (a spin lock without `std`; on std
    /// (Linux) a short spin, then a futex sleep, as the kernel's mutex
    /// sleeps: see `SpinLock`).
    #[inline]
    pub(crate) fn lock_slow(&self) -> SpinLockGuard<'_, ()> {
        self.slow.lock()
    }

    /// Asserts (debug builds) that `pcpu_alloc_mutex` is held, as the
    /// kernel's `lockdep_assert_held` does on entry.
    #[inline(always)]
    fn assert_slow_held(&self) {
        #[cfg(not(loom))]
        debug_assert!(self.slow.is_locked(), "percpu: pcpu_alloc_mutex not held");
    }

    /// `pcpu_schedule_balance_work`.
    fn schedule_balance(&self) {
        self.balance_requested.store(true, Ordering::Relaxed);
        if let Some(hook) = self.on_balance_request {
            hook();
        }
    }

    /// `pcpu_size_to_slot`.
    #[inline(always)]
    fn size_to_slot(&self, size: usize) -> usize {
        if size == self.geo.unit_size {
            self.geo.free_slot
        } else {
            size_to_slot_raw(size)
        }
    }

    /// `pcpu_reintegrate_chunk`.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live.
    unsafe fn reintegrate(&self, g: &mut Inner, c: NonNull<Chunk>) {
        // SAFETY: caller.
        unsafe {
            let st = &mut (*c.as_ptr()).st;
            if st.isolated {
                st.isolated = false;
                g.nr_empty_pop_pages += st.nr_empty_pop_pages;
                relocate(&self.geo, g, c, -1);
            }
        }
    }

    /// `pcpu_isolate_chunk`.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live and dynamic.
    unsafe fn isolate(&self, g: &mut Inner, c: NonNull<Chunk>) {
        // SAFETY: caller.
        unsafe {
            let st = &mut (*c.as_ptr()).st;
            if !st.isolated {
                st.isolated = true;
                g.nr_empty_pop_pages -= st.nr_empty_pop_pages;
            }
            g.list_move(c.as_ptr(), self.geo.to_depopulate_slot, true);
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geo
    }

    #[cfg(any(test, feature = "invariants"))]
    pub(crate) fn locks(&self) -> (SpinLockGuard<'_, ()>, DataGuard<'_, P>) {
        let s = self.lock_slow();
        (s, self.lock_data())
    }
}

/// `pcpu_chunk_slot`: slot by largest free run in bytes; 0 if (nearly)
/// full; the free slot if wholly free.
#[inline]
pub(crate) fn chunk_slot(geo: &Geometry, st: &ChunkState) -> usize {
    if st.free_bytes < MIN_ALLOC_SIZE || st.md.contig_hint == 0 {
        return 0;
    }
    let size = st.md.contig_hint as usize * MIN_ALLOC_SIZE;
    if size == geo.unit_size {
        geo.free_slot
    } else {
        size_to_slot_raw(size)
    }
}

/// `pcpu_chunk_relocate`: moves `c` to the slot of its state if that
/// changed (to the head when it grew, else the tail). The reserved chunk is
/// on no list; isolated chunks stay where they are.
///
/// # Safety
///
/// `g` is the locked data owning `c`; no context of `c` is alive.
unsafe fn relocate(geo: &Geometry, g: &mut Inner, c: NonNull<Chunk>, oslot: isize) {
    // SAFETY: caller.
    unsafe {
        let p = c.as_ptr();
        if (*p).kind == ChunkKind::Reserved || (*p).st.isolated {
            return;
        }
        let nslot = chunk_slot(geo, &(*p).st) as isize;
        if oslot != nslot {
            g.list_move(p, nslot as usize, oslot < nslot);
        }
    }
}

impl<P: Platform, S: ChunkSource> Drop for PcpuAllocator<P, S> {
    fn drop(&mut self) {
        let inner = self.data.get_mut();
        let chunks: [*mut Chunk; 2] = [inner.first, inner.reserved];
        inner.first = null_mut();
        inner.reserved = null_mut();
        // Every dynamic chunk is on some list.
        for slot in 0..self.geo.nr_slots {
            while let Some(c) = NonNull::new(inner.slots[slot].head) {
                // SAFETY: `&mut self`: nobody else can touch the chunks.
                unsafe {
                    inner.unlink(c.as_ptr());
                    if (*c.as_ptr()).kind == ChunkKind::Dynamic {
                        if let Some((mem, pages, align)) = (*c.as_ptr()).mem {
                            self.source.free_pages(mem, pages, align);
                        }
                        Chunk::destroy_meta(&self.source, c);
                    }
                }
            }
        }
        // The first chunk owns the first chunk's memory; the reserved chunk
        // shares it.
        for c in chunks {
            if let Some(c) = NonNull::new(c) {
                // SAFETY: as above.
                unsafe {
                    if let Some((mem, pages, align)) = (*c.as_ptr()).mem {
                        self.source.free_pages(mem, pages, align);
                    }
                    Chunk::destroy_meta(&self.source, c);
                }
            }
        }
        let (table, cap) = inner.map.take_table();
        if let Some(t) = NonNull::new(table) {
            // SAFETY: the table came from the source with these parameters.
            unsafe {
                self.source
                    .free_pages(t.cast(), ChunkMap::table_pages(cap), PAGE_SIZE)
            };
        }
    }
}

// A metadata block is exactly one page of bits.
const _: () = assert!(BLOCK_BITS * MIN_ALLOC_SIZE == PAGE_SIZE);

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// fork support (issue #14 item 13; see `crate::fork`)
// ---------------------------------------------------------------------------

#[cfg(all(feature = "std", not(loom)))]
impl<P: Platform, S: ChunkSource> PcpuAllocator<P, S> {
    /// Takes both locks in the lock order (`slow`, then `data`) and keeps
    /// them, for `fork`.
    pub(crate) fn fork_lock(&self) {
        self.slow.lock_for_fork();
        self.data.lock_for_fork();
    }

    /// Releases the locks taken by [`fork_lock`](Self::fork_lock).
    ///
    /// # Safety
    ///
    /// They were taken by `fork_lock` on this thread (in a forked child: on
    /// the thread that forked).
    pub(crate) unsafe fn fork_unlock(&self) {
        // SAFETY: caller's contract.
        unsafe {
            self.data.force_unlock();
            self.slow.force_unlock();
        }
    }
}
