//! The pages under mm-malloc: a pcp over a buddy of the library's own
//! ([`pages`]), not slub's shared `GlobalPages`, so that its purge policy
//! can be a C allocator's ([`PURGE`]) while Rust programs' `GlobalSlub`
//! keeps the std heap's. Its caches take `pages()` as their page source
//! (`PageAlloc for &T`); large blocks and direct mappings go to it (and
//! to its buddy, [`heap`]) directly.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use buddy::{Config, GlobalBuddy, PurgePolicy, GLOBAL_CONFIG};
use local_lock::fork::{level, ForkLocks};
use pcp::GlobalPcp;

/// When free pages go back to the OS (`madvise(MADV_DONTNEED)`): free
/// blocks of 32 KiB and more (order 3: the largest slab) are purged once
/// more than 128 KiB of them stays resident (glibc's `M_TRIM_THRESHOLD`,
/// above which it returns the top of its heap at once; checked whenever
/// half of it was freed in large blocks), and any left free for 100 ms
/// (mimalloc purges after 10 ms). The std heap's default keeps up to 32
/// MiB resident, blocks of 2 MiB and more only, for 5 s: with it a C
/// program's peak RSS was 1.27x glibc's (python's stdlib tests; measured
/// in the crate's notes). With 1 MiB (256 pages), the median peak RSS of
/// `scripts/programs.sh`'s git session (its largest process, `git
/// pack-objects` of `gc --aggressive`, two threads) was 6528 KiB, 6288
/// with 128 KiB (glibc 5440; 5 rounds; 64 pages: about 6560, 16: 6352,
/// and purging from order 2 or 0 on instead of 3 did not help), python's
/// stdlib tests and sqlite3 unchanged in time and RSS.
///
/// The cap grows with the heap: up to an eighth of the pages in use stay
/// resident when free (`resident_shift` 3), so a large working set is not
/// purged and faulted in again and again while a small program's cap stays
/// 128 KiB. Measured (page faults, peak RSS): python's stdlib tests 111.7k
/// -> 101.8k faults (shift 2: 98.4k, 1: 97.5k; glibc 62k, mimalloc 82k),
/// 52.6-53.0 -> 53.0-53.6 MB; sqlite3 23.2k -> 22.4k, 55.7-55.8 MB either
/// way; git, forks unchanged (their heaps are below 1 MiB).
pub const PURGE: PurgePolicy = PurgePolicy {
    order: 3,
    decay_ms: Some(100),
    max_resident_pages: Some(MAX_RESIDENT_FREE_PAGES),
    resident_shift: Some(3),
    ..PurgePolicy::DEFAULT
};

/// [`PURGE`]'s cap of resident free pages (128 KiB).
pub const MAX_RESIDENT_FREE_PAGES: usize = 32;

/// The per-CPU page lists' `(batch, high)` (set at init,
/// `Pcp::set_batch_high`): at most 63 free pages (252 KiB) stay on a
/// CPU's lists instead of the std heap's 378 (1.5 MiB): pages freed there
/// are resident (the buddy's purge never sees them), and a C program's
/// peak RSS counts them (measured, `git log -p` of the benchmark's
/// repository: peak RSS 7872 -> 7660 KiB, the lists at exit 212 -> 44
/// pages).
pub const PCP_BATCH_HIGH: (usize, usize) = (31, 63);

/// The buddy's shape: the std heap's ([`GLOBAL_CONFIG`]) with [`PURGE`].
pub const CONFIG: Config = GLOBAL_CONFIG.with_purge(PURGE);

/// mm-malloc's pages (pcp lists over its buddy): [`PAGES_CELL`]'s
/// [`GlobalPcp::with_config`]`(`[`CONFIG`]`)`, written by [`init_pages`].
#[inline(always)]
pub fn pages() -> &'static GlobalPcp {
    // SAFETY: `init_pages` (the library's init, before its first
    // allocation) wrote the heap's bytes over the zero cell; before that
    // the cell is all zero, which the lookups a `free` makes before init
    // (`page_tag`, `block_of`: only for a pointer that cannot be ours)
    // read as an empty heap.
    unsafe { (*PAGES_CELL.0.get()).assume_init_ref() }
}

