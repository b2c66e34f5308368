//! `GlobalSlub`: kmalloc as the global allocator of a std program, over
//! pcp over the buddy's OS-backed memory, with one virtual CPU per live
//! thread (the pinned fast path needs no atomic instruction).

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use buddy::{AllocFlags, Block, BlockRef, Order};
use local_lock::fork::in_main_image;
use local_lock::std_platform::{die, RseqCpu};
use pcp::GlobalPcp;

use crate::cache::FastFree;
use crate::kmalloc::{kmalloc_class, kmalloc_class_of, Kmalloc, KMALLOC_MAX_CACHE_SIZE};
use crate::layout::{Geometry, SlabFlags};
use crate::source::SlabSource;

/// The pages under every `GlobalSlub`: pcp lists (one per live thread) over
/// the buddy's memory mapped from the OS. Larger requests (beyond the
/// largest block) are direct mappings.
static PAGES: GlobalPcp = GlobalPcp::new();

/// The shared pages, for the fork handlers.
pub(crate) fn pages_static() -> &'static GlobalPcp {
    &PAGES
}

/// The page source of [`GlobalSlub`] (a handle to the shared pcp).
///
/// ```
/// use local_lock::std_platform::PerThread;
/// use slub::{GlobalPages, GlobalSlub, KmemCache, SlabFlags, SlabSource};
///
/// static HEAP: GlobalSlub = GlobalSlub::new();
/// // Every handle (and every GlobalSlub) shares one pcp allocator.
/// assert!(core::ptr::eq(GlobalPages.pcp(), HEAP.pages()));
/// assert_eq!(GlobalPages.page_size(), 4096);
/// // A dedicated cache over the same pages.
/// let c = KmemCache::<GlobalPages, PerThread>::create(
///     "dentry", 192, 8, SlabFlags::NONE, GlobalPages, PerThread).unwrap();
/// let d = c.alloc().unwrap();
/// assert!(GlobalPages.block_of(d.as_ptr()).is_some(), "its slab is a block of the pages");
/// // SAFETY: ours, freed once.
/// unsafe { c.free(d) };
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalPages;

impl GlobalPages {
    /// The pcp allocator behind the handle.
    pub fn pcp(&self) -> &'static GlobalPcp {
        &PAGES
    }
}

// SAFETY: forwards to the pcp over the buddy.
unsafe impl SlabSource for GlobalPages {
    #[inline(always)]
    fn page_size(&self) -> usize {
        PAGES.pcp().page_size()
    }
    #[inline(always)]
    fn max_order(&self) -> Order {
        PAGES.pcp().max_order()
    }
    #[inline(always)]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        PAGES.pcp().alloc_block(order, flags)
    }
    #[inline(always)]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { PAGES.pcp().free_block(ptr, order) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        PAGES.pcp().block_of(addr)
    }
    /// The buddy's recorded direct mappings (`GlobalBuddy::direct_size`).
    fn alloc_direct(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        PAGES.pcp().source().alloc_direct(size, align)
    }
    fn direct_size(&self, addr: *const u8) -> Option<usize> {
        PAGES.pcp().source().direct_size(addr)
    }
    unsafe fn free_direct(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: forwarded.
        unsafe { SlabSource::free_direct(PAGES.pcp().source(), ptr) }
    }
    /// Sheaves in `GlobalBuddy`'s private pages.
    const PRIVATE_META: bool = true;
    fn alloc_private(&self, bytes: usize) -> Option<NonNull<u8>> {
        PAGES.pcp().source().alloc_private(bytes)
    }
    unsafe fn free_private(&self, ptr: NonNull<u8>, bytes: usize) {
        // SAFETY: forwarded.
        unsafe { PAGES.pcp().source().free_private(ptr, bytes) }
    }
    /// The heap's page map (`GlobalBuddy`'s first reservation).
    fn has_page_tags(&self) -> bool {
        true
    }
    #[inline(always)]
    fn page_tag(&self, addr: *const u8) -> u8 {
        PAGES.pcp().source().page_tag(addr)
    }
    fn set_page_tags(&self, head: NonNull<u8>, order: Order, tag: u8) {
        PAGES.pcp().source().set_page_tags(head, order, tag)
    }
    fn page_map(&self) -> Option<buddy::PageMapView> {
        PAGES.pcp().source().page_map()
    }
}

