//! The allocator: configuration, chunk slots, `pcpu_alloc`, `free_percpu`,
//! population and the balance work.

use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{null_mut, NonNull};

use local_lock::{IrqFlags, Platform};

use crate::chunk::{Chunk, ChunkKind, ChunkState, LIST_NONE};
use crate::chunk_map::ChunkMap;
use crate::error::{FreeError, FreeErrorKind, PcpuError};
use crate::source::PageSource;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{SpinLock, SpinLockGuard};
use crate::types::{
    PcpuPtr, BLOCK_BITS, EMPTY_POP_PAGES_HIGH, EMPTY_POP_PAGES_LOW, MAX_ALLOC_SIZE, MAX_UNIT_SIZE,
    MIN_ALLOC_SIZE, MIN_UNIT_SIZE, PAGE_SIZE, SLOT_BASE_SHIFT, SLOT_FAIL_THRESHOLD,
};

/// Upper bound of `nr_slots` (a 1 GiB unit needs 32).
pub(crate) const MAX_SLOTS: usize = 40;
const _: () = assert!(MAX_SLOTS <= 64, "the non-empty slot mask is a u64");

/// Most units (CPUs) a chunk may have.
pub const MAX_UNITS: usize = 1 << 16;

/// `fls`: 1-based index of the highest set bit, 0 for 0.
#[inline(always)]
const fn fls(x: usize) -> usize {
    (usize::BITS - x.leading_zeros()) as usize
}

/// `__pcpu_size_to_slot`: `max(fls(size) - SLOT_BASE_SHIFT + 2, 1)`.
#[inline(always)]
pub(crate) const fn size_to_slot_raw(size: usize) -> usize {
    let s = fls(size) + 2;
    if s > SLOT_BASE_SHIFT + 1 {
        s - SLOT_BASE_SHIFT
    } else {
        1
    }
}

// ---------------------------------------------------------------------
// Configuration and geometry
// ---------------------------------------------------------------------

/// How to build a [`PcpuAllocator`] (the kernel's `pcpu_alloc_info`).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Bytes per unit: a multiple of `PAGE_SIZE` (= the block size), at
    /// least [`MIN_UNIT_SIZE`], at most [`MAX_UNIT_SIZE`].
    pub unit_size: usize,
    /// Units per chunk, one per possible CPU; 0 = `platform.nr_cpus()`.
    pub nr_units: usize,
    /// Units per group (NUMA node); 0 = one group. Group `g` holds units
    /// `g * units_per_group ..`, laid out back to back.
    pub units_per_group: usize,
    /// Each group's span is rounded up to this (a power of two, multiple of
    /// `PAGE_SIZE`; the kernel's `atom_size`); 0 = `PAGE_SIZE`.
    pub atom_size: usize,
    /// Static region of the first chunk (the kernel's static per-CPU
    /// variables); rounded up to 4 bytes.
    pub static_size: usize,
    /// Reserved region of the first chunk, served only to reserved
    /// requests; rounded up to 4 bytes. 0 = no reserved chunk.
    pub reserved_size: usize,
    /// Dynamic region of the first chunk; rounded up to 4 bytes. The first
    /// chunk exists iff `static_size + reserved_size + dyn_size > 0`, and
    /// then its dynamic region must not be empty.
    pub dyn_size: usize,
    /// Called (outside every allocator lock) when balance work is wanted,
    /// like `pcpu_schedule_balance_work`; a kernel queues a work item that
    /// calls [`PcpuAllocator::balance`]. The request is also recorded (see
    /// [`PcpuAllocator::balance_requested`]).
    pub on_balance_request: Option<fn()>,
}

impl Config {
    /// Units of `unit_size` bytes, one per platform CPU, no first chunk.
    pub const fn new(unit_size: usize) -> Self {
        Config {
            unit_size,
            nr_units: 0,
            units_per_group: 0,
            atom_size: 0,
            static_size: 0,
            reserved_size: 0,
            dyn_size: 0,
            on_balance_request: None,
        }
    }

    /// A fixed number of units.
    pub const fn units(mut self, nr_units: usize) -> Self {
        self.nr_units = nr_units;
        self
    }

    /// Groups of `units_per_group` units, each group's span rounded up to
    /// `atom_size`.
    pub const fn groups(mut self, units_per_group: usize, atom_size: usize) -> Self {
        self.units_per_group = units_per_group;
        self.atom_size = atom_size;
        self
    }

    /// A first chunk with static, reserved and dynamic regions.
    pub const fn first_chunk(
        mut self,
        static_size: usize,
        reserved_size: usize,
        dyn_size: usize,
    ) -> Self {
        self.static_size = static_size;
        self.reserved_size = reserved_size;
        self.dyn_size = dyn_size;
        self
    }

    /// The balance hook.
    pub const fn balance_hook(mut self, hook: fn()) -> Self {
        self.on_balance_request = Some(hook);
        self
    }
}

impl Default for Config {
    /// 64 KiB units, one per platform CPU, no first chunk.
    fn default() -> Self {
        Config::new(64 << 10)
    }
}

/// Derived layout of units and slots (immutable after construction).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub unit_size: usize,
    pub unit_pages: usize,
    pub nr_units: usize,
    pub units_per_group: usize,
    pub group_stride: usize,
    /// Bytes of one chunk's reservation (all groups).
    pub span: usize,
    /// Alignment of a chunk's unit 0: `next_power_of_two(unit_size)`.
    pub chunk_align: usize,
    /// `log2(chunk_align)`: lookup key = `addr >> key_shift`.
    pub key_shift: u32,
    pub sidelined_slot: usize,
    pub free_slot: usize,
    pub to_depopulate_slot: usize,
    pub nr_slots: usize,
}

