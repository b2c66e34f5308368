//! The `this_cpu` operations on per-CPU sheaf words: what SLUB's sheaf
//! fast paths need from a platform when no slot lock is taken.
//!
//! The kernel's per-CPU operations (`this_cpu_read`, `this_cpu_xchg`,
//! `this_cpu_cmpxchg`, ...) act on the running CPU's copy of a variable as
//! one indivisible step: one `%gs`-relative instruction on x86, elsewhere
//! a few instructions with interrupts (or preemption) disabled. In a std
//! process the same steps are restartable sequences (Linux `rseq`, see
//! [`rseq`](crate::rseq)): a thread preempted, migrated or signalled inside
//! one restarts it from the beginning on whatever CPU it then runs on, and
//! the operation's last store is its commit.
//!
//! The words of one CPU form a [`CpuSheaves`] record: the main sheaf (its
//! address, size and capacity: the size kept in the record while it is
//! installed), the spare sheaf (0 or the address of a sheaf: word 0 its
//! size, word 1 a link, then the entries, [`SHEAF_HDR_WORDS`]) and the
//! slab ranges the CPU's last validated frees belonged to. [`SheafSlots`] names the records of all
//! CPUs (CPU `c`'s record is `base + c * stride`).
//!
//! The [`Platform`](crate::Platform) methods `this_cpu_*` implement the
//! operations. Their defaults are the kernel's generic per-CPU operations
//! (interrupts saved, pinned, plain accesses to the pinned CPU's record),
//! valid on platforms whose slots are [`Pinned`](crate::Strategy::Pinned);
//! `restartable()` says whether callers may use them without the slot lock.
//! Every operation may fail (the CPU has no record, the sheaf is empty or
//! full, the word changed): callers then take their slow path.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Header words of a sheaf before its entries: the size, then a link.
pub const SHEAF_HDR_WORDS: usize = 2;

/// Validated ranges per CPU record: a free inside one of them, recorded
/// at the current discard count, needs no descriptor lookup. Slab `b` uses
/// way [`range_way`]`(b, shift)`: a direct-mapped cache of the last slabs
/// freed to.
pub const RANGE_WAYS: usize = 4;

/// One validated range: a slab's first byte and the bytes its objects
/// span (0: none).
#[repr(C)]
#[derive(Debug, Default)]
pub struct VRange {
    /// First byte of the slab.
    pub base: AtomicUsize,
    /// Bytes its objects span (0: empty way).
    pub span: AtomicUsize,
}

/// The way of the validated-range cache an address inside a slab of
/// `2^shift` bytes (aligned to its size) uses.
#[inline(always)]
pub const fn range_way(addr: usize, shift: u32) -> usize {
    (addr >> shift) & (RANGE_WAYS - 1)
}

/// The distance between two CPUs' records in the restartable sequences
/// (`rseq`): CPU `c`'s [`CpuSheaves`] is `c * SHEAF_RECORD_STRIDE` bytes
/// after CPU 0's (the sections shift the CPU id, an immediate). A
/// [`SheafRecord`] is that size: the sheaf words and what else the user
/// keeps per CPU (slub: its CPU's fast record), so that the first CPUs'
/// records sit together after the structure's header.
pub const SHEAF_RECORD_STRIDE: usize = 512;

/// One CPU's [`CpuSheaves`] followed by `data`, [`SHEAF_RECORD_STRIDE`]
/// bytes in all (aligned to it): an array of them is what
/// [`SheafSlots::new`] takes on every platform, `rseq`'s included.
///
/// ```
/// use local_lock::this_cpu::{SheafRecord, SHEAF_RECORD_STRIDE};
/// let r = [const { SheafRecord::new(0u64) }; 2];
/// assert_eq!(core::mem::size_of_val(&r[0]), SHEAF_RECORD_STRIDE);
/// assert_eq!(core::mem::offset_of!(SheafRecord<u64>, sheaves), 0);
/// ```
#[repr(C, align(512))]
#[derive(Debug, Default)]
pub struct SheafRecord<T> {
    /// The CPU's sheaf words.
    pub sheaves: CpuSheaves,
    /// The rest of the CPU's record.
    pub data: T,
}