/// Per-CPU slots of [`GlobalSlub`]'s caches: CPUs beyond share slots
/// (the slab paths' locks) and have no sheaves (they take the slab path).
pub(crate) const SLOTS: usize = 64;

type Inner = Kmalloc<GlobalPages, RseqCpu, SLOTS>;

/// Registered instances (fork handlers). Only `'static` instances are ever
/// stored here (see [`GlobalSlub::flush_at_thread_exit`]), so an entry
/// never dangles.
static INSTANCES: [AtomicPtr<GlobalSlub>; 8] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 8];

/// kmalloc/kfree as `#[global_allocator]`:
///
/// ```
/// #[global_allocator]
/// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
/// # fn main() { let v = vec![1u8; 100]; assert_eq!(v[99], 1); }
/// ```
///
/// [`new`](Self::new) gives the caches per-CPU sheaves and hardened free
/// pointers ([`DEFAULT_SHEAVES`](Self::DEFAULT_SHEAVES),
/// [`DEFAULT_FLAGS`](Self::DEFAULT_FLAGS)). Requests up to 8 KiB (with an
/// alignment the class guarantees) come from the kmalloc caches, larger
/// ones from the pcp/buddy pages (known-zero
/// pages are not cleared for `alloc_zeroed`), beyond 4 MiB from direct
/// mappings. The caches are per CPU ([`RseqCpu`]: sheaves reached by
/// restartable sequences, slab paths under per-CPU locks), so any number
/// of threads share them and a thread's exit leaves nothing behind.
/// Exhaustion returns
/// null; a bad `dealloc` (foreign pointer, double free the naive check
/// sees) is reported on stderr and aborts (a global allocator must not
/// unwind).
///
/// `fork()` from a multithreaded program is safe: on first use the
/// instance registers `pthread_atfork` handlers (`local_lock::fork`) that
/// take its caches' locks and the pages' locks before `fork` and release
/// them after it, so the child never inherits a lock another thread held
/// (registered for `static` instances, or through
/// [`flush_at_thread_exit`](Self::flush_at_thread_exit); the pages are
/// always registered).
pub struct GlobalSlub {
    k: Inner,
    hooked: AtomicBool,
    /// Debug flags: class selection then checks each cache's real object
    /// alignment (red zones and owner records change the stride).
    debug: bool,
    /// Unhardened caches with sheaves: `alloc`/`dealloc` try their
    /// restartable fast path (inline too, after the default's: the same
    /// code as the hardened one without its checks, so `slub-debug`
    /// compares like with like) before the full one.
    plain_sheaves: bool,
    /// Set by the pages' decay tick ([`decay_tick`]): the next slow path
    /// runs the idle shrink ([`shrink_idle`](Self::shrink_idle)).
    shrink_due: AtomicBool,
}

/// The pages' decay hook ([`GlobalBuddy::set_decay_hook`](buddy::GlobalBuddy::set_decay_hook),
/// at most every quarter of the decay time, from a slow path that may hold
/// a cache's locks): marks every registered instance's idle shrink due,
/// nothing else.
fn decay_tick() {
    for i in &INSTANCES {
        let p = i.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: only `'static` instances are registered (see
            // `INSTANCES`).
            unsafe { &*p }.shrink_due.store(true, Ordering::Relaxed);
        }
    }
}

impl GlobalSlub {
    /// An empty heap (memory is mapped on first use), with the default
    /// cache flags ([`GlobalSlub::DEFAULT_FLAGS`]).
    pub const fn new() -> Self {
        Self::with_flags(Self::DEFAULT_FLAGS)
    }

