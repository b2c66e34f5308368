//! `GlobalSlub` as the global allocator of this test binary: ordinary std
//! code (collections, strings, threads that come and go) runs on it.
#![cfg(not(loom))]

use std::collections::{BTreeMap, HashMap};

use slub::SlubStat;

#[global_allocator]
static HEAP: slub::GlobalSlub = slub::GlobalSlub::new();

#[test]
fn std_collections_and_threads_run_on_it() {
    let mut m: HashMap<u64, String> = HashMap::new();
    for i in 0..20_000u64 {
        m.insert(i, format!("value {i}"));
    }
    let mut b = BTreeMap::new();
    for i in 0..20_000u64 {
        b.insert(format!("{i:08}"), vec![i as u8; (i % 300) as usize]);
    }
    // Threads that come and go, each allocating, passing and freeing.
    for round in 0..20 {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut v: Vec<Vec<u8>> = Vec::new();
                    for i in 0..3_000usize {
                        v.push(vec![(t * 31 + i + round) as u8; 1 + (i * 37) % 9_000]);
                        if i % 3 == 0 {
                            v.swap_remove(i % v.len());
                        }
                    }
                    for x in &v {
                        assert!(x.iter().all(|&y| y == x[0]));
                    }
                    v
                })
            })
            .collect();
        for h in handles {
            // Freed on this thread: remote frees.
            let v = h.join().unwrap();
            assert!(!v.is_empty());
        }
    }
    for i in 0..20_000u64 {
        assert_eq!(m[&i], format!("value {i}"));
        assert_eq!(b[&format!("{i:08}")].len(), (i % 300) as usize);
    }
    // Large (pages, direct mapping) and zeroed allocations.
    let big = vec![0u8; 9 << 20];
    assert!(big.iter().all(|&x| x == 0));
    let mid = vec![0u64; 5000];
    assert!(mid.iter().all(|&x| x == 0));
    let k = HEAP.kmalloc();
    // The defaults: hardened free pointers, sheaves (fewer objects per
    // sheaf for large classes).
    for (i, c) in k.caches().iter().enumerate() {
        assert!(
            c.flags().contains(slub::SlabFlags::HARDENED),
            "{}",
            c.name()
        );
        assert_eq!(
            c.sheaf_capacity(),
            slub::kmalloc_sheaf_capacity(i, slub::GlobalSlub::DEFAULT_SHEAVES)
        );
        assert!(c.sheaf_capacity() >= 4);
    }
    assert_eq!(
        k.caches()[3].sheaf_capacity(),
        125,
        "kmalloc-64 (128 trimmed to fill 1 KiB)"
    );
    assert_eq!(k.caches()[12].sheaf_capacity(), 4, "kmalloc-8k");
    let s = k.stats();
    // The default has sheaves: most objects come from and go to them.
    let per_cpu = s.get(SlubStat::ALLOC_PCS) + s.get(SlubStat::ALLOC_FASTPATH);
    assert!(per_cpu > s.get(SlubStat::ALLOC_SLOWPATH), "{s}");
    assert!(s.get(SlubStat::FREE_PCS) > 0, "{s}");
    assert!(s.get(SlubStat::SHEAF_REFILL) > 0, "{s}");
    // kfree/ksize without sizes through the global instance.
    let p = k.kmalloc(100, 8).unwrap();
    assert_eq!(k.ksize(p.as_ptr()), 128);
    // SAFETY: ours.
    unsafe { k.kfree(p.as_ptr()) };
    let report = format!("{}", k.report());
    assert!(report.contains("kmalloc-128"));
}