/// Where [`pages`] lives: zero, in `.bss`, until [`init_pages`] writes the
/// heap's non-zero bytes, all of them in its last page ([`TAIL_FROM`]).
///
/// Why not a `static` of `GlobalPcp::with_config(CONFIG)`: its 55 KiB
/// (the pcp's per-thread lists and counters, the buddy's spans, free
/// lists and tags) are zero but for 3 KiB of settings and sentinels at
/// its end, yet that put all of it in `.data`, a private file mapping
/// whose first read of a page maps the 16 pages around it (fault-around):
/// every process had the library's `.data` resident whole (64 KiB). In
/// `.bss` a page costs only once written or read as non-zero: a shell
/// has 3 of its 14 pages resident (measured, see the commit).
#[repr(C, align(4096))]
pub struct PagesCell(UnsafeCell<MaybeUninit<GlobalPcp>>);

// SAFETY: written once by `init_pages` before any other thread can reach
// it (the library's init), shared (`&`, a `Sync` heap) afterwards.
unsafe impl Sync for PagesCell {}

/// The storage of [`pages`].
pub static PAGES_CELL: PagesCell = PagesCell(UnsafeCell::new(MaybeUninit::zeroed()));

/// The heap's bytes, as `with_config` makes them (never a heap itself:
/// copied in part by [`init_pages`]).
// (a `const`, not in the library: only `TAIL` is, its last page)
#[allow(clippy::large_const_arrays)]
const IMAGE: [MaybeUninit<u64>; WORDS] =
    // SAFETY: any bytes are valid `MaybeUninit`s; the heap holds no
    // address of itself (a copy of its bytes is the heap).
    unsafe { core::mem::transmute(GlobalPcp::with_config(CONFIG)) };

/// The heap's size in words.
const WORDS: usize = size_of::<GlobalPcp>() / 8;
const _: () = assert!(size_of::<GlobalPcp>().is_multiple_of(8) && align_of::<GlobalPcp>() <= 4096);

/// The first word of [`IMAGE`]'s last page: the words before it are all
/// zero (checked by the test `image_is_zero_before_its_tail`), so that
/// [`init_pages`] writes only that page.
pub const TAIL_FROM: usize = size_of::<GlobalPcp>() / 4096 * 4096 / 8;
const _: () = assert!(TAIL_FROM > 0 && TAIL_FROM < WORDS);

/// [`IMAGE`]'s words from [`TAIL_FROM`] on (in `.rodata`).
static TAIL: [MaybeUninit<u64>; WORDS - TAIL_FROM] = {
    let mut t = [MaybeUninit::zeroed(); WORDS - TAIL_FROM];
    let mut i = 0;
    while i < t.len() {
        t[i] = IMAGE[TAIL_FROM + i];
        i += 1;
    }
    t
};

/// Writes the heap of [`pages`]: its last page's words ([`TAIL`]) over
/// the zero cell, the rest being zero already.
///
/// # Safety
///
/// Once, before any other use of [`pages`] but the pre-init lookups, on
/// one thread (the library's init).
pub unsafe fn init_pages() {
    // SAFETY: the cell's last words, this thread's alone (the caller's
    // contract); `TAIL` does not overlap it.
    unsafe {
        core::ptr::copy_nonoverlapping(
            TAIL.as_ptr(),
            PAGES_CELL.0.get().cast::<MaybeUninit<u64>>().add(TAIL_FROM),
            TAIL.len(),
        )
    };
}

/// Where `free` reads an address's page-map byte ([`page_byte`]): the
/// map's place copied from [`pages`] once it exists ([`publish_free_map`]),
/// the heap's first page as a page number and 4 KiB pages, so that the
/// lookup is a shift, a subtraction, a compare and a byte load (seven
/// instructions; the pages' own `page_tag` loads the shift and the
/// layout's words through the pcp and the buddy: eleven, and a merge for
/// its "no tag").
#[repr(C, align(64))]
struct FreeMap {
    /// The first covered page's number (address >> 12).
    first: AtomicUsize,
    /// Pages covered (0 until published: every address misses).
    pages: AtomicUsize,
    /// One byte per covered page.
    map: AtomicPtr<u8>,
}