    /// The flags of [`new`](Self::new)'s caches: [`SlabFlags::HARDENED`]
    /// (encoded and checked free pointers and sheaf entries, bounded
    /// freelist walks, the free marker that refuses `a, b, a` double
    /// frees). Measured (`mm-bench --table slub-debug`, README): within 1%
    /// of no option in batches of 1024, +7% to +8% (median) one by one
    /// (179 against 173 instructions per pair, `ci/icount.sh`): the pairs
    /// are above the 5% the project accepts for a default, which the open
    /// part of issue #14 is about. Opt out with
    /// `GlobalSlub::with_flags(SlabFlags::NONE)`.
    pub const DEFAULT_FLAGS: SlabFlags = SlabFlags::HARDENED;

    /// An empty heap whose kmalloc caches have `flags`.
    pub const fn with_flags(flags: SlabFlags) -> Self {
        Self::with_config(flags, Self::DEFAULT_SHEAVES)
    }

    /// Per-CPU sheaves of [`new`](Self::new)'s caches: 128 objects (fewer
    /// for classes above 256 B, see
    /// [`kmalloc_sheaf_capacity`](crate::kmalloc_sheaf_capacity)). Measured
    /// (`mm-bench --table slub-prodcons`, README): one object at a time
    /// from a producer thread to a consumer thread, sheaves make GlobalSlub
    /// several times faster than its slab path, where every free is remote;
    /// the single-thread pair costs about the same either way (179 against
    /// 184 instructions with the default hardening, `ci/icount.sh`: the
    /// sheaf free validates by the CPU's last looked-up slab range instead
    /// of the CPU slab's).
    pub const DEFAULT_SHEAVES: usize = 128;

    /// An empty heap whose kmalloc caches have `flags` and per-CPU sheaves
    /// of `sheaf_capacity` objects (0: none).
    pub const fn with_config(flags: SlabFlags, sheaf_capacity: usize) -> Self {
        GlobalSlub {
            k: Kmalloc::with_config(
                GlobalPages,
                RseqCpu::new(),
                Geometry::new(SLOTS),
                flags,
                sheaf_capacity,
            ),
            hooked: AtomicBool::new(false),
            debug: flags.is_debug(),
            plain_sheaves: !flags.contains(SlabFlags::HARDENED)
                && !flags.is_debug()
                && sheaf_capacity != 0,
            shrink_due: AtomicBool::new(false),
        }
    }

    /// The kmalloc caches (kmalloc/kfree/ksize without sizes, reports,
    /// statistics, flushing).
    #[inline]
    pub fn kmalloc(&self) -> &Inner {
        self.register();
        &self.k
    }

