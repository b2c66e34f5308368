//! Chunk sources: where chunk memory and chunk metadata come from.
//!
//! The kernel gets a chunk's address space from vmalloc (`pcpu_get_vm_areas`),
//! its pages from the page allocator when populating, and its metadata from
//! `pcpu_mem_zalloc`. Here one trait covers all three so the allocator can
//! sit on a buddy allocator, a kernel's frame allocator, `mmap`, or (tests)
//! the host heap.

use core::ptr::NonNull;

#[cfg(feature = "std")]
use local_lock::os;

#[cfg(feature = "std")]
use crate::types::PAGE_SIZE;

/// What the percpu allocator takes its chunks from: page-granular
/// reservations (a chunk's units, its metadata, the address lookup table)
/// and the population and depopulation of a chunk's pages.
///
/// # Safety
///
/// Implementations must keep these promises, on which the allocator's
/// memory safety rests:
///
/// 1. [`alloc_pages`](Self::alloc_pages) returns `pages * PAGE_SIZE` bytes
///    aligned to `align` (a power of two, at least `PAGE_SIZE`), readable and
///    writable (while populated, see below), not used by anyone else until
///    they are handed back to [`free_pages`](Self::free_pages).
/// 2. After [`populate`](Self::populate) returned `true` for a range, the
///    range is readable and writable until [`depopulate`](Self::depopulate)
///    or `free_pages`; memory fresh from `alloc_pages` counts as populated
///    for sources whose `populate` does nothing. Contents after `depopulate`
///    are unspecified (the allocator clears every area it hands out, except
///    bytes promise 4 says are zero).
/// 3. No method calls back into the allocator that owns the source
///    (re-entrancy): they run with the allocator's slow lock
///    (`pcpu_alloc_mutex`) held, never with its data lock (`pcpu_lock`) held.
/// 4. If [`populates_zeroed`](Self::populates_zeroed) returns `true`,
///    every byte of a range reads as zero right after `populate` returned
///    `true` for it (whether the range is fresh from `alloc_pages` or was
///    depopulated before). The allocator then does not clear areas on such
///    pages until it has handed the bytes out once.
///
/// # Examples
///
/// A source over the host heap that counts its reservations (memory from
/// `alloc_pages` is usable at once, so the default `populate` fits):
///
/// ```
/// use std::alloc::{alloc_zeroed, dealloc, Layout};
/// use std::ptr::NonNull;
/// use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{ChunkSource, Config, PcpuAllocator, PAGE_SIZE};
///
/// #[derive(Default)]
/// struct Counting {
///     pages: AtomicUsize,
/// }
/// // SAFETY: fresh heap memory of the size and alignment asked for,
/// // returned with the same layout; the host allocator never calls back.
/// unsafe impl ChunkSource for Counting {
///     fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>> {
///         let layout = Layout::from_size_align(pages * PAGE_SIZE, align).ok()?;
///         // SAFETY: non-zero size.
///         let p = NonNull::new(unsafe { alloc_zeroed(layout) })?;
///         self.pages.fetch_add(pages, Relaxed);
///         Some(p)
///     }
///     unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, align: usize) {
///         self.pages.fetch_sub(pages, Relaxed);
///         let layout = Layout::from_size_align(pages * PAGE_SIZE, align).unwrap();
///         // SAFETY: one earlier `alloc_pages` with this layout (caller's contract).
///         unsafe { dealloc(ptr.as_ptr(), layout) }
///     }
/// }
///
/// let a = PcpuAllocator::new(StdCpu::new(), Counting::default(), Config::new(64 << 10).units(2)).unwrap();
/// assert_eq!(a.source().pages.load(Relaxed), 0, "no chunk yet");
/// let p = a.alloc(128, 8).unwrap();
/// assert!(a.source().pages.load(Relaxed) >= 2 * 16, "a chunk: two 64 KiB units");
/// a.free(p);
/// ```
pub unsafe trait ChunkSource: Sync {
    /// Allocates `pages` pages aligned to `align` bytes.
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>>;

