//! The pages under mm-malloc: a pcp over a buddy of the library's own
//! ([`PAGES`]), not slub's shared `GlobalPages`, so that its purge policy
//! can be a C allocator's ([`PURGE`]) while Rust programs' `GlobalSlub`
//! keeps the std heap's. Its caches take `&PAGES` as their page source
//! (`PageAlloc for &T`); large blocks and direct mappings go to it (and
//! to its buddy, [`heap`]) directly.

use buddy::{Config, GlobalBuddy, PurgePolicy, GLOBAL_CONFIG};
use pcp::GlobalPcp;

/// When free pages go back to the OS (`madvise(MADV_DONTNEED)`): free
/// blocks of 32 KiB and more (order 3: the largest slab) are purged once
/// more than 1 MiB of them stays resident (checked at most every 10 ms on
/// the slow paths: glibc returns the top of its heap above 128 KiB at
/// once, mimalloc purges after 10 ms), and any left free for 100 ms.
/// The std heap's default keeps up to 32 MiB resident, blocks of 2 MiB
/// and more only, for 5 s: with it a C program's peak RSS was 1.27x
/// glibc's (python's stdlib tests; measured in the crate's notes).
pub const PURGE: PurgePolicy = PurgePolicy {
    order: 3,
    decay_ms: Some(100),
    max_resident_pages: Some(256),
    ..PurgePolicy::DEFAULT
};

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

/// mm-malloc's pages (pcp lists over its buddy).
pub static PAGES: GlobalPcp = GlobalPcp::with_config(CONFIG);

/// The buddy under [`PAGES`]: direct mappings, purge, statistics.
#[inline(always)]
pub fn heap() -> &'static GlobalBuddy {
    PAGES.pcp().source()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed pages stay on the CPU's lists only up to [`PCP_BATCH_HIGH`]'s
    /// `high` (the std heap's 378 before).
    #[test]
    fn freed_pages_on_the_lists_are_bounded() {
        assert_eq!(PAGES.pcp().batch_high(), PCP_BATCH_HIGH);
        // Slabs emptied by frees go back to the page lists.
        for size in [1000, 3000, 12 << 10] {
            let blocks: Vec<*mut u8> = (0..2000)
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
        let l = PAGES.pcp().local_lists();
        assert!(l.high <= PCP_BATCH_HIGH.1, "the list's high: {}", l.high);
        assert!(
            l.count <= PCP_BATCH_HIGH.1,
            "{} pages left on the lists",
            l.count
        );
    }
}