impl<T> SheafRecord<T> {
    /// Empty sheaf words and `data`.
    pub const fn new(data: T) -> Self {
        SheafRecord {
            sheaves: CpuSheaves::new(),
            data,
        }
    }
}

const _: () = assert!(core::mem::align_of::<SheafRecord<()>>() == SHEAF_RECORD_STRIDE);

/// One CPU's sheaf words (`struct slub_percpu_sheaves`, plus the slab
/// ranges of the CPU's last validated frees). Field offsets are part of
/// the restartable sequences' ABI: `main` 0, `count` 8, `limit` 16,
/// `spare` 24, `vgen` 32, way `i` of `ranges` at `40 + 16 * i` (`base`,
/// then `span`).
///
/// The main sheaf's size lives here (`count`), not in the sheaf's size
/// word, while the sheaf is installed, and `limit` says whether one is:
/// 0 for none, else its capacity. A pop or push reads `count` and
/// `limit` (one line with `main`) and commits by storing `count`: one
/// dependent load fewer than through the sheaf's header (tcmalloc keeps
/// its per-CPU headers the same way). Taking the main sheaf stores its
/// size into the sheaf's size word and clears `limit`; installing one
/// copies its size word into `count` and sets `limit` last. A remote
/// taker (`rseq`'s drains) raises `busy` (no install starts while it is
/// up), clears `limit` and then fences the CPU ([`rseq::fence`](crate::rseq::fence)):
/// a section that read the old words either commits before the fence
/// (its `count` is what the taker then reads) or restarts and sees no
/// sheaf, because the commit writes `count` only, never `limit`.
///
/// ```
/// use local_lock::this_cpu::CpuSheaves;
/// let r = CpuSheaves::new();
/// assert_eq!(r.limit.load(core::sync::atomic::Ordering::Relaxed), 0);
/// assert_eq!(core::mem::offset_of!(CpuSheaves, count), 8);
/// assert_eq!(core::mem::offset_of!(CpuSheaves, vgen), 32);
/// assert_eq!(core::mem::offset_of!(CpuSheaves, ranges), 40);
/// assert!(core::mem::size_of::<CpuSheaves>() <= 128);
/// ```
#[repr(C)]
#[derive(Debug, Default)]
pub struct CpuSheaves {
    /// The main sheaf (meaningful while `limit` is not 0).
    pub main: AtomicUsize,
    /// The main sheaf's size (meaningful while `limit` is not 0).
    pub count: AtomicUsize,
    /// 0: no main sheaf; else its capacity (pops and pushes stay below).
    pub limit: AtomicUsize,
    /// The spare sheaf (0: none; its size in its own size word).
    pub spare: AtomicUsize,
    /// The cache's discard count when the ranges were recorded (all ways
    /// are emptied when it moves on).
    pub vgen: AtomicUsize,
    /// The validated ranges, by [`range_way`].
    pub ranges: [VRange; RANGE_WAYS],
    /// Non-zero while a remote taker reads the main sheaf's words (an
    /// install then fails).
    pub busy: AtomicUsize,
}

impl CpuSheaves {
    /// An empty record.
    pub const fn new() -> Self {
        CpuSheaves {
            main: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            spare: AtomicUsize::new(0),
            vgen: AtomicUsize::new(0),
            ranges: [const {
                VRange {
                    base: AtomicUsize::new(0),
                    span: AtomicUsize::new(0),
                }
            }; RANGE_WAYS],
            busy: AtomicUsize::new(0),
        }
    }
}

/// What a hardened free checks before pushing (see
/// [`Platform::this_cpu_free_push`](crate::Platform::this_cpu_free_push)):
/// the cache's object stride (and its reciprocal, `floor((2^64 - 1) /
/// size) + 1`), the free-marker key, the cache's slab-discard count, the
/// records, the sheaf capacity and the log2 of the slab size (for
/// [`range_way`]). Field offsets are part of the restartable sequences'
/// ABI (`recip` 0, `size` 8, `key` 16, `gen` 24, `nr` 32, `cap` 40,
/// `shift` 48).
///
/// ```
/// use local_lock::this_cpu::FreeCheck;
/// let c = FreeCheck::new();
/// assert_eq!(core::mem::offset_of!(FreeCheck, cap), 40);
/// # let _ = c;
/// ```
#[repr(C)]
#[derive(Debug, Default)]
pub struct FreeCheck {
    /// `floor((2^64 - 1) / size) + 1`.
    pub recip: AtomicUsize,
    /// The object stride.
    pub size: AtomicUsize,
    /// The free marker (also the key of a sheaf entry: `obj ^ key`).
    pub key: AtomicUsize,
    /// Slabs the cache discarded so far (a recorded range is stale once
    /// this moved on).
    pub gen: AtomicUsize,
    /// Number of CPU records.
    pub nr: AtomicUsize,
    /// Entries per sheaf.
    pub cap: AtomicUsize,
    /// log2 of the cache's (largest) slab size.
    pub shift: AtomicUsize,
    /// The platform's per-thread area ([`SheafSlots::with_area`]), kept
    /// here by the cache at first use.
    pub area: core::sync::atomic::AtomicIsize,
}