    /// Returns pages from [`alloc_pages`](Self::alloc_pages).
    ///
    /// # Safety
    ///
    /// `ptr`, `pages` and `align` are exactly those of one earlier
    /// `alloc_pages` call whose memory is no longer used.
    unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, align: usize);

    /// Backs `pages` pages at `ptr` with memory (`pcpu_populate_chunk` for
    /// one unit). Returns `false` if it cannot. The default does nothing:
    /// memory from `alloc_pages` is usable as it is.
    ///
    /// # Safety
    ///
    /// The range lies inside one live `alloc_pages` allocation.
    unsafe fn populate(&self, ptr: NonNull<u8>, pages: usize) -> bool {
        let _ = (ptr, pages);
        true
    }

    /// [`populate`](Self::populate) for a unit whose CPU is on NUMA node
    /// `node` (`Platform::cpu_to_node`): a kernel backs the pages from
    /// that node's memory, as `pcpu_alloc_pages` does with
    /// `alloc_pages_node(cpu_to_node(cpu), ...)`. The allocator calls
    /// this, never `populate` directly; the default ignores the node.
    ///
    /// # Safety
    ///
    /// As [`populate`](Self::populate).
    unsafe fn populate_node(&self, ptr: NonNull<u8>, pages: usize, node: usize) -> bool {
        let _ = node;
        // SAFETY: forwarded contract.
        unsafe { self.populate(ptr, pages) }
    }

    /// Releases the backing of `pages` pages at `ptr`
    /// (`pcpu_depopulate_chunk` for one unit); the range stays reserved.
    ///
    /// # Safety
    ///
    /// The range lies inside one live `alloc_pages` allocation and holds no
    /// live data.
    unsafe fn depopulate(&self, ptr: NonNull<u8>, pages: usize) {
        let _ = (ptr, pages);
    }

    /// Whether freshly populated pages read as zero (promise 4). The
    /// default, `false`, makes the allocator clear every area it hands
    /// out, as the kernel does.
    fn populates_zeroed(&self) -> bool {
        false
    }
}

// SAFETY: forwards to `T`, which keeps the promises.
unsafe impl<T: ChunkSource + ?Sized> ChunkSource for &T {
    #[inline]
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>> {
        (**self).alloc_pages(pages, align)
    }
    #[inline]
    unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, align: usize) {
        // SAFETY: forwarded contract.
        unsafe { (**self).free_pages(ptr, pages, align) }
    }
    #[inline]
    unsafe fn populate(&self, ptr: NonNull<u8>, pages: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { (**self).populate(ptr, pages) }
    }
    #[inline]
    unsafe fn populate_node(&self, ptr: NonNull<u8>, pages: usize, node: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { (**self).populate_node(ptr, pages, node) }
    }
    #[inline]
    unsafe fn depopulate(&self, ptr: NonNull<u8>, pages: usize) {
        // SAFETY: forwarded contract.
        unsafe { (**self).depopulate(ptr, pages) }
    }
    #[inline]
    fn populates_zeroed(&self) -> bool {
        (**self).populates_zeroed()
    }
}

// ---------------------------------------------------------------------
// Heap source (tests, miri, loom)
// ---------------------------------------------------------------------

#[cfg(any(feature = "std", test))]
pub use heap::{HeapSource, DEPOPULATE_POISON};

#[cfg(any(feature = "std", test))]
mod heap {
    extern crate std;

    use core::ptr::NonNull;
    use std::alloc::{alloc_zeroed, dealloc, Layout};

    use super::ChunkSource;
    use crate::types::PAGE_SIZE;
    use local_lock::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Byte written over depopulated pages, so a test that reads an area
    /// the allocator should have zeroed (or memory it depopulated while
    /// still in use) sees garbage instead of zeroes.
    pub const DEPOPULATE_POISON: u8 = 0x6b;

    /// A chunk source over the host heap (`std::alloc`), for tests, miri and
    /// loom. Counts pages, can be given a page budget, can fail
    /// populations on demand, and poisons depopulated pages.
    ///
    /// ```
    /// use local_lock::std_platform::StdCpu;
    /// use percpu_bitmap::{Config, HeapSource, PcpuAllocator, PcpuError};
    ///
    /// let cfg = Config::new(64 << 10).units(2);
    /// let a = PcpuAllocator::new(StdCpu::new(), HeapSource::new(), cfg).unwrap();
    /// let p = a.alloc(8, 8).unwrap();
    /// assert!(a.source().pages_in_use() > 0, "a chunk came from the heap");
    /// a.free(p);
    /// // A page budget too small for a chunk: the allocator runs out.
    /// let tiny = PcpuAllocator::new(StdCpu::new(), HeapSource::with_limit(1), cfg).unwrap();
    /// assert_eq!(tiny.alloc(8, 8), Err(PcpuError::NoMemory));
    /// ```
    #[derive(Debug)]
    pub struct HeapSource {
        limit: usize,
        used: AtomicUsize,
        populated_calls: AtomicUsize,
        depopulated_pages: AtomicUsize,
        fail_populate: AtomicUsize,
    }