impl Geometry {
    pub const fn new(
        unit_size: usize,
        nr_units: usize,
        units_per_group: usize,
        atom_size: usize,
    ) -> Result<Self, PcpuError> {
        if !unit_size.is_multiple_of(PAGE_SIZE)
            || unit_size < MIN_UNIT_SIZE
            || unit_size > MAX_UNIT_SIZE
        {
            return Err(PcpuError::BadConfig(
                "unit_size must be a multiple of PAGE_SIZE in [MIN_UNIT_SIZE, MAX_UNIT_SIZE]",
            ));
        }
        if nr_units == 0 || nr_units > MAX_UNITS {
            return Err(PcpuError::BadConfig("nr_units must be in 1..=MAX_UNITS"));
        }
        let upg = if units_per_group == 0 || units_per_group > nr_units {
            nr_units
        } else {
            units_per_group
        };
        let atom = if atom_size == 0 { PAGE_SIZE } else { atom_size };
        if !atom.is_power_of_two() || atom < PAGE_SIZE {
            return Err(PcpuError::BadConfig(
                "atom_size must be a power of two >= PAGE_SIZE",
            ));
        }
        let Some(group_bytes) = upg.checked_mul(unit_size) else {
            return Err(PcpuError::BadConfig("group too large"));
        };
        let Some(group_stride) = group_bytes.checked_next_multiple_of(atom) else {
            return Err(PcpuError::BadConfig("group too large"));
        };
        let nr_groups = nr_units.div_ceil(upg);
        let last_units = nr_units - (nr_groups - 1) * upg;
        let Some(before) = (nr_groups - 1).checked_mul(group_stride) else {
            return Err(PcpuError::BadConfig("chunk too large"));
        };
        let Some(span) = before.checked_add(last_units * unit_size) else {
            return Err(PcpuError::BadConfig("chunk too large"));
        };
        let chunk_align = unit_size.next_power_of_two();
        let raw = size_to_slot_raw(unit_size);
        Ok(Geometry {
            unit_size,
            unit_pages: unit_size / PAGE_SIZE,
            nr_units,
            units_per_group: upg,
            group_stride,
            span,
            chunk_align,
            key_shift: chunk_align.trailing_zeros(),
            sidelined_slot: raw + 1,
            free_slot: raw + 2,
            to_depopulate_slot: raw + 3,
            nr_slots: raw + 4,
        })
    }

    /// `pcpu_unit_offsets[cpu]`: offset of unit `cpu` from unit 0.
    #[inline(always)]
    pub fn unit_offset(&self, cpu: usize) -> usize {
        if cpu < self.units_per_group {
            cpu * self.unit_size
        } else {
            (cpu / self.units_per_group) * self.group_stride
                + (cpu % self.units_per_group) * self.unit_size
        }
    }

    /// Pages of one chunk reservation.
    #[inline]
    pub fn span_pages(&self) -> usize {
        self.span / PAGE_SIZE
    }
}

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

/// Allocation statistics (`percpu-stats.c`), kept under `pcpu_lock`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful allocations.
    pub nr_alloc: u64,
    /// Frees.
    pub nr_dealloc: u64,
    /// Live allocations.
    pub nr_cur_alloc: u64,
    /// Most live allocations seen.
    pub nr_max_alloc: u64,
    /// Smallest request served (bytes, rounded to 4).
    pub min_alloc_size: usize,
    /// Largest request served.
    pub max_alloc_size: usize,
    /// Dynamic chunks now.
    pub nr_chunks: usize,
    /// Most dynamic chunks seen.
    pub nr_max_chunks: usize,
    /// Dynamic chunks created.
    pub chunks_created: u64,
    /// Dynamic chunks destroyed.
    pub chunks_destroyed: u64,
    /// Populated pages (per unit) over all chunks.
    pub nr_populated: usize,
    /// Wholly free populated pages counted for atomic requests
    /// (`pcpu_nr_empty_pop_pages`).
    pub nr_empty_pop_pages: isize,
    /// Atomic requests that failed.
    pub atomic_failures: u64,
    /// Balance runs.
    pub balance_runs: u64,
}

impl core::fmt::Display for Stats {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(f, "Percpu Memory Statistics")?;
        writeln!(f, "  nr_alloc            : {:>12}", self.nr_alloc)?;
        writeln!(f, "  nr_dealloc          : {:>12}", self.nr_dealloc)?;
        writeln!(f, "  nr_cur_alloc        : {:>12}", self.nr_cur_alloc)?;
        writeln!(f, "  nr_max_alloc        : {:>12}", self.nr_max_alloc)?;
        writeln!(f, "  nr_chunks           : {:>12}", self.nr_chunks)?;
        writeln!(f, "  nr_max_chunks       : {:>12}", self.nr_max_chunks)?;
        writeln!(f, "  chunks_created      : {:>12}", self.chunks_created)?;
        writeln!(f, "  chunks_destroyed    : {:>12}", self.chunks_destroyed)?;
        writeln!(f, "  min_alloc_size      : {:>12}", self.min_alloc_size)?;
        writeln!(f, "  max_alloc_size      : {:>12}", self.max_alloc_size)?;
        writeln!(f, "  nr_populated        : {:>12}", self.nr_populated)?;
        writeln!(f, "  nr_empty_pop_pages  : {:>12}", self.nr_empty_pop_pages)?;
        writeln!(f, "  atomic_failures     : {:>12}", self.atomic_failures)?;
        write!(f, "  balance_runs        : {:>12}", self.balance_runs)
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

/// Flags of a request (the kernel derives them from `gfp_t` and the
/// `reserved` argument of `pcpu_alloc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocFlags {
    /// Never sleep, populate or create chunks; use populated pages only
    /// (`GFP_ATOMIC`/`GFP_NOWAIT`). Requests made in interrupt context are
    /// atomic whatever this says.
    pub atomic: bool,
    /// Serve from the reserved chunk (`__alloc_reserved_percpu`); without a
    /// reserved chunk the request is served normally, as in the kernel.
    pub reserved: bool,
}