impl FreeCheck {
    /// All zero (set by the cache at first use).
    pub const fn new() -> Self {
        FreeCheck {
            recip: AtomicUsize::new(0),
            size: AtomicUsize::new(0),
            key: AtomicUsize::new(0),
            gen: AtomicUsize::new(0),
            nr: AtomicUsize::new(0),
            cap: AtomicUsize::new(0),
            shift: AtomicUsize::new(0),
            area: core::sync::atomic::AtomicIsize::new(0),
        }
    }
}

/// The outcome of [`Platform::this_cpu_free_push`](crate::Platform::this_cpu_free_push).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum FreePush {
    /// Validated, marked free and pushed onto the running CPU's main sheaf.
    Pushed = 0,
    /// Not inside the running CPU's validated range (or no record):
    /// nothing was changed.
    Miss = 1,
    /// Validated and marked, but it already is the main sheaf's top entry
    /// (an immediate double free): not pushed again.
    Marked = 2,
    /// Validated and marked free, but the main sheaf is missing or full:
    /// the caller pushes it elsewhere.
    Full = 3,
}

/// [`FreePush`] for a caller that holds the record (pinned with
/// interrupts off): the steps of the restartable sequence, in order.
#[inline(always)]
pub fn free_push_in(r: &CpuSheaves, chk: &FreeCheck, obj: usize) -> FreePush {
    free_push_with::<false, true>(r, chk, obj)
}

/// [`free_push_in`] pushing `obj` itself rather than `obj ^ key` (the
/// steps of [`Platform::this_cpu_free_push_plain`](crate::Platform::this_cpu_free_push_plain)).
#[inline(always)]
pub fn free_push_in_plain(r: &CpuSheaves, chk: &FreeCheck, obj: usize) -> FreePush {
    free_push_with::<true, true>(r, chk, obj)
}

/// [`free_push_in_plain`] without the free marker and the top-entry check
/// (an unhardened free: the steps of
/// [`Platform::this_cpu_free_push_unmarked`](crate::Platform::this_cpu_free_push_unmarked)).
#[inline(always)]
pub fn free_push_in_unmarked(r: &CpuSheaves, chk: &FreeCheck, obj: usize) -> FreePush {
    free_push_with::<true, false>(r, chk, obj)
}

/// [`free_push_in`]'s steps; `PLAIN`: the entry is `obj`, not `obj ^ key`;
/// `MARK`: the marker stored and the top entry compared.
#[inline(always)]
fn free_push_with<const PLAIN: bool, const MARK: bool>(
    r: &CpuSheaves,
    chk: &FreeCheck,
    obj: usize,
) -> FreePush {
    let v = &r.ranges[range_way(obj, chk.shift.load(Ordering::Relaxed) as u32)];
    let off = obj.wrapping_sub(v.base.load(Ordering::Relaxed));
    if off >= v.span.load(Ordering::Relaxed)
        || r.vgen.load(Ordering::Relaxed) != chk.gen.load(Ordering::Relaxed)
    {
        return FreePush::Miss;
    }
    let idx = ((off as u128 * chk.recip.load(Ordering::Relaxed) as u128) >> 64) as usize;
    if idx.wrapping_mul(chk.size.load(Ordering::Relaxed)) != off {
        return FreePush::Miss;
    }
    let key = chk.key.load(Ordering::Relaxed);
    if MARK {
        // Stored blind: the free never reads the object (see `FreePush`).
        sheaf_word(obj, 0).store(key, Ordering::Relaxed);
    }
    let entry = if PLAIN { obj } else { obj ^ key };
    if MARK {
        let n = r.count.load(Ordering::Relaxed);
        // At an empty sheaf this reads the link word, never an entry.
        if n < r.limit.load(Ordering::Relaxed)
            && sheaf_word(r.main.load(Ordering::Relaxed), n + SHEAF_HDR_WORDS - 1)
                .load(Ordering::Relaxed)
                == entry
        {
            return FreePush::Marked;
        }
    }
    if push_in(r, chk.cap.load(Ordering::Relaxed), entry) {
        FreePush::Pushed
    } else {
        FreePush::Full
    }
}