    impl Default for HeapSource {
        fn default() -> Self {
            Self::new()
        }
    }

    impl HeapSource {
        /// An unlimited heap source.
        pub fn new() -> Self {
            Self::with_limit(usize::MAX)
        }

        /// A heap source that refuses to have more than `pages` pages out.
        pub fn with_limit(pages: usize) -> Self {
            HeapSource {
                limit: pages,
                used: AtomicUsize::new(0),
                populated_calls: AtomicUsize::new(0),
                depopulated_pages: AtomicUsize::new(0),
                fail_populate: AtomicUsize::new(0),
            }
        }

        /// Pages currently allocated from this source.
        pub fn pages_in_use(&self) -> usize {
            self.used.load(Relaxed)
        }

        /// Calls to `populate` so far.
        pub fn populate_calls(&self) -> usize {
            self.populated_calls.load(Relaxed)
        }

        /// Pages depopulated so far.
        pub fn depopulated_pages(&self) -> usize {
            self.depopulated_pages.load(Relaxed)
        }

        /// Makes the next `n` calls to `populate` fail.
        pub fn fail_next_populates(&self, n: usize) {
            self.fail_populate.store(n, Relaxed);
        }
    }

    // SAFETY: memory comes from `alloc_zeroed` with the requested size and
    // alignment and is owned by the caller until `free_pages`, which
    // deallocates it with the same layout; it is always accessible
    // (populate does nothing to it); no method calls any allocator but the
    // host's.
    unsafe impl ChunkSource for HeapSource {
        fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>> {
            let prev = self.used.fetch_add(pages, Relaxed);
            if prev.checked_add(pages).is_none_or(|n| n > self.limit) {
                self.used.fetch_sub(pages, Relaxed);
                return None;
            }
            let layout =
                Layout::from_size_align(pages.checked_mul(PAGE_SIZE)?, align.max(PAGE_SIZE))
                    .ok()?;
            // SAFETY: the layout has a non-zero size (pages >= 1 by the
            // allocator's construction) and a valid alignment.
            let p = NonNull::new(unsafe { alloc_zeroed(layout) });
            if p.is_none() {
                self.used.fetch_sub(pages, Relaxed);
            }
            p
        }

        unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, align: usize) {
            self.used.fetch_sub(pages, Relaxed);
            let layout = Layout::from_size_align(pages * PAGE_SIZE, align.max(PAGE_SIZE))
                .expect("HeapSource: layout of a freed range");
            // SAFETY: the caller hands back exactly one earlier allocation,
            // made with this layout.
            unsafe { dealloc(ptr.as_ptr(), layout) }
        }

        unsafe fn populate(&self, _ptr: NonNull<u8>, _pages: usize) -> bool {
            self.populated_calls.fetch_add(1, Relaxed);
            let f = self.fail_populate.load(Relaxed);
            if f > 0 {
                self.fail_populate.store(f - 1, Relaxed);
                return false;
            }
            true
        }

        unsafe fn depopulate(&self, ptr: NonNull<u8>, pages: usize) {
            self.depopulated_pages.fetch_add(pages, Relaxed);
            // SAFETY: the range is inside a live allocation of ours and
            // holds no live data (caller).
            unsafe { core::ptr::write_bytes(ptr.as_ptr(), DEPOPULATE_POISON, pages * PAGE_SIZE) }
        }
    }
}

// ---------------------------------------------------------------------
// mmap source (std)
// ---------------------------------------------------------------------