impl AllocFlags {
    /// A blocking (`GFP_KERNEL`) request.
    pub const KERNEL: AllocFlags = AllocFlags {
        atomic: false,
        reserved: false,
    };
    /// An atomic (`GFP_ATOMIC`) request.
    pub const ATOMIC: AllocFlags = AllocFlags {
        atomic: true,
        reserved: false,
    };
    /// A reserved, blocking request.
    pub const RESERVED: AllocFlags = AllocFlags {
        atomic: false,
        reserved: true,
    };
}

/// The percpu area allocator (see the crate docs for the design).
pub struct PcpuAllocator<P: Platform, S: PageSource> {
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
unsafe impl<P: Platform + Send, S: PageSource + Send> Send for PcpuAllocator<P, S> {}
// SAFETY: as above.
unsafe impl<P: Platform, S: PageSource> Sync for PcpuAllocator<P, S> {}

/// Validated request: bits, alignment in bits, size in bytes.
#[inline]
fn validate(size: usize, align: usize) -> Result<(usize, usize, usize), PcpuError> {
    if size == 0 {
        return Err(PcpuError::ZeroSize);
    }
    if size > MAX_ALLOC_SIZE {
        return Err(PcpuError::TooLarge { size });
    }
    if !align.is_power_of_two() || align > PAGE_SIZE {
        return Err(PcpuError::BadAlign { align });
    }
    let align = align.max(MIN_ALLOC_SIZE);
    let size = size.next_multiple_of(MIN_ALLOC_SIZE);
    Ok((size / MIN_ALLOC_SIZE, align / MIN_ALLOC_SIZE, size))
}

impl<P: Platform, S: PageSource> PcpuAllocator<P, S> {
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
                self.source.populate(
                    NonNull::new_unchecked(mem.as_ptr().add(geo.unit_offset(cpu))),
                    used_pages,
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

    // -----------------------------------------------------------------
    // Accessors
    // -----------------------------------------------------------------

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The page source.
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

    // -----------------------------------------------------------------
    // Locks
    // -----------------------------------------------------------------

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

    /// `mutex_lock(&pcpu_alloc_mutex)`: spins, then yields (std), while
    /// another context creates, populates or balances.
    #[inline]
    pub(crate) fn lock_slow(&self) -> SpinLockGuard<'_, ()> {
        #[cfg(loom)]
        return self.slow.lock();
        #[cfg(not(loom))]
        {
            if let Some(g) = self.slow.try_lock() {
                return g;
            }
            let backoff = crate::sync::Backoff::new();
            loop {
                backoff.snooze();
                if let Some(g) = self.slow.try_lock() {
                    return g;
                }
            }
        }
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

    // -----------------------------------------------------------------
    // Allocation
    // -----------------------------------------------------------------

    /// `alloc_percpu`/`__alloc_percpu(size, align)` with `GFP_KERNEL`: may
    /// create a chunk and populate pages; the area is zeroed in every unit.
    pub fn alloc(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::KERNEL)
    }

    /// `alloc_percpu_gfp(.., GFP_ATOMIC)`: never blocks, populates or
    /// creates chunks; only populated pages are used.
    pub fn alloc_atomic(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::ATOMIC)
    }

    /// `__alloc_reserved_percpu`: from the reserved chunk.
    pub fn alloc_reserved(&self, size: usize, align: usize) -> Result<PcpuPtr, PcpuError> {
        self.alloc_with(size, align, AllocFlags::RESERVED)
    }

    /// `pcpu_alloc(size, align, reserved, gfp)`: the area is zeroed in
    /// every unit. Bad sizes and alignments are refused with an error.
    pub fn alloc_with(
        &self,
        size: usize,
        align: usize,
        flags: AllocFlags,
    ) -> Result<PcpuPtr, PcpuError> {
        let (p, _, dirty) = self.pcpu_alloc(size, align, flags.reserved, flags.atomic, false)?;
        // Only the first `dirty` bytes may hold old data; the rest is known
        // zero (see `PageSource::populates_zeroed`).
        if dirty != 0 {
            for cpu in 0..self.geo.nr_units {
                // SAFETY: the area is at least `dirty` bytes in every unit,
                // populated, and ours until we return it.
                unsafe {
                    core::ptr::write_bytes(p.as_ptr().add(self.geo.unit_offset(cpu)), 0, dirty)
                };
            }
        }
        Ok(PcpuPtr(p))
    }

    /// The byte-heap entry for `GlobalBitmap` (one unit): an atomic
    /// attempt first (no slow lock, populated pages only), then a blocking
    /// one. Not zeroed.
    #[cfg(all(feature = "std", not(loom)))]
    pub(crate) fn alloc_heap(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        match self.pcpu_alloc(size, align, false, true, true) {
            Ok((p, _, _)) => Some(p),
            Err(PcpuError::NoMemory) => self
                .pcpu_alloc(size, align, false, false, true)
                .ok()
                .map(|(p, _, _)| p),
            Err(_) => None,
        }
    }