static FREE_MAP: FreeMap = FreeMap {
    first: AtomicUsize::new(0),
    pages: AtomicUsize::new(0),
    map: AtomicPtr::new(core::ptr::null_mut()),
};

/// The page shift [`FreeMap`] serves (the pages' map must have it).
const FREE_MAP_SHIFT: u32 = 12;

/// The page-map byte of the page holding `p` (as `pages().page_tag(p)`),
/// or `None` for an address the map does not cover (null, a direct
/// mapping, anything not ours) or before [`publish_free_map`] ran.
#[inline(always)]
pub fn page_byte(p: *const u8) -> Option<u8> {
    let m = &FREE_MAP;
    let i = (p.addr() >> FREE_MAP_SHIFT).wrapping_sub(m.first.load(Ordering::Relaxed));
    // Acquire: pairs with the publication (the other words before it).
    if i >= m.pages.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: `i` is below the covered pages, whose map is mapped for the
    // rest of the process (`PageAlloc::page_map`); its bytes are only
    // accessed atomically.
    Some(
        unsafe { AtomicU8::from_ptr(m.map.load(Ordering::Relaxed).add(i)) }.load(Ordering::Relaxed),
    )
}

/// Copies the pages' map place into [`FreeMap`] once the map exists
/// (called by the allocation slow path until then: the map is made with
/// the heap's first reservation). Racing callers store the same words.
#[inline(always)]
pub fn publish_free_map() {
    if FREE_MAP.pages.load(Ordering::Relaxed) == 0 {
        publish_free_map_slow();
    }
}

#[cold]
#[inline(never)]
fn publish_free_map_slow() {
    use buddy::PageAlloc;
    let Some(v) = pages().page_map() else { return };
    if v.shift != FREE_MAP_SHIFT || v.base % (1 << FREE_MAP_SHIFT) != 0 {
        return;
    }
    FREE_MAP
        .first
        .store(v.base >> FREE_MAP_SHIFT, Ordering::Relaxed);
    FREE_MAP.map.store(v.map.cast_mut(), Ordering::Relaxed);
    FREE_MAP.pages.store(v.pages, Ordering::Release);
}

/// The buddy under [`pages`]: direct mappings, purge, statistics.
#[inline(always)]
pub fn heap() -> &'static GlobalBuddy {
    pages().pcp().source()
}

/// The fork handlers of [`PAGES`] (its pcp's at `level::PAGES`, its
/// buddy's at `level::BUDDY`): the pages' own, except in a
/// single-threaded process, where no other thread can hold their locks
/// and no lock is taken (as the caches' handler, `CachesFork`,
/// does). Taking them wrote the lock words all over the buddy's 28 KiB of
/// state and the pcp's records before each `fork`, and releasing them
/// copied those pages in the child and again in the parent: 13 more page
/// faults in a child before `fork` returned (measured: 31, glibc 18,
/// mimalloc 17), in every subshell of a shell script.
pub struct PagesFork {
    /// Buddy (`true`) or pcp (`false`).
    buddy: bool,
    /// `prepare` found the process single-threaded and took no lock.
    skipped: AtomicBool,
}

impl PagesFork {
    const fn new(buddy: bool) -> Self {
        PagesFork {
            buddy,
            skipped: AtomicBool::new(false),
        }
    }

    fn locks(&self) -> &'static dyn ForkLocks {
        if self.buddy {
            heap()
        } else {
            pages()
        }
    }

    /// Registers both handlers (once, at init, holding no lock).
    pub fn register() {
        local_lock::fork::register(&PCP_FORK, level::PAGES);
        local_lock::fork::register(&BUDDY_FORK, level::BUDDY);
    }
}

static PCP_FORK: PagesFork = PagesFork::new(false);
static BUDDY_FORK: PagesFork = PagesFork::new(true);