/// Anonymous `mmap` memory: address space is reserved with `MAP_NORESERVE`
/// (unless [`committed`](Self::committed)) and faults in on first touch (so
/// `populate` is a no-op unless prefaulting is asked for); `depopulate` is
/// `madvise(MADV_DONTNEED)`; `free_pages` is `munmap`. Never calls the
/// global allocator, so it can back a `#[global_allocator]`.
///
/// ```
/// use local_lock::std_platform::StdCpu;
/// use percpu_bitmap::{MmapSource, PcpuAllocator};
///
/// // Four units of 64 KiB per chunk, in a `static`.
/// static PCPU: PcpuAllocator<StdCpu, MmapSource> =
///     PcpuAllocator::new_dynamic(StdCpu::new(), MmapSource::new(), 64 << 10, 4);
/// let p = PCPU.alloc(64, 64).unwrap();
/// for cpu in 0..4 {
///     // SAFETY: 64 live bytes in every unit.
///     unsafe { PCPU.per_cpu_ptr(p, cpu).cast::<u64>().write(cpu as u64 + 1) };
/// }
/// // SAFETY: as above; the mapping faulted in on first touch.
/// assert_eq!(unsafe { PCPU.per_cpu_ptr(p, 3).cast::<u64>().read() }, 4);
/// PCPU.free(p);
/// ```
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapSource {
    prefault: bool,
    huge: bool,
    committed: bool,
}

#[cfg(feature = "std")]
impl MmapSource {
    /// A source that lets pages fault in lazily.
    pub const fn new() -> Self {
        MmapSource {
            prefault: false,
            huge: false,
            committed: false,
        }
    }

    /// A source whose `populate` prefaults the pages
    /// (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14+; ignored where
    /// unsupported), as the kernel allocates real pages when populating.
    pub const fn prefaulting() -> Self {
        MmapSource {
            prefault: true,
            huge: false,
            committed: false,
        }
    }

    /// Also asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on
    /// mappings of 2 MiB or more: with units of 2 MiB (chunks aligned to
    /// 2 MiB) first touches fault in 2 MiB at a time. Depopulating a 4 KiB
    /// page splits the huge page.
    pub const fn huge_pages(self) -> Self {
        MmapSource { huge: true, ..self }
    }

    /// Maps without `MAP_NORESERVE`: the OS's overcommit accounting sees
    /// every mapping, and `alloc_pages` fails (instead of handing out
    /// memory the process is killed for touching) where the OS would not
    /// back it. For memory handed to users (`GlobalBitmap`).
    pub const fn committed(self) -> Self {
        MmapSource {
            committed: true,
            ..self
        }
    }
}

#[cfg(feature = "std")]
// SAFETY: mmap returns fresh private anonymous memory, trimmed to the
// requested alignment; it stays mapped (readable and writable) until
// `free_pages` unmaps exactly it; MADV_DONTNEED keeps the mapping (contents
// become zero); nothing here allocates from any Rust allocator.
unsafe impl ChunkSource for MmapSource {
    fn alloc_pages(&self, pages: usize, align: usize) -> Option<NonNull<u8>> {
        let align = align.max(PAGE_SIZE);
        let len = pages.checked_mul(PAGE_SIZE)?;
        let extra = if self.committed {
            0
        } else {
            libc::MAP_NORESERVE
        };
        let p = os::map_aligned(len, align, libc::PROT_READ | libc::PROT_WRITE, extra);
        #[cfg(target_os = "linux")]
        if self.huge && len >= 2 << 20 && !p.is_null() {
            // SAFETY: the range is the mapping just created.
            unsafe { libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE) };
        }
        NonNull::new(p)
    }

    unsafe fn free_pages(&self, ptr: NonNull<u8>, pages: usize, _align: usize) {
        // SAFETY: the caller hands back exactly one mapping of ours.
        unsafe { os::unmap(ptr.as_ptr(), pages * PAGE_SIZE) };
    }

    unsafe fn populate(&self, ptr: NonNull<u8>, pages: usize) -> bool {
        #[cfg(target_os = "linux")]
        if self.prefault {
            const MADV_POPULATE_WRITE: libc::c_int = 23;
            // SAFETY: the range is inside one of our mappings (caller);
            // failure (old kernels) just leaves the pages to fault lazily.
            unsafe { libc::madvise(ptr.as_ptr().cast(), pages * PAGE_SIZE, MADV_POPULATE_WRITE) };
        }
        let _ = (ptr, pages);
        true
    }

    unsafe fn depopulate(&self, ptr: NonNull<u8>, pages: usize) {
        // SAFETY: the range is inside one of our mappings and holds no live
        // data (caller).
        unsafe { libc::madvise(ptr.as_ptr().cast(), pages * PAGE_SIZE, libc::MADV_DONTNEED) };
    }

    /// Fresh anonymous memory reads as zero, and so does memory after
    /// `MADV_DONTNEED` (private anonymous mapping).
    fn populates_zeroed(&self) -> bool {
        true
    }
}