/// Which sheaf word an exchange acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum SheafWord {
    /// [`CpuSheaves::main`], with its `count` and `limit`: an exchange
    /// takes the installed sheaf (its size stored into its size word) or
    /// installs one (its size word copied into `count`).
    Main = 0,
    /// [`CpuSheaves::spare`].
    Spare = 24,
}

/// The [`CpuSheaves`] records of `nr` CPUs, `stride` bytes apart, and the
/// capacity of the sheaves they hold.
///
/// ```
/// use local_lock::this_cpu::{CpuSheaves, SheafSlots};
/// use local_lock::sync::CachePadded;
/// let recs = [const { CachePadded::new(CpuSheaves::new()) }; 4];
/// // SAFETY: 4 records, `size_of::<CachePadded<_>>()` apart, outliving `s`.
/// let s = unsafe { SheafSlots::<4>::new(recs.as_ptr().cast(), size_of_val(&recs[0]), 16) };
/// assert_eq!(s.nr(), 4);
/// assert!(core::ptr::eq(s.record(3).unwrap(), &*recs[3]));
/// assert!(s.record(4).is_none());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SheafSlots<'a, const N: usize> {
    base: *const CpuSheaves,
    stride: usize,
    cap: usize,
    area: isize,
    _records: core::marker::PhantomData<&'a CpuSheaves>,
}

// SAFETY: a shared view of records made of atomics (what `&CpuSheaves`
// would be, for all of them).
unsafe impl<const N: usize> Send for SheafSlots<'_, N> {}
// SAFETY: as above.
unsafe impl<const N: usize> Sync for SheafSlots<'_, N> {}

impl<'a, const N: usize> SheafSlots<'a, N> {
    /// The records of CPUs `0..N`, CPU `c`'s at `base + c * stride` bytes,
    /// holding sheaves of `cap` entries. (`N` is a constant so that the
    /// restartable sections compare the CPU id with an immediate: one
    /// register fewer in each, which decided whether `__rust_alloc` and
    /// `__rust_dealloc` had to save registers.)
    ///
    /// # Safety
    ///
    /// `N` records live at those addresses for `'a` and `base` may reach
    /// all of them (derived from the whole array, e.g. `as_ptr().cast()`),
    /// `stride` is a multiple of the record's alignment, and every non-zero
    /// sheaf word in them is the address of a sheaf of `cap` entries that
    /// only these operations (or the holder of a detached sheaf) touch.
    pub const unsafe fn new(base: *const CpuSheaves, stride: usize, cap: usize) -> Self {
        SheafSlots {
            base,
            stride,
            cap,
            area: 0,
            _records: core::marker::PhantomData,
        }
    }

    /// The same records, for a platform whose operations address a
    /// per-thread area (`RseqCpu`: the thread pointer's offset to the
    /// rseq area, [`rseq::area`](crate::rseq::area)): the caller keeps
    /// it beside its records, so a fast path reads it with them instead
    /// of through the platform's global (one load instead of two).
    #[inline(always)]
    pub const fn with_area(mut self, area: isize) -> Self {
        self.area = area;
        self
    }

    /// The per-thread area offset given to [`with_area`](Self::with_area)
    /// (0: none given).
    #[inline(always)]
    pub fn area(&self) -> isize {
        self.area
    }

    /// Number of records (`N`).
    pub const fn nr(&self) -> usize {
        N
    }

    /// Entries per sheaf.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The record of CPU 0 (reaching every record).
    pub fn base(&self) -> *const CpuSheaves {
        self.base
    }

