//! `GlobalPcp` as the global allocator of this test binary: ordinary std
//! code (collections, strings, threads) runs on it.
#![cfg(not(loom))]

use std::collections::HashMap;

#[global_allocator]
static HEAP: pcp::GlobalPcp = pcp::GlobalPcp::new();

#[test]
fn std_collections_and_threads_run_on_it() {
    let mut m: HashMap<u64, String> = HashMap::new();
    for i in 0..5_000u64 {
        m.insert(i, format!("value {i}"));
    }
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut v: Vec<Vec<u8>> = Vec::new();
                for i in 0..2_000usize {
                    v.push(vec![(t * 31 + i) as u8; 1 + (i * 37) % 20_000]);
                    if i % 3 == 0 {
                        v.swap_remove(i % v.len());
                    }
                }
                for b in &v {
                    assert!(b.iter().all(|&x| x == b[0]));
                }
                v.len()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap() > 0);
    }
    for i in 0..5_000u64 {
        assert_eq!(m[&i], format!("value {i}"));
    }
    // Large (direct mapping) and zeroed allocations.
    let big = vec![0u8; 9 << 20];
    assert!(big.iter().all(|&b| b == 0));
    let s = HEAP.pcp().stats();
    // A vm event: counted with the `stats` feature (the default).
    assert!(!cfg!(feature = "stats") || s.get(pcp::PcpStat::ALLOC_HIT) > 0);
    assert!(s.get(pcp::PcpStat::REFILL) > 0);
}
