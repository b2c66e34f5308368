//! `__alloc_pages_slowpath`: what a request does once the buddy's
//! zonelist passes (`get_page_from_freelist`: low, then min watermark,
//! then `ALLOC_NO_WATERMARKS` for `__GFP_MEMALLOC`) have failed. Rounds of
//! the source's growth ([`BuddySource::grow`]) and, for requests that may
//! block, its reclaim hook ([`BuddySource::reclaim`], by default the
//! platform's [`reclaim_pages`](local_lock::Platform::reclaim_pages)),
//! each followed by a retry, under the gfp retry policy; then the failure
//! report (`warn_alloc`) unless `__GFP_NOWARN`.
//!
//! | flags | rounds |
//! |---|---|
//! | `NORETRY` | one |
//! | none, order <= `COSTLY_ORDER` | while growth or reclaim makes progress, at most [`MAX_GROW_RETRIES`] |
//! | none, costly order | one (`costly_order && !__GFP_RETRY_MAYFAIL`) |
//! | `RETRY_MAYFAIL` | while growth or reclaim makes progress |
//! | `NOFAIL` (blocking) | forever; after each round the min reserve (`ALLOC_MIN_RESERVE`), the platform's back-off after a round without progress |

use local_lock::sync::Backoff;
use local_lock::Platform;

use crate::source::{BuddySource, MAX_GROW_RETRIES};
use crate::types::{AllocFlags, Order, Stat};

/// The slow path around `attempt` (one try of the request with the flags
/// given: the buddy's [`alloc_block`](crate::Buddy::alloc_block), or a
/// per-CPU layer's list path), after the caller's first attempt failed.
/// Returns the first success, or `None` once the policy of `flags` gives
/// up (after reporting the failure unless [`AllocFlags::NOWARN`]). For
/// layers that add their own attempt (pcp's lists); a plain request is
/// [`BuddySource::alloc_or_grow`].
///
/// ```
/// use buddy::{alloc_slowpath, AllocFlags, Buddy, Config, Order, Stat, Tunables};
/// use local_lock::std_platform::StdCpu;
/// // An empty buddy without growth or reclaim: the slow path gives up
/// // at once and reports the failure, unless NOWARN.
/// let heap = Buddy::new(StdCpu, Config::new(4096, 4).with_tunables(Tunables::NO_MIN));
/// let r = alloc_slowpath(&heap, Order::ZERO, AllocFlags::NONE, |f| heap.alloc_block(Order::ZERO, f));
/// assert!(r.is_none());
/// let r = alloc_slowpath(&heap, Order::ZERO, AllocFlags::NOWARN, |f| heap.alloc_block(Order::ZERO, f));
/// assert!(r.is_none());
/// assert_eq!((heap.stat(Stat::ALLOC_FAIL), heap.stat(Stat::WARN_ALLOC)), (2, 1));
/// ```
#[cold]
#[inline(never)]
pub fn alloc_slowpath<S, T>(
    src: &S,
    order: Order,
    flags: AllocFlags,
    mut attempt: impl FnMut(AllocFlags) -> Option<T>,
) -> Option<T>
where
    S: BuddySource + ?Sized,
{
    let b = src.buddy();
    let may_block = !flags.contains(AllocFlags::NONBLOCK);
    let memalloc = flags.contains(AllocFlags::MEMALLOC) && !flags.contains(AllocFlags::NOMEMALLOC);
    // PF_MEMALLOC: the reclaimer does not recurse into reclaim.
    let may_reclaim = may_block && !memalloc;
    let nofail = flags.contains(AllocFlags::NOFAIL) && may_block && order <= b.config().max_order();
    let max_rounds = if nofail {
        usize::MAX
    } else if flags.contains(AllocFlags::NORETRY) {
        1
    } else if flags.contains(AllocFlags::RETRY_MAYFAIL) {
        usize::MAX
    } else if order.get() > AllocFlags::COSTLY_ORDER {
        1
    } else {
        MAX_GROW_RETRIES
    };
    let backoff = Backoff::new();
    let mut rounds = 0usize;
    loop {
        rounds = rounds.saturating_add(1);
        let mut progress = false;
        // Growth first (the source's own memory: the std heap maps more);
        // other CPUs may take what it added before our retry.
        if src.grow(order) {
            progress = true;
            if let Some(x) = attempt(flags) {
                return Some(x);
            }
        }
        if may_reclaim {
            let n = src.reclaim(order, flags);
            b.count_top(flags, Stat::RECLAIM, 1);
            if n > 0 {
                b.count_top(flags, Stat::RECLAIMED_PAGES, n as u64);
                progress = true;
                if let Some(x) = attempt(flags) {
                    return Some(x);
                }
            }
        }
        if nofail {
            // __alloc_pages_cpuset_fallback(ALLOC_MIN_RESERVE).
            if let Some(x) = attempt(flags | AllocFlags::HIGH) {
                return Some(x);
            }
            if !progress {
                b.platform().spin_wait(&backoff);
            }
            continue;
        }
        if !progress || rounds >= max_rounds {
            break;
        }
    }
    b.count_top(flags, Stat::ALLOC_FAIL, 1);
    if !flags.contains(AllocFlags::NOWARN) {
        b.count_top(flags, Stat::WARN_ALLOC, 1);
        src.warn_alloc(order, flags);
    }
    None
}