    /// Bytes between consecutive records.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// CPU `cpu`'s record, if it has one.
    pub fn record(&self, cpu: usize) -> Option<&'a CpuSheaves> {
        if cpu >= N {
            return None;
        }
        let p = self
            .base
            .cast::<u8>()
            .wrapping_add(cpu * self.stride)
            .cast::<CpuSheaves>();
        // SAFETY: `new`'s contract: a record lives there for 'a.
        Some(unsafe { &*p })
    }
}

/// A sheaf's word `i` (0: size, 1: link, then entries).
#[inline(always)]
fn sheaf_word(sh: usize, i: usize) -> &'static AtomicUsize {
    // SAFETY: `SheafSlots::new`'s contract: a non-zero sheaf word is a
    // sheaf of `cap` entries, word aligned.
    unsafe {
        AtomicUsize::from_ptr(core::ptr::with_exposed_provenance_mut::<usize>(
            sh + i * core::mem::size_of::<usize>(),
        ))
    }
}

/// Pops the last entry of `r`'s main sheaf (0 if none); the record is
/// the caller's for the duration (pinned with interrupts off, or locked).
/// (`cap` is the sheaves' capacity; the record's `limit` bounds the
/// pop.)
#[inline(always)]
pub fn pop_in(r: &CpuSheaves, cap: usize) -> usize {
    let _ = cap;
    let i = r.count.load(Ordering::Relaxed).wrapping_sub(1);
    if i >= r.limit.load(Ordering::Relaxed) {
        return 0;
    }
    let v = sheaf_word(r.main.load(Ordering::Relaxed), SHEAF_HDR_WORDS + i).load(Ordering::Relaxed);
    r.count.store(i, Ordering::Relaxed);
    v
}

/// Pops up to `out.len()` entries of `r`'s main sheaf into `out`, the
/// last one first (as that many [`pop_in`]s); returns how many (0 when
/// it has none).
#[inline(always)]
pub fn pop_many_in(r: &CpuSheaves, cap: usize, out: &mut [usize]) -> usize {
    let _ = cap;
    let n = r.count.load(Ordering::Relaxed);
    if n > r.limit.load(Ordering::Relaxed) {
        return 0;
    }
    let k = n.min(out.len());
    let sh = r.main.load(Ordering::Relaxed);
    for (j, o) in out[..k].iter_mut().enumerate() {
        *o = sheaf_word(sh, SHEAF_HDR_WORDS + n - 1 - j).load(Ordering::Relaxed);
    }
    r.count.store(n - k, Ordering::Relaxed);
    k
}

/// Pushes the entries of `src` in order onto `r`'s main sheaf as far as
/// it has room (as that many [`push_in`]s); returns how many (0 when it
/// has none or it is full).
#[inline(always)]
pub fn push_many_in(r: &CpuSheaves, cap: usize, src: &[usize]) -> usize {
    let _ = cap;
    let n = r.count.load(Ordering::Relaxed);
    let lim = r.limit.load(Ordering::Relaxed);
    if n >= lim {
        return 0;
    }
    let k = (lim - n).min(src.len());
    let sh = r.main.load(Ordering::Relaxed);
    for (j, &v) in src[..k].iter().enumerate() {
        sheaf_word(sh, SHEAF_HDR_WORDS + n + j).store(v, Ordering::Relaxed);
    }
    r.count.store(n + k, Ordering::Relaxed);
    k
}

/// Pushes `v` onto `r`'s main sheaf; false if there is none or it is full.
#[inline(always)]
pub fn push_in(r: &CpuSheaves, cap: usize, v: usize) -> bool {
    let _ = cap;
    let n = r.count.load(Ordering::Relaxed);
    if n >= r.limit.load(Ordering::Relaxed) {
        return false;
    }
    sheaf_word(r.main.load(Ordering::Relaxed), SHEAF_HDR_WORDS + n).store(v, Ordering::Relaxed);
    r.count.store(n + 1, Ordering::Relaxed);
    true
}

/// The main sheaf of `r` (0: none), as an exchange of [`SheafWord::Main`]
/// sees it.
#[inline(always)]
pub fn main_of(r: &CpuSheaves) -> usize {
    if r.limit.load(Ordering::Relaxed) == 0 {
        0
    } else {
        r.main.load(Ordering::Relaxed)
    }
}

