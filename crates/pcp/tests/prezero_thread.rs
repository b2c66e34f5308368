//! The std background-zeroing helper over a pcp on real CPUs (`StdCpu`):
//! pages freed dirty become zero-list pages without any request clearing
//! them, and zeroed requests are then served without clearing.
#![cfg(not(loom))]

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use buddy::{AllocFlags, FreeFlags, GlobalBuddy, Order, ZoneId};
use local_lock::std_platform::StdCpu;
use pcp::{spawn_prezero_thread, Pcp, PcpStat, Policy};

static PCP: Pcp<GlobalBuddy, StdCpu> = Pcp::new_tuned(
    GlobalBuddy::new(),
    ZoneId::new(0),
    StdCpu::new(),
    Policy::Trylock,
    Some((16, 1024)),
);
static STOP: AtomicBool = AtomicBool::new(false);

#[test]
fn helper_thread_zeroes_cold_pages() {
    // Dirty pages on this CPU's lists.
    let pages: Vec<_> = (0..64)
        .map(|_| PCP.alloc(Order::ZERO, AllocFlags::NONE).unwrap())
        .collect();
    for p in &pages {
        // SAFETY: ours.
        unsafe { p.ptr.as_ptr().write_bytes(0xa5, 4096) };
    }
    for p in pages {
        // SAFETY: ours, dirty.
        unsafe { PCP.free(p.ptr, Order::ZERO, FreeFlags::NONE) };
    }
    let h = spawn_prezero_thread(&PCP, 8, Duration::from_millis(1), &STOP);
    let t0 = std::time::Instant::now();
    while PCP.stats().get(PcpStat::PREZERO_PAGES) < 32 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(2));
    }
    STOP.store(true, std::sync::atomic::Ordering::Release);
    let zeroed = h.join().unwrap();
    assert!(zeroed >= 32, "helper zeroed {zeroed} pages");
    // Zeroed requests now hit the zero list (on whichever CPU we run).
    let before = PCP.stats().get(PcpStat::ALLOC_ZERO_HIT);
    let mut got = Vec::new();
    for _ in 0..8 {
        let p = PCP.alloc(Order::ZERO, AllocFlags::ZEROED).unwrap();
        // SAFETY: ours.
        let s = unsafe { std::slice::from_raw_parts(p.ptr.as_ptr(), 4096) };
        assert!(s.iter().all(|&b| b == 0));
        got.push(p);
    }
    assert!(PCP.stats().get(PcpStat::ALLOC_ZERO_HIT) > before);
    for p in got {
        // SAFETY: ours, still zero.
        unsafe { PCP.free(p.ptr, Order::ZERO, FreeFlags::ZERO) };
    }
}
