//! `GlobalPcp`: per-CPU page lists over the mmap-backed `GlobalBuddy`, as a
//! `#[global_allocator]`.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use buddy::{AllocFlags, Block, BlockRef, Buddy, FreeFlags, GlobalBuddy, Order, PageAlloc, ZoneId};
use local_lock::std_platform::{PerThread, StdCpu};
use local_lock::Platform;

use crate::error::{BadFree, BadFreeKind};
use crate::pcp::{PageSource, Pcp, Policy};

/// Default `batch` of the std heap: what a large zone gets with 4 KiB pages
/// (the heap's zone grows from nothing, so the kernel's formula would start
/// at 1).
pub const GLOBAL_BATCH: usize = 63;
/// Default `high` of the std heap (six batches per thread slot).
pub const GLOBAL_HIGH: usize = 6 * GLOBAL_BATCH;

/// Per-CPU page lists over [`GlobalBuddy`], usable as `#[global_allocator]`.
///
/// ```no_run
/// #[global_allocator]
/// static HEAP: pcp::GlobalPcp = pcp::GlobalPcp::new();
/// ```
///
/// Page-granular: every request takes at least a 4 KiB page. Requests of
/// orders 0..=3 go through the calling thread's lists ([`PerThread`]
/// slots: no atomic instruction on the fast path), orders up to 10 to the
/// buddy, anything larger to a direct mapping. `alloc_zeroed` takes known
/// zero pages (the zero list; fresh memory from the OS is known zero).
/// Allocation failure returns null; a bad `dealloc` (foreign pointer, double
/// free) is reported on stderr and aborts (a global allocator must not
/// unwind). A thread's slot keeps its pages when the thread exits and hands
/// them to the next thread that takes the slot; [`drain`](Self::drain)
/// returns them.
pub struct GlobalPcp {
    pcp: Pcp<GlobalBuddy, PerThread>,
}

impl GlobalPcp {
    /// An empty heap (memory is mapped on first use).
    ///
    /// ```
    /// # // miri cannot reserve the heap (no getrlimit, mmap).
    /// # #[cfg(not(miri))] {
    /// use core::alloc::{GlobalAlloc, Layout};
    /// static PAGES: pcp::GlobalPcp = pcp::GlobalPcp::new();
    /// let page = Layout::from_size_align(4096, 4096).unwrap();
    /// // SAFETY: a layout of non-zero size.
    /// let p = unsafe { PAGES.alloc_zeroed(page) };
    /// assert!(!p.is_null() && p as usize % 4096 == 0);
    /// // SAFETY: `p` is a zeroed page of ours, freed once.
    /// unsafe {
    ///     assert_eq!(*p.add(4095), 0);
    ///     PAGES.dealloc(p, page);
    /// }
    /// // The page went to this thread's lists (with the rest of the refill),
    /// // not to the buddy; a drain returns them.
    /// assert!(PAGES.pcp().local_lists().count > 0);
    /// assert!(PAGES.drain() > 0);
    /// assert_eq!(PAGES.pcp().local_lists().count, 0);
    /// # }
    /// ```
    pub const fn new() -> Self {
        Self::with_config(buddy::GLOBAL_CONFIG)
    }

    /// An empty heap over a [`GlobalBuddy`] of another shape
    /// ([`GlobalBuddy::with_config`]), e.g. another purge policy
    /// ([`Config::with_purge`](buddy::Config::with_purge): a shorter
    /// decay, no decay).
    pub const fn with_config(config: buddy::Config) -> Self {
        GlobalPcp {
            pcp: Pcp::new_tuned(
                GlobalBuddy::with_config(config),
                ZoneId::new(0),
                PerThread::new(),
                Policy::IrqSafe,
                Some((GLOBAL_BATCH, GLOBAL_HIGH)),
            ),
        }
    }

    /// The per-CPU lists (statistics, reports, tuning).
    pub fn pcp(&self) -> &Pcp<GlobalBuddy, PerThread> {
        &self.pcp
    }

    /// The buddy underneath.
    pub fn buddy(&self) -> &Buddy<StdCpu> {
        self.pcp.buddy()
    }

    /// Returns the calling thread's pages and those of exited threads'
    /// slots to the buddy; returns the pages freed.
    pub fn drain(&self) -> usize {
        self.pcp.drain_local() + self.pcp.drain_all().0
    }

    /// Gives free memory back to the OS (`malloc_trim`): [`drain`](Self::drain)s
    /// every list it can reach, then purges the buddy's free blocks at or
    /// above its purge order ([`GlobalBuddy::trim`]). Returns the bytes
    /// purged. Live threads' lists keep their pages (up to the pcp `high`
    /// each).
    pub fn trim(&self) -> usize {
        self.drain();
        self.pcp.source().trim()
    }

    #[inline(always)]
    fn order(&self, layout: Layout) -> Option<Order> {
        self.pcp
            .buddy()
            .config()
            .order_for(layout.size(), layout.align())
    }

    #[inline(always)]
    fn alloc_flags(&self, layout: Layout, flags: AllocFlags) -> *mut u8 {
        crate::fork::register(self); // fork handlers (issue #14 item 13)
        match self.order(layout) {
            Some(order) => match self.pcp.alloc(order, flags) {
                Some(p) => p.ptr.as_ptr(),
                // The heap cannot grow (no reservation fits what is left of
                // the address space): a direct mapping of the block's size,
                // fresh and zero (null if `mmap` refuses too).
                None => self.pcp.source().alloc_block_direct(order, layout.align()),
            },
            // SAFETY: forwarded GlobalAlloc contract (direct mapping).
            None => unsafe {
                if flags.contains(AllocFlags::ZEROED) {
                    self.pcp.source().alloc_zeroed(layout)
                } else {
                    self.pcp.source().alloc(layout)
                }
            },
        }
    }
}