/// Takes `r`'s main sheaf (0 if none): its size stored into its size
/// word, `limit` cleared (the record's holder: pinned, locked, or the
/// only user).
#[inline(always)]
pub fn take_main_in(r: &CpuSheaves) -> usize {
    if r.limit.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let sh = r.main.load(Ordering::Relaxed);
    sheaf_word(sh, 0).store(r.count.load(Ordering::Relaxed), Ordering::Relaxed);
    r.limit.store(0, Ordering::Release);
    sh
}

/// Installs `sh` (its size from its size word) as `r`'s main sheaf of
/// capacity `cap`; false (nothing changed) when `r` has one, or the size
/// word exceeds `cap`.
#[inline(always)]
pub fn install_main_in(r: &CpuSheaves, cap: usize, sh: usize) -> bool {
    let n = sheaf_word(sh, 0).load(Ordering::Relaxed);
    if r.limit.load(Ordering::Relaxed) != 0 || n > cap || cap == 0 {
        return false;
    }
    r.main.store(sh, Ordering::Relaxed);
    r.count.store(n, Ordering::Relaxed);
    r.limit.store(cap, Ordering::Release);
    true
}

/// `this_cpu_xchg` of word `w` of `r` by its holder: the old value (for
/// [`SheafWord::Main`]: the main sheaf taken, then `new` installed unless
/// 0).
#[inline(always)]
pub fn xchg_in(r: &CpuSheaves, cap: usize, w: SheafWord, new: usize) -> usize {
    match w {
        SheafWord::Main => {
            let old = take_main_in(r);
            if new != 0 {
                let ok = install_main_in(r, cap, new);
                debug_assert!(ok, "a sheaf larger than its capacity");
            }
            old
        }
        SheafWord::Spare => r.spare.swap(new, Ordering::AcqRel),
    }
}

/// `this_cpu_cmpxchg` of word `w` of `r` by its holder from `old` to
/// `new` (for [`SheafWord::Main`], as [`main_of`] reads it, by
/// [`take_main_in`] and [`install_main_in`]).
#[inline(always)]
pub fn cmpxchg_in(r: &CpuSheaves, cap: usize, w: SheafWord, old: usize, new: usize) -> bool {
    match w {
        SheafWord::Main => {
            if main_of(r) != old {
                return false;
            }
            if new != 0 {
                let n = sheaf_word(new, 0).load(Ordering::Relaxed);
                if n > cap || cap == 0 {
                    return false;
                }
            }
            take_main_in(r);
            new == 0 || install_main_in(r, cap, new)
        }
        SheafWord::Spare => r
            .spare
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok(),
    }
}

/// The word `w` of `r` (for [`SheafWord::Main`] the sheaf's address,
/// which means something only while `r.limit` is not 0: exchanges of it
/// go through [`xchg_in`] and [`cmpxchg_in`]).
#[inline(always)]
pub fn word_of(r: &CpuSheaves, w: SheafWord) -> &AtomicUsize {
    match w {
        SheafWord::Main => &r.main,
        SheafWord::Spare => &r.spare,
    }
}

/// Way `way` of `r`'s validated ranges: `(base, span, vgen)`.
#[inline(always)]
pub fn range_in(r: &CpuSheaves, way: usize) -> (usize, usize, usize) {
    let v = &r.ranges[way % RANGE_WAYS];
    (
        v.base.load(Ordering::Relaxed),
        v.span.load(Ordering::Relaxed),
        r.vgen.load(Ordering::Relaxed),
    )
}

/// Records a validated range as way `way` of `r`, in the order the
/// restartable sequence stores (any prefix of it leaves only true ranges
/// valid): the way emptied; if the discard count moved on, every way
/// emptied and then the count stored; the base; the span (the commit).
#[inline(always)]
pub fn set_range_in(r: &CpuSheaves, way: usize, base: usize, span: usize, gen: usize) {
    let v = &r.ranges[way % RANGE_WAYS];
    v.span.store(0, Ordering::Relaxed);
    if r.vgen.load(Ordering::Relaxed) != gen {
        for w in &r.ranges {
            w.span.store(0, Ordering::Relaxed);
        }
        r.vgen.store(gen, Ordering::Relaxed);
    }
    v.base.store(base, Ordering::Relaxed);
    v.span.store(span, Ordering::Relaxed);
}