    /// The pages underneath.
    pub fn pages(&self) -> &'static GlobalPcp {
        &PAGES
    }

    /// Gives free memory back to the OS (`malloc_trim`, `mi_collect`):
    /// flushes every CPU ([`Kmalloc::flush_all`]: each CPU's sheaves are
    /// exchanged out and the CPU fenced with `membarrier`, its CPU slab
    /// and partial slabs taken under its lock), shrinks the kmalloc caches (`kmem_cache_shrink`: empty
    /// slabs go back to the pages), then trims the shared pages
    /// ([`GlobalPcp::trim`]: pcp drain, buddy purge). Returns the bytes
    /// purged.
    pub fn trim(&self) -> usize {
        self.k.flush_all();
        self.k.shrink();
        PAGES.trim()
    }

    /// The whole heap's report: the kmalloc caches' (`/proc/slabinfo`
    /// lines and the summed counters, [`Kmalloc::report`]), then the
    /// pages' ([`Pcp::report`](pcp::Pcp::report): the per-CPU lists, and
    /// the buddy zone's free, purged and resident pages with its purge
    /// counts: the memory given back to the OS by `trim`, the decay and
    /// the resident cap).
    ///
    /// ```
    /// use core::alloc::{GlobalAlloc, Layout};
    /// static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();
    /// let l = Layout::from_size_align(100, 8).unwrap();
    /// // SAFETY: a valid layout; freed once below.
    /// let p = unsafe { HEAP.alloc(l) };
    /// // SAFETY: as above.
    /// unsafe { HEAP.dealloc(p, l) };
    /// HEAP.trim();
    /// let r = HEAP.report().to_string();
    /// assert!(r.contains("kmalloc-128 ") && r.contains("purged_bytes"));
    /// ```
    pub fn report(&self) -> impl core::fmt::Display + '_ {
        GlobalReport(self)
    }

    /// The idle shrink (the kernel's cache shrinking under memory
    /// pressure, here by time): every kmalloc cache that stopped allocating
    /// and discarding slabs since the last call is shrunk once
    /// ([`Kmalloc::shrink_idle`]: its sheaves and slabs flushed, its empty
    /// slabs back to the pages, whose decay gives them back to the OS).
    /// Runs by itself: the pages' decay tick (at most every quarter of the
    /// decay time, 1.25 s by default) marks it due for every registered
    /// instance (the `static` ones), and the instance's next allocation or
    /// free beyond the fast path runs it. Returns the slabs freed.
    pub fn shrink_idle(&self) -> usize {
        self.shrink_due.store(false, Ordering::Relaxed);
        self.k.shrink_idle()
    }

    /// The due idle shrink, from a slow path (no lock held).
    #[cold]
    #[inline(never)]
    fn shrink_idle_due(&self) {
        if self.shrink_due.swap(false, Ordering::Relaxed) {
            self.k.shrink_idle();
        }
    }

    /// Registers a `static` instance (its fork handlers) on first use
    /// (checked once per instance, then one relaxed load).
    ///
    /// `alloc` only gets `&self`, so it cannot know whether the instance
    /// will stay where it is: an instance in the main executable's image
    /// (a `static`, e.g. the `#[global_allocator]`) is registered; any
    /// other instance (a local, a field, a box) is not. Other `'static`
    /// instances (leaked boxes, statics of shared libraries) can register
    /// with [`flush_at_thread_exit`](Self::flush_at_thread_exit).
    #[inline(always)]
    fn register(&self) {
        if !self.hooked.load(Ordering::Relaxed) {
            self.register_slow();
        }
    }

    #[cold]
    fn register_slow(&self) {
        if self.hooked.swap(true, Ordering::AcqRel) {
            return;
        }
        // fork handlers (issue #14 item 13): the shared pages always.
        crate::fork::register_pages();
        if in_main_image((self as *const GlobalSlub).cast()) {
            // SAFETY: the instance is a static of the executable (see
            // `in_main_image`): it lives, unmoved, until the process ends.
            let me: &'static GlobalSlub = unsafe { &*(self as *const GlobalSlub) };
            me.flush_at_thread_exit();
        }
    }

    /// Registers this instance as the `static` instances of the executable
    /// register themselves: its `fork` handlers (issue #14). (On the
    /// per-thread platform this also flushed an exiting thread's slot; the
    /// caches are per CPU now and need no flush when a thread exits, the
    /// name is kept.) Takes `&'static self`: an instance that may move or
    /// be dropped cannot be registered. Registering twice is a no-op;
    /// `false` when 8 instances are already registered.
    pub fn flush_at_thread_exit(&'static self) -> bool {
        self.hooked.store(true, Ordering::Relaxed);
        // fork handlers (issue #14 item 13): its caches' locks, and the
        // pages underneath.
        crate::fork::register_pages();
        crate::fork::register_instance(self);
        // The idle shrink rides on the pages' decay tick.
        PAGES.pcp().source().set_decay_hook(decay_tick);
        let me = self as *const GlobalSlub as *mut GlobalSlub;
        if INSTANCES.iter().any(|i| i.load(Ordering::Acquire) == me) {
            return true;
        }
        for i in &INSTANCES {
            match i.compare_exchange(
                core::ptr::null_mut(),
                me,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(cur) if cur == me => return true,
                Err(_) => {}
            }
        }
        false
    }

    /// Whether this instance is registered (see
    /// [`flush_at_thread_exit`](Self::flush_at_thread_exit)).
    pub fn flushes_at_thread_exit(&self) -> bool {
        let me = self as *const GlobalSlub as *mut GlobalSlub;
        INSTANCES.iter().any(|i| i.load(Ordering::Acquire) == me)
    }

    /// The kmalloc caches without registering anything (fork handlers).
    pub(crate) fn kmalloc_caches(
        &self,
    ) -> &[crate::cache::KmemCache<GlobalPages, RseqCpu, SLOTS>; 13] {
        self.k.caches()
    }

    #[inline(always)]
    fn class(&self, layout: Layout) -> Option<usize> {
        if self.debug {
            self.k.class(layout.size(), layout.align())
        } else {
            kmalloc_class(layout.size(), layout.align())
        }
    }
    /// The cache of an 8-byte aligned `size` up to
    /// [`KMALLOC_MAX_CACHE_SIZE`]: one load of its byte offset from
    /// [`CACHE_OFFSET`] and an add (the class's byte and a multiply by the
    /// cache's size before: the multiply's three cycles sat on every
    /// fast path's chain of dependent steps, from the size to the
    /// entry).
    #[inline(always)]
    fn size_cache(&self, size: usize) -> &crate::cache::KmemCache<GlobalPages, RseqCpu, SLOTS> {
        debug_assert!(size <= KMALLOC_MAX_CACHE_SIZE);
        let off = CACHE_OFFSET[(size + 7) >> 3] as usize;
        // SAFETY: an offset of one of the caches of the array (built from
        // the classes, `kmalloc_class_is_an_index`), in bytes.
        unsafe { &*self.k.caches().as_ptr().byte_add(off) }
    }

    /// The cache of kmalloc class `i`, as [`kmalloc_class`] returns it,
    /// without a bounds check on the fast paths.
    #[inline(always)]
    fn class_cache(&self, i: usize) -> &crate::cache::KmemCache<GlobalPages, RseqCpu, SLOTS> {
        let caches = self.k.caches();
        debug_assert!(i < caches.len());
        // SAFETY: `kmalloc_class` returns indices of `KMALLOC_SIZES`, whose
        // length is the caches' (`kmalloc_class_is_an_index` checks every
        // size and alignment).
        unsafe { caches.get_unchecked(i) }
    }

    /// `alloc` after the inline pops failed (an 8-byte aligned layout up
    /// to the largest class): the slot pop of the hardened caches without
    /// a map tag, then [`alloc_slow`](Self::alloc_slow).
    #[inline(never)]
    unsafe fn alloc_after_fast(&self, layout: Layout) -> *mut u8 {
        let i = kmalloc_class_of(layout.size());
        // (A plain heap's slot was popped inline already: its pop does not
        // depend on a map tag.)
        if !self.plain_sheaves {
            if let Some(p) = self.class_cache(i).alloc_fast_slot::<true>() {
                return p.as_ptr();
            }
        }
        // SAFETY: forwarded.
        unsafe { self.alloc_slow(layout, Some(i)) }
    }

    /// `alloc` of an over-aligned or large layout: the class with the
    /// alignment, the checked pop, the plain or the hardened slot's pop,
    /// then [`alloc_slow`](Self::alloc_slow).
    #[inline(never)]
    unsafe fn alloc_general(&self, layout: Layout) -> *mut u8 {
        let class = kmalloc_class(layout.size(), layout.align());
        if let Some(i) = class {
            let c = self.class_cache(i);
            let p = match c.alloc_fast_checked() {
                Some(p) => Some(p),
                None if self.plain_sheaves => c.alloc_fast_slot::<false>(),
                None => c.alloc_fast_slot::<true>(),
            };
            if let Some(p) = p {
                return p.as_ptr();
            }
        }
        // SAFETY: forwarded.
        unsafe { self.alloc_slow(layout, class) }
    }

    /// `dealloc` after the inline frees left the object alone, as
    /// [`alloc_after_fast`](Self::alloc_after_fast).
    #[inline(never)]
    unsafe fn dealloc_after_fast(&self, ptr: *mut u8, layout: Layout) {
        let i = kmalloc_class_of(layout.size());
        let c = self.class_cache(i);
        let p = ptr.expose_provenance();
        // SAFETY: GlobalAlloc's contract; bad input is refused before any
        // change (or sent to the full path).
        let freed = unsafe {
            if self.plain_sheaves {
                c.try_free_fast_slot::<false>(p)
            } else {
                c.try_free_fast_slot::<true>(p)
            }
        };
        match freed {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => abort_bad_free(ptr, e),
        }
        // SAFETY: forwarded.
        unsafe { self.dealloc_slow(ptr, layout, Some(i)) }
    }

    /// `dealloc` of an over-aligned or large layout, as
    /// [`alloc_general`](Self::alloc_general).
    #[inline(never)]
    unsafe fn dealloc_general(&self, ptr: *mut u8, layout: Layout) {
        let class = kmalloc_class(layout.size(), layout.align());
        if let Some(i) = class {
            let c = self.class_cache(i);
            let p = ptr.expose_provenance();
            // SAFETY: GlobalAlloc's contract; bad input is refused before
            // any change (or sent to the full path).
            let freed = unsafe {
                match c.try_free_fast_checked(p) {
                    Ok(false) if self.plain_sheaves => c.try_free_fast_slot::<false>(p),
                    Ok(false) => c.try_free_fast_slot::<true>(p),
                    r => r,
                }
            };
            match freed {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => abort_bad_free(ptr, e),
            }
        }
        // SAFETY: forwarded.
        unsafe { self.dealloc_slow(ptr, layout, class) }
    }

    /// A free that [`free_fast_mapped`](crate::KmemCache::free_fast_mapped)
    /// validated and marked but could not push (the CPU's main sheaf full
    /// or missing): the sheaf slow path.
    ///
    /// # Safety
    ///
    /// `ptr` is the object of that `Unpushed` outcome, of `size` bytes (an
    /// 8-byte aligned layout up to the largest class), not freed since.
    #[inline(never)]
    unsafe fn dealloc_unpushed(&self, ptr: *mut u8, size: usize) {
        let c = self.class_cache(kmalloc_class_of(size));
        // SAFETY: the caller's contract (`free_fast_mapped` took a non-null
        // object).
        if let Err(e) = unsafe { c.free_unpushed(NonNull::new_unchecked(ptr)) } {
            abort_bad_free(ptr, e)
        }
    }

    /// `alloc` beyond the fast path: registration, the full dispatch, page
    /// allocations.
    /// `class`: `kmalloc_class` of the layout, as the fast path computed
    /// it (debug heaps choose again: their caches' strides differ).
    #[inline(never)]
    unsafe fn alloc_slow(&self, layout: Layout, class: Option<usize>) -> *mut u8 {
        if self.shrink_due.load(Ordering::Relaxed) {
            self.shrink_idle_due();
        }
        let class = if self.debug {
            self.class(layout)
        } else {
            class
        };
        match class {
            Some(i) => {
                self.register();
                match self.k.caches()[i].alloc() {
                    Some(p) => p.as_ptr(),
                    None => core::ptr::null_mut(),
                }
            }
            // SAFETY: GlobalAlloc's contract, forwarded.
            None => unsafe { PAGES.alloc(layout) },
        }
    }

    /// `dealloc` beyond the fast path: the full `try_free` (which reports
    /// bad input precisely), page frees.
    /// `class` as for [`alloc_slow`](Self::alloc_slow).
    #[inline(never)]
    unsafe fn dealloc_slow(&self, ptr: *mut u8, layout: Layout, class: Option<usize>) {
        if self.shrink_due.load(Ordering::Relaxed) {
            self.shrink_idle_due();
        }
        let class = if self.debug {
            self.class(layout)
        } else {
            class
        };
        match class {
            Some(i) => {
                let Some(p) = NonNull::new(ptr) else { return };
                // SAFETY: GlobalAlloc's contract; bad input is refused
                // before any change.
                if let Err(e) = unsafe { self.k.caches()[i].try_free(p) } {
                    abort_bad_free(ptr, e)
                }
            }
            // SAFETY: forwarded.
            None => unsafe { PAGES.dealloc(ptr, layout) },
        }
    }
}

