//! Tests of the pcp's fidelity to mm/page_alloc.c (issue #20's
//! divergences): each names the kernel function it follows.

use std::vec::Vec;

use buddy::{AllocFlags, FreeFlags};
use local_lock::test_platform::TestPlatform;

use super::alloc_n;
use crate::testing::{o, Mem, CPUS, O0};
use crate::Policy;

#[test]
fn a_batch_free_drains_the_freed_orders_list_before_the_next() {
    // free_pcppages_bulk (Linux 5.18+): the list of the freed order goes
    // first and is drained to empty (or to the count) before the
    // round-robin moves on, not one block per list in turn.
    let m = Mem::new(8, false);
    let pcp = m.pcp(TestPlatform::pinned(CPUS), Policy::IrqSafe);
    pcp.set_batch_high(Some((4, 16))).unwrap();
    let small = alloc_n(&pcp, O0, 13);
    let pairs = alloc_n(&pcp, o(1), 3);
    pcp.drain_local();
    // Interleaved, so no run of order-1 frees triggers `free_high`:
    // 3 order-1 blocks and 3 pages, count 9.
    for (&p, &q) in pairs.iter().zip(&small) {
        // SAFETY: ours, freed once each.
        unsafe {
            pcp.free(p, o(1), FreeFlags::NONE);
            pcp.free(q, O0, FreeFlags::NONE);
        }
    }
    // 7 more pages reach high (16): nr_pcp_free = clamp(free_count, 4, 12).
    for &q in &small[3..10] {
        // SAFETY: ours, freed once.
        unsafe { pcp.free(q, O0, FreeFlags::NONE) };
    }
    let l = pcp.local_lists();
    // 10 order-0 pages drained first, then one order-1 block: 12 pages.
    assert_eq!((l.normal[0].len, l.normal[1].len), (0, 2), "{l:?}");
    assert_eq!(l.count, 4);
    let rest: Vec<_> = small[10..].to_vec();
    // SAFETY: ours, freed once.
    unsafe { pcp.free_bulk(&rest) };
    pcp.check_local();
    pcp.drain_local();
    assert_eq!(m.buddy.total_free_pages(), m.buddy.total_managed_pages());
}

#[test]
fn trylock_drains_other_cpus_lists_on_a_pinned_platform() {
    // drain_pages(cpu) / drain_all_pages (Linux 6.0+): other CPUs' lists
    // are drained directly under their `pcp->lock`, a real per-CPU spin
    // lock, whatever the configuration; `Trylock` takes it with
    // `spin_trylock`, the drains with `spin_lock`.
    let m = Mem::new(8, false);
    let plat = TestPlatform::pinned(CPUS);
    let pcp = m.pcp(plat, Policy::Trylock);
    pcp.set_batch_high(Some((4, 1000))).unwrap();
    for cpu in 1..3 {
        plat.on_cpu(cpu, || {
            let p = pcp.alloc(O0, AllocFlags::NONE).unwrap();
            // SAFETY: ours, freed once.
            unsafe { pcp.free(p.ptr, O0, FreeFlags::NONE) };
        });
    }
    plat.on_cpu(0, || {
        assert_eq!(pcp.cpu_lists(1).map(|l| l.count), Some(4));
        assert_eq!(pcp.prezero_cpu(1, 1), Ok(1));
        assert_eq!(pcp.decay_pcp_high_cpu(1), Ok(0));
        assert_eq!(pcp.drain_cpu(1), Ok(4));
        assert_eq!(pcp.drain_all(), (4, 0), "CPU 2's pages, none refused");
    });
    assert_eq!(pcp.total_count(), 0);
    // The lists still work locally afterwards (the slots were released).
    plat.on_cpu(1, || {
        let p = pcp.alloc(O0, AllocFlags::NONE).unwrap();
        // SAFETY: ours, freed once.
        unsafe { pcp.free(p.ptr, O0, FreeFlags::NONE) };
        pcp.check_local();
        assert_eq!(pcp.drain_local(), 4);
    });
    assert_eq!(m.buddy.total_free_pages(), m.buddy.total_managed_pages());
}