    /// `pcpu_alloc`. Returns unit 0's address, the rounded size and how
    /// many bytes from the start of the area may hold old data (the rest is
    /// known zero in every unit).
    /// `quiet` atomic failures do not ask the balance work for more pages
    /// (the heap's first, opportunistic attempt).
    fn pcpu_alloc(
        &self,
        size: usize,
        align: usize,
        reserved: bool,
        atomic: bool,
        quiet: bool,
    ) -> Result<(NonNull<u8>, usize, usize), PcpuError> {
        let (bits, bit_align, size) = validate(size, align)?;
        let is_atomic = atomic || self.platform.in_interrupt();
        let slow = if is_atomic {
            None
        } else {
            Some(self.lock_slow())
        };
        let mut g = self.lock_data();

        let (c, bit_off) = if reserved && !g.reserved.is_null() {
            // SAFETY: non-null reserved chunk, lock held.
            let rc = unsafe { NonNull::new_unchecked(g.reserved) };
            // SAFETY: lock held; `rc` is live.
            let fit = unsafe { Chunk::ctx(rc).find_block_fit(bits, bit_align, is_atomic) };
            // SAFETY: lock held; `rc` is live.
            match fit.and_then(|start| unsafe {
                self.alloc_area_locked(&mut g, rc, bits, bit_align, start)
            }) {
                Some(off) => (rc, off),
                None => return Err(PcpuError::ReservedExhausted),
            }
        } else {
            loop {
                // SAFETY: `g` is this allocator's locked data.
                let found = unsafe { self.search_slots(&mut g, size, bits, bit_align, is_atomic) };
                if let Some(found) = found {
                    break found;
                }
                let free_empty = g.slots[self.geo.free_slot].is_empty();
                drop(g);
                if is_atomic {
                    if !quiet {
                        self.atomic_failures.fetch_add(1, Ordering::Relaxed);
                        self.atomic_alloc_failed.store(true, Ordering::Relaxed);
                        self.schedule_balance();
                    }
                    return Err(PcpuError::NoMemory);
                }
                // No space left: create a new chunk (pcpu_alloc_mutex held).
                if free_empty {
                    let c = self.create_chunk().ok_or(PcpuError::NoMemory)?;
                    g = self.lock_data();
                    // SAFETY: `c` is new and ours; lock held.
                    unsafe { self.register_chunk(&mut g, c) };
                } else {
                    g = self.lock_data();
                }
            }
        };

        let off = bit_off * MIN_ALLOC_SIZE;
        let st = &mut g.stats;
        st.nr_alloc += 1;
        st.nr_cur_alloc += 1;
        st.nr_max_alloc = st.nr_max_alloc.max(st.nr_cur_alloc);
        st.min_alloc_size = if st.min_alloc_size == 0 {
            size
        } else {
            st.min_alloc_size.min(size)
        };
        st.max_alloc_size = st.max_alloc_size.max(size);
        let need_balance = g.nr_empty_pop_pages < EMPTY_POP_PAGES_LOW;

        // Populate the pages under the area if they are not all there.
        if !is_atomic {
            let page_start = off / PAGE_SIZE;
            let page_end = (off + size).div_ceil(PAGE_SIZE);
            let mut rs = page_start;
            loop {
                // SAFETY: lock held; `c` is live.
                let next = unsafe { Chunk::ctx(c).next_unpopulated(rs, page_end) };
                let Some((s, e)) = next else { break };
                // SAFETY: `c` is live; reading an immutable field.
                debug_assert!(unsafe { !(*c.as_ptr()).st.immutable });
                drop(g);
                // SAFETY: pcpu_alloc_mutex held; the pages are ours to populate.
                let ok = unsafe { self.populate_chunk(c, s, e) };
                g = self.lock_data();
                if !ok {
                    // SAFETY: lock held; `bit_off` is the live area just made.
                    unsafe { self.free_area_locked(&mut g, c, bit_off) };
                    g.stats.nr_alloc -= 1;
                    g.stats.nr_cur_alloc -= 1;
                    return Err(PcpuError::NoMemory);
                }
                // SAFETY: lock held.
                unsafe { self.chunk_populated(&mut g, c, s, e) };
                rs = e;
            }
        }
        // SAFETY: lock held; `c` live; the area is ours and populated.
        let dirty = unsafe { Chunk::ctx(c).hand_out(off, size) } - off;
        drop(g);
        drop(slow);
        if need_balance {
            self.schedule_balance();
        }
        // SAFETY: `c` is live; its base is immutable; `off` lies in unit 0.
        let p = unsafe { NonNull::new_unchecked((*c.as_ptr()).base.as_ptr().add(off)) };
        Ok((p, size, dirty))
    }

