//! The watermark check of list hits and the gfp slow path through the
//! lists (issue #20): as the kernel's `get_page_from_freelist`, a request
//! that the zone's watermark refuses is not served from the per-CPU lists
//! (`zone_watermark_fast` before `rmqueue_pcplist`), even with pages on
//! them.

use std::vec::Vec;

use buddy::{AllocFlags, FreeFlags, Tunables, ZoneId};
use local_lock::test_platform::TestPlatform;

use crate::testing::{Mem, CPUS, O0};
use crate::tests::ev;
use crate::{PcpStat, Policy};

/// 1 MiB of 4 KiB pages, min 32 / low 40: between min and low the lists
/// still serve (one zone: nothing lower to try first); below min a plain
/// request is not served from the lists although they hold pages (the
/// buddy refuses it too, the lists are drained and the retry succeeds);
/// a `HIGH` one (min halved) is served through them.
#[test]
fn list_hits_pass_the_zone_watermark_first() {
    let m = Mem::new(1, false);
    m.buddy.set_tunables(Tunables {
        min_free_kbytes: Some(128),
        ..Tunables::KERNEL
    });
    let z = ZoneId::new(0);
    let w = m.buddy.watermarks(z);
    assert_eq!((w.min, w.low), (32, 40));
    let pcp = m.pcp(TestPlatform::pinned(CPUS), Policy::IrqSafe);
    pcp.set_batch_high(Some((16, 64))).unwrap();
    let mut held = Vec::new();
    held.push(pcp.alloc(O0, AllocFlags::NONE).unwrap());
    assert_eq!(pcp.total_count(), 15, "one batch on the lists");
    let mut direct = Vec::new();
    let mut down_to = |n: usize| {
        while m.buddy.nr_free_pages(z) > n {
            direct.push(m.buddy.alloc_pages(O0, AllocFlags::ATOMIC).unwrap());
        }
    };
    down_to(36);
    held.push(pcp.alloc(O0, AllocFlags::NONE).expect("above min"));
    assert_eq!(pcp.stats().get(PcpStat::ALLOC_HIT), ev(2));
    down_to(30);
    // Below min: no list hit (14 pages on the lists); the buddy refuses
    // too, so the lists are drained (as the kernel's drain_all_pages) and
    // the retry is served by the buddy.
    held.push(pcp.alloc(O0, AllocFlags::NONE).expect("after the drain"));
    assert_eq!(pcp.stats().get(PcpStat::ALLOC_HIT), ev(2), "not a list hit");
    assert_eq!(pcp.stats().get(PcpStat::WATERMARK_BYPASS), 1);
    assert_eq!(pcp.total_count(), 0, "the lists were drained");
    assert_eq!(m.buddy.nr_free_pages(z), 30 + 14 - 1);
    // Below min again: HIGH (min halved) takes its page through the lists.
    down_to(30);
    held.push(pcp.alloc(O0, AllocFlags::HIGH).expect("HIGH: min/2"));
    assert_eq!(pcp.stats().get(PcpStat::ALLOC_HIT), ev(3));
    assert_eq!(pcp.stats().get(PcpStat::WATERMARK_BYPASS), 1);
    for p in held.into_iter().chain(direct) {
        // SAFETY: ours, order 0, freed once.
        unsafe { pcp.free(p.ptr, O0, FreeFlags::NONE) };
    }
    pcp.drain_local();
    assert_eq!(m.buddy.total_free_pages(), m.buddy.total_managed_pages());
}

/// A fixed heap whose free pages all sit on this CPU's lists: the zone
/// has no free page for the watermark, so the request goes to the buddy,
/// which fails; as the kernel drains the lists after direct reclaim, the
/// lists go back to the buddy and the retry is served.
#[test]
fn pages_on_the_lists_are_drained_for_a_request_the_zone_refuses() {
    let m = Mem::new(1, false);
    let z = ZoneId::new(0);
    let pcp = m.pcp(TestPlatform::pinned(CPUS), Policy::IrqSafe);
    pcp.set_batch_high(Some((16, 4096))).unwrap();
    let mut held = Vec::new();
    while let Some(p) = pcp.alloc(O0, AllocFlags::NOWARN) {
        held.push(p);
    }
    assert_eq!(m.buddy.nr_free_pages(z), 0);
    for p in held.drain(..8) {
        // SAFETY: ours, order 0, freed once.
        unsafe { pcp.free(p.ptr, O0, FreeFlags::NONE) };
    }
    assert_eq!((pcp.total_count(), m.buddy.nr_free_pages(z)), (8, 0));
    held.push(
        pcp.alloc(O0, AllocFlags::NONE)
            .expect("drained and retried"),
    );
    assert_eq!(pcp.total_count(), 0, "the lists were drained");
    for p in held {
        // SAFETY: ours, order 0, freed once.
        unsafe { pcp.free(p.ptr, O0, FreeFlags::NONE) };
    }
    pcp.drain_local();
    assert_eq!(m.buddy.total_free_pages(), m.buddy.total_managed_pages());
}

/// A block its holder left a (non-pcp) tag on still goes back to the lists
/// (the free fast path takes tag 0 only; the cold path tells a holder's
/// tag from the lists').
#[test]
fn a_block_with_a_holders_tag_frees_to_the_lists() {
    use local_lock::sync::atomic::Ordering::Relaxed;
    let m = Mem::new(1, false);
    let pcp = m.pcp(TestPlatform::pinned(CPUS), Policy::IrqSafe);
    pcp.set_batch_high(Some((4, 16))).unwrap();
    let b = pcp.alloc_block(O0, AllocFlags::NONE).unwrap();
    b.owner.tag().store(0x51ab_0001, Relaxed);
    let before = pcp.local_lists().count;
    // SAFETY: ours, freed once.
    unsafe { pcp.free(b.page.ptr, b.page.order, FreeFlags::NONE) };
    assert_eq!(pcp.local_lists().count, before + 1);
    // SAFETY: on the lists now: refused, nothing changes.
    let e = unsafe { pcp.try_free(b.page.ptr, O0, FreeFlags::NONE) }.unwrap_err();
    assert_eq!(e.kind, crate::BadFreeKind::OnPcpList);
    pcp.check_local();
    pcp.drain_local();
}