impl Default for GlobalSlub {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for GlobalSlub {
    /// Registered instances are `'static` and never dropped; this only
    /// keeps the table clean should one be dropped anyway (e.g. a leaked
    /// box reclaimed by unsafe code).
    fn drop(&mut self) {
        let me = self as *mut GlobalSlub;
        for i in &INSTANCES {
            let _ = i.compare_exchange(
                me,
                core::ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

/// See [`GlobalSlub::report`].
struct GlobalReport<'a>(&'a GlobalSlub);

impl core::fmt::Display for GlobalReport<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0.k.report())?;
        write!(f, "{}", PAGES.pcp().report())
    }
}

/// Byte offset of the cache of each 8-byte step of size up to
/// [`KMALLOC_MAX_CACHE_SIZE`] in the caches' array (entry `(size + 7) >>
/// 3`, as the classes' table): 4 KiB of read-only data, of which a
/// program's sizes touch a few lines.
const CACHE_OFFSET: [u32; KMALLOC_MAX_CACHE_SIZE / 8 + 1] = {
    let stride = core::mem::size_of::<crate::cache::KmemCache<GlobalPages, RseqCpu, SLOTS>>();
    let mut t = [0u32; KMALLOC_MAX_CACHE_SIZE / 8 + 1];
    let mut i = 0;
    while i < t.len() {
        let off = crate::kmalloc::SIZE_CLASS[i] as usize * stride;
        assert!(off <= u32::MAX as usize);
        t[i] = off as u32;
        i += 1;
    }
    t
};

/// The alignment every kmalloc class guarantees (its smallest size): a
/// layout aligned to at most this takes its class by size alone.
const KMALLOC_MIN_ALIGN: usize = crate::kmalloc::KMALLOC_SIZES[0];

#[cold]
fn abort_bad_free(ptr: *mut u8, e: crate::error::FreeError) -> ! {
    die(format_args!("GlobalSlub: dealloc({ptr:p}): {e}"))
}

// SAFETY: kmalloc objects of a class are at least `size` long and aligned
// as the class guarantees (kmalloc_class); page blocks come from GlobalPcp,
// which honours every layout.
unsafe impl GlobalAlloc for GlobalSlub {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // The fast path: a sheaf pop on the running CPU, nothing else
        // (the instance registered itself when its cache was first used;
        // debug caches never pass `alloc_fast`'s dispatch check, so their
        // own class selection is left to the slow path). Inline: the
        // class of an 8-byte aligned size by one table load, the pop of
        // the hardened caches the page map names (all of them, unless a
        // program used up the map's tags first), or of the plain caches;
        // everything else is a tail call that computes the class again
        // rather than keep it live across the sections (with the slot
        // count an immediate, `__rust_alloc` then saves no register).
        if layout.align() <= KMALLOC_MIN_ALIGN && layout.size() <= KMALLOC_MAX_CACHE_SIZE {
            let c = self.size_cache(layout.size());
            let p = match c.alloc_fast_checked() {
                Some(p) => Some(p),
                None if self.plain_sheaves => c.alloc_fast_slot::<false>(),
                None => None,
            };
            if let Some(p) = p {
                return p.as_ptr();
            }
            if !c.has_fast_slot::<false>() && !c.has_fast_slot::<true>() {
                // (No sheaves, first use, debug: the full path at once.)
                // SAFETY: forwarded.
                return unsafe { self.alloc_slow(layout, Some(kmalloc_class_of(layout.size()))) };
            }
            // SAFETY: forwarded.
            return unsafe { self.alloc_after_fast(layout) };
        }
        // SAFETY: forwarded.
        unsafe { self.alloc_general(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.class(layout) {
            Some(_) => {
                // SAFETY: forwarded.
                let p = unsafe { self.alloc(layout) };
                if !p.is_null() {
                    // SAFETY: a fresh allocation of `layout.size()` bytes.
                    unsafe { p.write_bytes(0, layout.size()) };
                }
                p
            }
            // SAFETY: forwarded; the pcp skips clearing known-zero pages.
            None => unsafe { PAGES.alloc_zeroed(layout) },
        }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // The fast path: validated by the page map, marked free, pushed
        // onto the running CPU's sheaf, as one restartable section calling
        // nothing (`free_fast_mapped`); or the plain caches' push. (Debug
        // caches fail the dispatch checks.) (A null `ptr` is no object:
        // the fast path sends it on, and the slow path ignores it.) The
        // rest as in `alloc`.
        if layout.align() <= KMALLOC_MIN_ALIGN && layout.size() <= KMALLOC_MAX_CACHE_SIZE {
            let c = self.size_cache(layout.size());
            let p = ptr.expose_provenance();
            // SAFETY: GlobalAlloc's contract; bad input is refused before
            // any change (or sent to the full path, which reports it).
            match unsafe { c.free_fast_mapped(p) } {
                FastFree::Freed => return,
                // SAFETY: the object `free_fast_mapped` left marked. (The
                // size alone: one value fewer live across the section.)
                FastFree::Unpushed => return unsafe { self.dealloc_unpushed(ptr, layout.size()) },
                FastFree::Slow if self.plain_sheaves => {
                    // SAFETY: as above.
                    match unsafe { c.free_fast_mapped_plain(p) } {
                        FastFree::Freed => return,
                        FastFree::Unpushed => {
                            // SAFETY: the object `free_fast_mapped_plain`
                            // left validated, not pushed.
                            return unsafe { self.dealloc_unpushed(ptr, layout.size()) };
                        }
                        FastFree::Slow => {}
                    }
                }
                FastFree::Slow => {}
            }
            if !c.has_fast_slot::<false>() && !c.has_fast_slot::<true>() {
                // (No sheaves, first use, debug: the full path at once.)
                // SAFETY: forwarded.
                return unsafe {
                    self.dealloc_slow(ptr, layout, Some(kmalloc_class_of(layout.size())))
                };
            }
            // SAFETY: forwarded.
            return unsafe { self.dealloc_after_fast(ptr, layout) };
        }
        // SAFETY: forwarded.
        unsafe { self.dealloc_general(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = self.class(layout);
        // SAFETY: GlobalAlloc::realloc's contract makes this layout valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = self.class(new_layout);
        match (old, new) {
            (Some(a), Some(b)) if a == b => ptr,
            // SAFETY: forwarded; both are page allocations.
            (None, None) => unsafe { PAGES.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: forwarded.
                let q = unsafe { self.alloc(new_layout) };
                if !q.is_null() {
                    let n = layout.size().min(new_size);
                    // SAFETY: both live, distinct, at least `n` long.
                    unsafe {
                        core::ptr::copy_nonoverlapping(ptr, q, n);
                        self.dealloc(ptr, layout);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast paths' cache by byte offset is the class's cache for
    /// every size they take (1..=8192 B, 8-byte aligned). Under miri the
    /// first, a middle and the last class only (each reference to the
    /// caches retags all of them there: a second per size).
    #[test]
    fn size_cache_is_the_class_cache_at_every_size() {
        static H: GlobalSlub = GlobalSlub::new();
        let sizes =
            (1..=KMALLOC_MAX_CACHE_SIZE).filter(|&s| !cfg!(miri) || [1, 96, 8192].contains(&s));
        for size in sizes {
            let class = kmalloc_class(size, 8).expect("a class");
            assert!(
                core::ptr::eq(H.size_cache(size), H.class_cache(class)),
                "size {size}"
            );
            assert!(H.size_cache(size).object_size() >= size, "size {size}");
        }
    }
}