    /// The slot search of `pcpu_alloc`: from the request's slot up to the
    /// free slot, skipping chunks whose hints cannot fit it; chunks that
    /// fail in a low slot are demoted to slot 0.
    ///
    /// # Safety
    ///
    /// `g` is the locked data of this allocator.
    #[inline]
    unsafe fn search_slots(
        &self,
        g: &mut Inner,
        size: usize,
        bits: usize,
        bit_align: usize,
        is_atomic: bool,
    ) -> Option<(NonNull<Chunk>, usize)> {
        let upto = (1u64 << (self.geo.free_slot + 1)) - 1;
        let mut from = self.size_to_slot(size);
        loop {
            // The next non-empty slot (chunks only move down, to slot 0, or
            // away on success while a slot is being walked).
            let m = g.nonempty & upto & (!0u64 << from);
            if m == 0 {
                return None;
            }
            let slot = m.trailing_zeros() as usize;
            from = slot + 1;
            let mut c = g.slots[slot].head;
            while let Some(cn) = NonNull::new(c) {
                // SAFETY: chunks on the lists are live; lock held.
                unsafe {
                    let next = (*c).next;
                    let fit = Chunk::ctx(cn).find_block_fit(bits, bit_align, is_atomic);
                    match fit {
                        None => {
                            if slot < SLOT_FAIL_THRESHOLD {
                                g.list_move(c, 0, true);
                            }
                        }
                        Some(start) => {
                            if let Some(off) = self.alloc_area_locked(g, cn, bits, bit_align, start)
                            {
                                self.reintegrate(g, cn);
                                return Some((cn, off));
                            }
                        }
                    }
                    c = next;
                }
            }
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

    /// `pcpu_alloc_area` plus the global bookkeeping and relocation.
    ///
    /// # Safety
    ///
    /// `g` is this allocator's locked data; `c` is one of its live chunks.
    unsafe fn alloc_area_locked(
        &self,
        g: &mut Inner,
        c: NonNull<Chunk>,
        bits: usize,
        bit_align: usize,
        start: usize,
    ) -> Option<usize> {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            let oslot = chunk_slot(&self.geo, ctx.st);
            let off = ctx.alloc_area(bits, bit_align, start)?;
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
            relocate(&self.geo, g, c, oslot as isize);
            Some(off)
        }
    }

    /// `pcpu_free_area` plus the global bookkeeping and relocation.
    ///
    /// # Safety
    ///
    /// As for [`alloc_area_locked`](Self::alloc_area_locked); `bit_off` is
    /// the start of a live allocation.
    unsafe fn free_area_locked(&self, g: &mut Inner, c: NonNull<Chunk>, bit_off: usize) -> usize {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            let oslot = chunk_slot(&self.geo, ctx.st);
            let bits = ctx.free_area(bit_off);
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
            relocate(&self.geo, g, c, oslot as isize);
            bits
        }
    }