impl ForkLocks for PagesFork {
    fn fork_prepare(&self) {
        let skip = local_lock::fork::single_threaded();
        self.skipped.store(skip, Ordering::Relaxed);
        if !skip {
            self.locks().fork_prepare();
        }
    }
    unsafe fn fork_parent(&self) {
        if !self.skipped.load(Ordering::Relaxed) {
            // SAFETY: taken by `fork_prepare` on this thread.
            unsafe { self.locks().fork_parent() };
        }
    }
    unsafe fn fork_child(&self) {
        if !self.skipped.load(Ordering::Relaxed) {
            // SAFETY: taken by `fork_prepare` on the thread this child
            // copies.
            unsafe { self.locks().fork_child() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of large frees leaves at most [`MAX_RESIDENT_FREE_PAGES`]
    /// and half of it resident in the buddy (the cap is checked whenever
    /// half of it was freed in large blocks): 1 MiB and half of it
    /// before. (Other tests allocate at the same time: the bound checked
    /// is twice that.)
    /// Allocates `n` blocks of `size` bytes, writes them, then frees them.
    fn burst(size: usize, n: usize) {
        let blocks: Vec<*mut u8> = (0..n)
            .map(|_| {
                let p = crate::malloc(size).cast::<u8>();
                assert!(!p.is_null());
                // SAFETY: `size` bytes of ours.
                unsafe { p.write_bytes(1, size) };
                p
            })
            .collect();
        for p in blocks {
            // SAFETY: each block once.
            unsafe { crate::free(p.cast()) };
        }
    }

    #[test]
    fn a_burst_of_large_frees_leaves_little_resident() {
        use buddy::ZoneId;
        burst(64 << 10, 40);
        let b = heap().buddy();
        let z = ZoneId::new(0);
        let resident = b.nr_resident_free_pages(z);
        // 128 KiB and half of it, twice (1 MiB before: 256 pages); plus
        // what `PURGE.resident_shift` allows for the pages in use, which
        // the other tests, running meanwhile, raise (this test failed
        // when they held a few MiB).
        let in_use = b.managed_pages(z).saturating_sub(b.nr_free_pages(z));
        let bound = 96 + PURGE.resident_shift.map_or(0, |s| 2 * (in_use >> s));
        assert!(
            resident <= bound,
            "{resident} free pages resident after the burst (bound {bound})"
        );
    }

    /// Freed pages stay on the CPU's lists only up to [`PCP_BATCH_HIGH`]'s
    /// `high` (the std heap's 378 before).
    #[test]
    fn freed_pages_on_the_lists_are_bounded() {
        assert_eq!(pages().pcp().batch_high(), PCP_BATCH_HIGH);
        // Slabs emptied by frees go back to the page lists.
        for size in [1000, 3000, 12 << 10] {
            burst(size, 2000);
        }
        let l = pages().pcp().local_lists();
        assert!(l.high <= PCP_BATCH_HIGH.1, "the list's high: {}", l.high);
        assert!(
            l.count <= PCP_BATCH_HIGH.1,
            "{} pages left on the lists",
            l.count
        );
    }

    /// [`init_pages`] writes only the heap's last page ([`TAIL_FROM`] on):
    /// every word before it is zero in `with_config`'s heap (a field of
    /// the pcp or the buddy given a non-zero initial value before its last
    /// page fails this; [`TAIL_FROM`] must then move).
    #[test]
    fn image_is_zero_before_its_tail() {
        let img = Box::new(IMAGE);
        let words = img.as_ptr().cast::<u64>();
        for w in 0..TAIL_FROM {
            // SAFETY: within the image; read as a plain word, padding
            // included (as `copy_nonzero_words` does).
            let v = unsafe { words.add(w).read_volatile() };
            assert_eq!(v, 0, "word {w} of {WORDS} ({:#x}) is not zero", w * 8);
        }
    }

    /// The storage is page-aligned (its tail one page) and after init holds
    /// the heap's settings ([`CONFIG`], the lists' bounds).
    #[test]
    fn the_heap_was_written_at_init() {
        // SAFETY: a block of ours, freed once.
        unsafe { crate::free(crate::malloc(1)) };
        assert!((&raw const PAGES_CELL).addr().is_multiple_of(4096));
        assert_eq!(pages().pcp().batch_high(), PCP_BATCH_HIGH);
        assert_eq!(*heap().buddy().config(), CONFIG);
    }
}