// SAFETY: forwarded to the pcp (`PageAlloc for Pcp`).
unsafe impl PageAlloc for GlobalPcp {
    #[inline(always)]
    fn page_size(&self) -> usize {
        self.pcp.page_size()
    }
    #[inline(always)]
    fn max_order(&self) -> Order {
        self.pcp.max_order()
    }
    // Out of line: its callers are slow paths (a new slab, a large block),
    // and the pcp's allocation inlined into each of them cost the C
    // drop-in 7.6 KiB of the text every process has resident (slub's
    // `new_slab` 1.8 -> 7.5 KiB, `large::alloc` 0.3 -> 2.2 KiB; issue #18).
    #[inline(never)]
    fn alloc_block(&self, order: Order, flags: AllocFlags) -> Option<Block<'_>> {
        self.pcp.alloc_block(order, flags)
    }
    #[inline(always)]
    unsafe fn free_block(&self, ptr: NonNull<u8>, order: Order) {
        // SAFETY: forwarded.
        unsafe { self.pcp.free(ptr, order, FreeFlags::NONE) }
    }
    #[inline(always)]
    fn block_of(&self, addr: *const u8) -> Option<BlockRef<'_>> {
        self.pcp.buddy().owner_of(addr)
    }
    const PRIVATE_META: bool = <GlobalBuddy as PageAlloc>::PRIVATE_META;
    fn alloc_private(&self, bytes: usize) -> Option<core::ptr::NonNull<u8>> {
        self.pcp.source().alloc_private(bytes)
    }
    unsafe fn free_private(&self, ptr: core::ptr::NonNull<u8>, bytes: usize) {
        // SAFETY: forwarded.
        unsafe { self.pcp.source().free_private(ptr, bytes) }
    }
    fn has_page_tags(&self) -> bool {
        self.pcp.source().has_page_tags()
    }
    #[inline(always)]
    fn page_tag(&self, addr: *const u8) -> u8 {
        self.pcp.source().page_tag(addr)
    }
    #[inline(always)]
    fn set_page_tags(&self, head: core::ptr::NonNull<u8>, order: Order, tag: u8) {
        self.pcp.source().set_page_tags(head, order, tag)
    }
    fn page_map(&self) -> Option<buddy::PageMapView> {
        self.pcp.source().page_map()
    }
}

impl Default for GlobalPcp {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks are naturally aligned blocks of at least `size` and
// `align` bytes from the buddy, or direct mappings from GlobalBuddy; every
// path returns null on exhaustion and none unwinds (bad frees abort).
unsafe impl GlobalAlloc for GlobalPcp {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.alloc_flags(layout, AllocFlags::NONE)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.alloc_flags(layout, AllocFlags::ZEROED)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(p) = NonNull::new(ptr) else { return };
        match self.order(layout) {
            Some(order) => {
                // SAFETY: GlobalAlloc's contract; a bad block is rejected
                // before any change.
                if let Err(e) = unsafe { self.pcp.try_free(p, order, FreeFlags::NONE) } {
                    // Not a buddy block: one served as a direct mapping when
                    // the heap could not grow?
                    if e.kind == BadFreeKind::NotAllocated {
                        // SAFETY: GlobalAlloc's contract: if `ptr` is such a
                        // mapping, it is this block, given up.
                        if unsafe { self.pcp.source().free_block_direct(ptr, order) } {
                            return;
                        }
                    }
                    abort_bad_free(e)
                }
            }
            // SAFETY: a direct mapping of this layout (GlobalAlloc's contract).
            None => unsafe { self.pcp.source().dealloc(ptr, layout) },
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = self.order(layout);
        // SAFETY: GlobalAlloc::realloc's contract makes this layout valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if old.is_some() && old == self.order(new_layout) {
            return ptr; // same block size: in place
        }
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both valid for the copied length, distinct blocks.
            unsafe {
                ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Reports a bad free without allocating, then aborts.
#[cold]
#[inline(never)]
fn abort_bad_free(e: BadFree) -> ! {
    local_lock::std_platform::die(format_args!("{e}"))
}

/// Starts the optional background-zeroing helper of seed 003 for a pcp on
/// real CPUs (the locked strategy, so the helper may reach every CPU's
/// lists): every `interval` it decays each CPU's tuned `high`
/// ([`Pcp::decay_pcp_high_cpu`], the kernel's vmstat refresh) and moves up
/// to `budget` cold pages per CPU to the zero list by clearing them, until
/// `stop` becomes true. (Per-thread
/// platforms cannot lend their lists to another thread; there each thread
/// calls [`Pcp::prezero`] from its own idle points.)
pub fn spawn_prezero_thread<S: PageSource + Send + 'static, const N: usize>(
    pcp: &'static Pcp<S, StdCpu, N>,
    budget: usize,
    interval: std::time::Duration,
    stop: &'static core::sync::atomic::AtomicBool,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut total = 0;
        while !stop.load(core::sync::atomic::Ordering::Acquire) {
            for cpu in 0..N.min(pcp.platform().nr_cpus()) {
                // The vmstat refresh's part: decay an idle CPU's tuned high.
                let _ = pcp.decay_pcp_high_cpu(cpu);
                total += pcp.prezero_cpu(cpu, budget).unwrap_or(0);
            }
            std::thread::sleep(interval);
        }
        total
    })
}