    /// `pcpu_chunk_populated` plus the global counts.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live; pages `[rs, re)` were just populated.
    unsafe fn chunk_populated(&self, g: &mut Inner, c: NonNull<Chunk>, rs: usize, re: usize) {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            ctx.chunk_populated(rs, re);
            if self.source.populates_zeroed() {
                ctx.pages_zeroed(rs, re);
            }
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            g.nr_populated += re - rs;
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
        }
    }

    /// `pcpu_chunk_depopulated` plus the global counts.
    ///
    /// # Safety
    ///
    /// Lock held (or the chunk owned outright with `g` the locked data);
    /// pages `[rs, re)` were just depopulated.
    unsafe fn chunk_depopulated(&self, g: &mut Inner, c: NonNull<Chunk>, rs: usize, re: usize) {
        // SAFETY: caller.
        unsafe {
            let mut ctx = Chunk::ctx(c);
            ctx.chunk_depopulated(rs, re);
            let (delta, counted) = (ctx.empty_delta, !ctx.st.isolated);
            g.nr_populated -= re - rs;
            if counted && (*c.as_ptr()).kind != ChunkKind::Reserved {
                g.nr_empty_pop_pages += delta;
            }
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

    // -----------------------------------------------------------------
    // Chunk creation and (de)population (pcpu_alloc_mutex held)
    // -----------------------------------------------------------------

    /// `pcpu_create_chunk`: a new dynamic chunk, nothing populated, not yet
    /// registered. Makes room in the lookup table first.
    fn create_chunk(&self) -> Option<NonNull<Chunk>> {
        self.assert_slow_held();
        let (need, cap) = {
            let g = self.lock_data();
            (g.map.needs_grow(), g.map.grown_cap())
        };
        if need {
            let pages = ChunkMap::table_pages(cap);
            let table = self.source.alloc_pages(pages, PAGE_SIZE)?;
            let (old, old_cap) = {
                let mut g = self.lock_data();
                // SAFETY: `table` is `pages` fresh pages.
                unsafe { g.map.rehash_into(table, cap) }
            };
            if let Some(old) = NonNull::new(old) {
                // SAFETY: the old table is unreachable now (swapped under
                // the lock) and was allocated with these parameters.
                unsafe {
                    self.source
                        .free_pages(old.cast(), ChunkMap::table_pages(old_cap), PAGE_SIZE)
                };
            }
        }
        let geo = &self.geo;
        let mem = self.source.alloc_pages(geo.span_pages(), geo.chunk_align)?;
        let Some(c) = Chunk::create(&self.source, geo.unit_pages, ChunkKind::Dynamic, mem) else {
            // SAFETY: `mem` is unused.
            unsafe {
                self.source
                    .free_pages(mem, geo.span_pages(), geo.chunk_align)
            };
            return None;
        };
        // SAFETY: `c` is ours alone.
        unsafe { (*c.as_ptr()).mem = Some((mem, geo.span_pages(), geo.chunk_align)) };
        Some(c)
    }

    /// Makes a new chunk findable: lookup table, counts, slot.
    ///
    /// # Safety
    ///
    /// Lock and alloc mutex held; `c` from `create_chunk`, unregistered.
    unsafe fn register_chunk(&self, g: &mut Inner, c: NonNull<Chunk>) {
        // SAFETY: caller.
        unsafe {
            let key = (*c.as_ptr()).base.as_ptr() as usize >> self.geo.key_shift;
            g.map.insert(key, c.as_ptr());
            g.stats.chunks_created += 1;
            g.stats.nr_max_chunks = g.stats.nr_max_chunks.max(g.map.len());
            relocate(&self.geo, g, c, -1);
        }
    }

    /// `pcpu_destroy_chunk`: returns memory and metadata.
    ///
    /// # Safety
    ///
    /// `c` is a dynamic chunk on no list and not in the lookup table,
    /// depopulated, with no live allocation.
    unsafe fn destroy_chunk(&self, c: NonNull<Chunk>) {
        self.assert_slow_held();
        // SAFETY: caller.
        unsafe {
            if let Some((mem, pages, align)) = (*c.as_ptr()).mem {
                self.source.free_pages(mem, pages, align);
            }
            Chunk::destroy_meta(&self.source, c);
        }
    }

    /// Pointer to page `page` of `cpu`'s unit of chunk `c`.
    ///
    /// # Safety
    ///
    /// `c` live, `cpu < nr_units`, `page <= unit_pages`.
    #[inline]
    unsafe fn unit_page(&self, c: NonNull<Chunk>, cpu: usize, page: usize) -> NonNull<u8> {
        // SAFETY: caller; the result lies in the chunk's reservation.
        unsafe {
            NonNull::new_unchecked(
                (*c.as_ptr())
                    .base
                    .as_ptr()
                    .add(self.geo.unit_offset(cpu) + page * PAGE_SIZE),
            )
        }
    }

    /// `pcpu_populate_chunk`: pages `[rs, re)` of every unit. On failure
    /// the units done so far are depopulated again.
    ///
    /// # Safety
    ///
    /// Alloc mutex held (not the lock); `c` live; pages unpopulated.
    unsafe fn populate_chunk(&self, c: NonNull<Chunk>, rs: usize, re: usize) -> bool {
        self.assert_slow_held();
        for cpu in 0..self.geo.nr_units {
            // SAFETY: caller; the range is inside the chunk's reservation.
            let ok = unsafe { self.source.populate(self.unit_page(c, cpu, rs), re - rs) };
            if !ok {
                for done in 0..cpu {
                    // SAFETY: just populated, holds no data.
                    unsafe { self.source.depopulate(self.unit_page(c, done, rs), re - rs) };
                }
                return false;
            }
        }
        true
    }

    /// `pcpu_depopulate_chunk`: pages `[rs, re)` of every unit.
    ///
    /// # Safety
    ///
    /// Alloc mutex held (not the lock); `c` live; the pages hold no live
    /// allocation.
    unsafe fn depopulate_chunk(&self, c: NonNull<Chunk>, rs: usize, re: usize) {
        self.assert_slow_held();
        for cpu in 0..self.geo.nr_units {
            // SAFETY: caller.
            unsafe { self.source.depopulate(self.unit_page(c, cpu, rs), re - rs) };
        }
    }

    // -----------------------------------------------------------------
    // Free
    // -----------------------------------------------------------------

    /// `free_percpu`.
    ///
    /// # Panics
    ///
    /// If `p` is not the start of a live allocation of this allocator
    /// (interior, already free, foreign, static): detected from the lookup
    /// table, the boundary map and the allocation map.
    #[track_caller]
    pub fn free(&self, p: PcpuPtr) {
        if let Err(e) = self.try_free(p) {
            free_failed(e);
        }
    }

    /// `free_percpu` that reports a bad pointer instead of panicking.
    /// Returns the bytes freed (the size found from the boundary map).
    pub fn try_free(&self, p: PcpuPtr) -> Result<usize, FreeError> {
        let (bytes, need_balance) = self.free_raw(p.as_ptr())?;
        if need_balance {
            self.schedule_balance();
        }
        Ok(bytes)
    }

    /// The size in bytes of the live allocation at `p` (from the boundary
    /// map), or why `p` is not one.
    pub fn size_of(&self, p: PcpuPtr) -> Result<usize, FreeError> {
        let addr = p.as_ptr().as_ptr() as usize;
        let g = self.lock_data();
        let (c, bit_off) = self.validate_live(&g, addr)?;
        // SAFETY: lock held; `c` live.
        Ok(unsafe { Chunk::ctx(c).alloc_bits_at(bit_off) } * MIN_ALLOC_SIZE)
    }

    /// Finds the chunk of `addr` and checks it is a live allocation start.
    fn validate_live(&self, g: &Inner, addr: usize) -> Result<(NonNull<Chunk>, usize), FreeError> {
        let err = |kind| FreeError { addr, kind };
        let c = self.chunk_search(g, addr).ok_or_else(|| {
            let in_static = self.static_area.is_some_and(|(b, n)| {
                addr >= b.as_ptr() as usize && addr < b.as_ptr() as usize + n
            });
            err(if in_static {
                FreeErrorKind::Static
            } else {
                FreeErrorKind::NotPercpu
            })
        })?;
        // SAFETY: `c` is live and the lock is held; `base` is immutable.
        let ctx = unsafe { Chunk::ctx(c) };
        // SAFETY: as above.
        let base = unsafe { (*c.as_ptr()).base.as_ptr() as usize };
        let off = addr - base;
        if !off.is_multiple_of(MIN_ALLOC_SIZE) {
            return Err(err(FreeErrorKind::Misaligned));
        }
        if off < ctx.st.start_offset || off >= ctx.st.nr_pages * PAGE_SIZE - ctx.st.end_offset {
            return Err(err(FreeErrorKind::OutOfRange));
        }
        let bit_off = off / MIN_ALLOC_SIZE;
        ctx.is_alloc_start(bit_off).map_err(err)?;
        Ok((c, bit_off))
    }

    /// `pcpu_chunk_addr_search`: first chunk and reserved chunk by range,
    /// dynamic chunks by the lookup table.
    #[inline]
    fn chunk_search(&self, g: &Inner, addr: usize) -> Option<NonNull<Chunk>> {
        for c in [g.first, g.reserved] {
            if let Some(c) = NonNull::new(c) {
                // SAFETY: live chunk, lock held, no context of it exists.
                let (base, st) =
                    unsafe { ((*c.as_ptr()).base.as_ptr() as usize, &(*c.as_ptr()).st) };
                if addr >= base + st.start_offset
                    && addr < base + st.nr_pages * PAGE_SIZE - st.end_offset
                {
                    return Some(c);
                }
            }
        }
        g.map.lookup(addr >> self.geo.key_shift)
    }

    /// The body of `free_percpu`: returns the bytes freed and whether the
    /// balance work should run.
    pub(crate) fn free_raw(&self, p: NonNull<u8>) -> Result<(usize, bool), FreeError> {
        let addr = p.as_ptr() as usize;
        let mut g = self.lock_data();
        let (c, bit_off) = self.validate_live(&g, addr)?;
        // SAFETY: lock held; `c` live; `bit_off` validated as a live start.
        let bits = unsafe { self.free_area_locked(&mut g, c, bit_off) };
        g.stats.nr_dealloc += 1;
        g.stats.nr_cur_alloc -= 1;

        // More than one fully free chunk: wake the reaper. An isolated
        // chunk may be being reclaimed: leave it to the reclaim.
        let mut need_balance = false;
        // SAFETY: lock held; `c` live; no context of it exists.
        unsafe {
            let st = &(*c.as_ptr()).st;
            if !st.isolated && st.free_bytes == self.geo.unit_size {
                let mut pos = g.slots[self.geo.free_slot].head;
                while !pos.is_null() {
                    if pos != c.as_ptr() {
                        need_balance = true;
                        break;
                    }
                    pos = (*pos).next;
                }
            } else if self.should_reclaim(&g, c) {
                self.isolate(&mut g, c);
                need_balance = true;
            }
        }
        Ok((bits * MIN_ALLOC_SIZE, need_balance))
    }

    /// `pcpu_should_reclaim_chunk`.
    ///
    /// # Safety
    ///
    /// Lock held; `c` live.
    unsafe fn should_reclaim(&self, g: &Inner, c: NonNull<Chunk>) -> bool {
        // SAFETY: caller.
        let (kind, st) = unsafe { ((*c.as_ptr()).kind, &(*c.as_ptr()).st) };
        if kind != ChunkKind::Dynamic {
            return false;
        }
        (st.isolated && st.nr_empty_pop_pages > 0)
            || (g.nr_empty_pop_pages > EMPTY_POP_PAGES_HIGH + st.nr_empty_pop_pages
                && st.nr_empty_pop_pages >= (st.nr_pages / 4) as isize)
    }

    // -----------------------------------------------------------------
    // Balance work
    // -----------------------------------------------------------------

    /// `pcpu_balance_workfn`: release fully free chunks beyond one,
    /// depopulate the empty pages of isolated chunks, keep
    /// `EMPTY_POP_PAGES_LOW..=HIGH` (2..4) empty populated pages for atomic
    /// requests, and release free chunks left without populated pages.
    /// A kernel calls it from a work item; std programs from a helper
    /// thread ([`run_balance_worker`](Self::run_balance_worker)) or inline.
    ///
    /// # Panics
    ///
    /// In debug builds, if called in interrupt context (it takes the slow
    /// lock and calls the page source).
    pub fn balance(&self) {
        debug_assert!(
            !self.platform.in_interrupt(),
            "percpu: balance() in interrupt context"
        );
        let _slow = self.lock_slow();
        self.balance_requested.store(false, Ordering::Relaxed);
        let mut g = self.lock_data();
        g.stats.balance_runs += 1;
        let g = self.balance_free(g, false);
        let g = self.reclaim_populated(g);
        let g = self.balance_populated(g);
        let g = self.balance_free(g, true);
        drop(g);
    }

    /// `pcpu_balance_free`: destroys every fully free chunk but the first of
    /// the free slot (with `empty_only`, only those without populated
    /// pages). Drops the lock while depopulating and destroying.
    fn balance_free<'a>(&'a self, mut g: DataGuard<'a, P>, empty_only: bool) -> DataGuard<'a, P> {
        let free_slot = self.geo.free_slot;
        let mut to_free: *mut Chunk = null_mut();
        let first = g.slots[free_slot].head;
        let mut c = first;
        while !c.is_null() {
            // SAFETY: lock held; chunks on the list are live.
            unsafe {
                let next = (*c).next;
                debug_assert!(!(*c).st.immutable);
                if c != first && (!empty_only || (*c).st.nr_empty_pop_pages == 0) {
                    g.unlink(c);
                    let key = (*c).base.as_ptr() as usize >> self.geo.key_shift;
                    let removed = g.map.remove(key);
                    debug_assert!(removed);
                    g.stats.chunks_destroyed += 1;
                    // A private singly linked list through `next`.
                    (*c).next = to_free;
                    to_free = c;
                }
                c = next;
            }
        }
        while let Some(c) = NonNull::new(to_free) {
            // SAFETY: the chunk is unreachable by anyone else now (off the
            // lists and the lookup table, fully free); we own it.
            unsafe {
                to_free = (*c.as_ptr()).next;
                let mut rs = 0;
                while let Some((s, e)) = Chunk::ctx(c).next_populated(rs) {
                    drop(g);
                    self.depopulate_chunk(c, s, e);
                    g = self.lock_data();
                    self.chunk_depopulated(&mut g, c, s, e);
                    rs = e;
                }
                drop(g);
                self.destroy_chunk(c);
                g = self.lock_data();
            }
        }
        g
    }

    /// `pcpu_reclaim_populated`: depopulates the empty pages of isolated
    /// chunks, scanning each from its end so populated pages stay near the
    /// start; then sidelines the chunk, or reintegrates it if it is fully
    /// free or atomic requests are short of empty pages.
    fn reclaim_populated<'a>(&'a self, mut g: DataGuard<'a, P>) -> DataGuard<'a, P> {
        let slot = self.geo.to_depopulate_slot;
        while let Some(c) = NonNull::new(g.slots[slot].head) {
            // SAFETY: lock held whenever chunk state is touched; `c` stays
            // live (destruction needs the alloc mutex, which we hold).
            unsafe {
                debug_assert!(!(*c.as_ptr()).st.immutable);
                let nr_pages = (*c.as_ptr()).st.nr_pages as isize;
                let mut reintegrate = false;
                let mut i = nr_pages - 1;
                let mut end: isize = -1;
                while i >= 0 {
                    if (*c.as_ptr()).st.nr_empty_pop_pages == 0 {
                        break;
                    }
                    // Reintegrate the chunk to prevent atomic failures.
                    if g.nr_empty_pop_pages < EMPTY_POP_PAGES_HIGH {
                        reintegrate = true;
                        break;
                    }
                    // Start or extend the range (i, end] of empty populated
                    // pages; at page 0 fall through to depopulate it.
                    if Chunk::ctx(c).page_empty_populated(i as usize) {
                        if end == -1 {
                            end = i;
                        }
                        if i > 0 {
                            i -= 1;
                            continue;
                        }
                        i -= 1;
                    }
                    if end != -1 {
                        let (s, e) = ((i + 1) as usize, (end + 1) as usize);
                        drop(g);
                        self.depopulate_chunk(c, s, e);
                        g = self.lock_data();
                        self.chunk_depopulated(&mut g, c, s, e);
                        end = -1;
                    }
                    i -= 1;
                }
                let st = &(*c.as_ptr()).st;
                if reintegrate || st.free_bytes == self.geo.unit_size {
                    self.reintegrate(&mut g, c);
                } else {
                    g.list_move(c.as_ptr(), self.geo.sidelined_slot, false);
                }
            }
        }
        g
    }

    /// `pcpu_balance_populated`: populates pages of the most packed chunks
    /// until there are `EMPTY_POP_PAGES_HIGH` empty populated pages (all of
    /// them after an atomic failure), creating a chunk if none has
    /// unpopulated pages.
    fn balance_populated<'a>(&'a self, mut g: DataGuard<'a, P>) -> DataGuard<'a, P> {
        loop {
            let mut nr_to_pop = if self.atomic_alloc_failed.swap(false, Ordering::Relaxed) {
                EMPTY_POP_PAGES_HIGH
            } else {
                (EMPTY_POP_PAGES_HIGH - g.nr_empty_pop_pages).clamp(0, EMPTY_POP_PAGES_HIGH)
            } as usize;

            for slot in self.size_to_slot(PAGE_SIZE)..=self.geo.free_slot {
                if nr_to_pop == 0 {
                    break;
                }
                let mut c = g.slots[slot].head;
                // SAFETY: lock held; list chunks are live.
                unsafe {
                    while !c.is_null() && (*c).st.nr_pages == (*c).st.nr_populated {
                        c = (*c).next;
                    }
                }
                let Some(c) = NonNull::new(c) else { continue };
                // SAFETY: `c` can't go away while the alloc mutex is held;
                // chunk state is touched under the lock only.
                unsafe {
                    let nr_pages = (*c.as_ptr()).st.nr_pages;
                    let mut rs = 0;
                    while let Some((s, e)) = Chunk::ctx(c).next_unpopulated(rs, nr_pages) {
                        let nr = (e - s).min(nr_to_pop);
                        drop(g);
                        let ok = self.populate_chunk(c, s, s + nr);
                        g = self.lock_data();
                        if ok {
                            nr_to_pop -= nr;
                            self.chunk_populated(&mut g, c, s, s + nr);
                        } else {
                            nr_to_pop = 0;
                        }
                        if nr_to_pop == 0 {
                            break;
                        }
                        rs = e;
                    }
                }
            }
            if nr_to_pop == 0 {
                return g;
            }
            // Ran out of chunks to populate: create one and retry.
            drop(g);
            let c = self.create_chunk();
            g = self.lock_data();
            match c {
                // SAFETY: new chunk, lock and alloc mutex held.
                Some(c) => unsafe { self.register_chunk(&mut g, c) },
                None => return g,
            }
        }
    }

    /// Runs [`balance`](Self::balance) whenever it was requested, checking
    /// every `period`, until `stop` is set: the std stand-in for the
    /// kernel's balance work item. Spawn it on a helper thread:
    ///
    /// ```
    /// # use percpu_bitmap::{PcpuAllocator, Config, HeapSource};
    /// # use local_lock::std_platform::StdCpu;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), Config::new(64 << 10).units(2)).unwrap();
    /// let stop = AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| a.run_balance_worker(&stop, std::time::Duration::from_millis(1)));
    ///     let p = a.alloc(64, 8).unwrap();
    ///     a.free(p);
    ///     stop.store(true, Ordering::Relaxed);
    /// });
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn run_balance_worker(
        &self,
        stop: &core::sync::atomic::AtomicBool,
        period: core::time::Duration,
    ) {
        extern crate std;
        while !stop.load(Ordering::Relaxed) {
            if self.balance_requested.load(Ordering::Relaxed) {
                self.balance();
            }
            std::thread::sleep(period);
        }
    }

    // -----------------------------------------------------------------
    // Internals for the checker
    // -----------------------------------------------------------------

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

#[cold]
#[inline(never)]
#[track_caller]
fn free_failed(e: FreeError) -> ! {
    panic!("percpu: bad free: {e}")
}

impl<P: Platform, S: PageSource> Drop for PcpuAllocator<P, S> {
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

#[cfg(all(feature = "std", not(loom)))]
impl<P: Platform, S: PageSource> PcpuAllocator<P, S> {
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
